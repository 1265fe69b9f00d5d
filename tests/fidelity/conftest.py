"""The fidelity tests' folder: loading this conftest puts tests/fidelity on the import path (pytest's
default import mode), so that tests/fidelity/sources/ imports `fidelity_helpers` as its siblings do."""

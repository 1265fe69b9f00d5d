"""Shared pytest fixtures: the location of ../shared/data (skipping when absent) and GPU detection.

A test that reads the public data folder asks for the `shared_data` fixture (its path), or carries
the `shared_data` marker when it reads it through a library default (an importer's default folder);
either way it skips with the reason when the folder is absent, as in a user's clone without
../shared. `SERVESIM_SHARED_DATA` moves the folder (`calibrate.importers.shared_data`); CI runs the
suite once with it and once pointing at an empty folder.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.importers.shared_data import ENV, shared_data_dir, shared_data_present

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = shared_data_dir()
HAS_SHARED_DATA = shared_data_present()
NO_SHARED_DATA = f"shared data not found at {SHARED_DATA} (absent or empty; set {ENV} to enable)"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only public data folder; tests that need it skip with a reason when it is absent."""
    if not HAS_SHARED_DATA:
        pytest.skip(NO_SHARED_DATA)
    return SHARED_DATA


def pytest_collection_modifyitems(config, items):
    if not HAS_SHARED_DATA:
        skip_data = pytest.mark.skip(reason=NO_SHARED_DATA)
        for item in items:
            if item.get_closest_marker("shared_data") is not None:
                item.add_marker(skip_data)
    try:
        import torch  # noqa: F401

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)

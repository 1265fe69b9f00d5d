"""Importers of published per-op measurements into servesim profiles (same format as `calibrate`).

- `aiconfigurator`: the per-op database inside the PyPI package `aiconfigurator-core` (Apache-2.0;
  H100/H200/A100 GEMM, context and generation attention, NCCL and vLLM custom all-reduce).
- `h100_microbench`: ../shared/data/profiles/h100-kernel-microbench (Apache-2.0; H100 GEMM and
  attention kernels).

`import_profile(source, gpu, model, tp)` dispatches by name.
"""
from __future__ import annotations

from pathlib import Path

from policies import ConfigError
from sim.latency.profiled import Profile

SOURCES = ("aiconfigurator", "h100-microbench")


def import_profile(source: str, gpu: str, model: str, tp: int = 1, data_dir: str | Path | None = None) -> Profile:
    """Build a profile for `model` at tensor parallelism `tp` on `gpu` from published data."""
    if source not in SOURCES:
        raise ConfigError(f"source: {source!r} is not allowed; choose one of {', '.join(SOURCES)}")
    if source == "aiconfigurator":
        from calibrate.importers.aiconfigurator import import_aiconfigurator

        return import_aiconfigurator(gpu, model, tp)
    from calibrate.importers.h100_microbench import import_h100_microbench

    return import_h100_microbench(gpu, model, tp, data_dir=data_dir)

"""Sampling token counts from a `LengthDist` (constant, uniform, lognormal, empirical)."""
from __future__ import annotations

import math

import numpy as np

from sim.workload.config import LengthDist
from sim.workload.traces import read_trace


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator, column: str = "prompt") -> np.ndarray:
    """`n` integer lengths >= `dist.min` (and <= `dist.max`); `column` picks prompt/output for empirical."""
    if dist.kind == "constant":
        x = np.full(n, dist.value, dtype=np.int64)
    elif dist.kind == "uniform":
        x = rng.integers(dist.low, dist.high + 1, size=n)
    elif dist.kind == "lognormal":
        # median m <=> mu = ln m; mean M <=> mu = ln M - sigma^2 / 2 (the lognormal's mean is e^(mu + s^2/2))
        mu = math.log(dist.median) if dist.median is not None else math.log(dist.mean) - dist.sigma**2 / 2
        x = np.rint(rng.lognormal(mu, dist.sigma, size=n)).astype(np.int64)
    elif dist.kind == "empirical":
        trace = read_trace(dist.path, field=f"{dist.field}.path")
        values = trace.prompt_tokens if column == "prompt" else trace.output_tokens
        x = rng.choice(values, size=n, replace=True)
    else:  # pragma: no cover - the config validates kind
        raise ValueError(f"{dist.field}.kind: {dist.kind!r}")
    return np.clip(x, dist.min, dist.max if dist.max is not None else None).astype(np.int64)

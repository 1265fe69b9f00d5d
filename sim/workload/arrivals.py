"""Open-loop arrival processes: Poisson, gamma (burstiness knob), constant rate, staged rates.

Arrival times are the cumulative sums of i.i.d. gaps with mean 1/rate; gamma gaps have shape
k = 1/cv^2 and scale 1/(rate k), so their coefficient of variation is `cv` (cv = 1 is Poisson,
cv = 0 a constant rate, cv > 1 bursty). Generation stops after `num_requests` arrivals or at
`duration` seconds, whichever comes first.
"""
from __future__ import annotations

import math

import numpy as np


def gaps(rng: np.random.Generator, rate: float, cv: float, n: int) -> np.ndarray:
    """`n` inter-arrival gaps with mean 1/rate and coefficient of variation `cv`."""
    if cv == 0:
        return np.full(n, 1.0 / rate)
    if cv == 1:
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / cv**2
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


def arrival_times(rng: np.random.Generator, rate: float, cv: float = 1.0, num_requests: int | None = None,
                  duration: float | None = None, start: float = 0.0) -> np.ndarray:
    """Arrival times in [start, start + duration) of a renewal process (see the module doc)."""
    if num_requests is None and duration is None:
        raise ValueError("workload.num_requests: give num_requests or duration")
    if rate <= 0:
        return np.empty(0)
    if num_requests is not None:
        t = start + np.cumsum(gaps(rng, rate, cv, num_requests))
        return t if duration is None else t[t < start + duration]
    # duration only: draw in chunks of the expected count plus slack until past the end
    chunks, t0, end = [], start, start + duration
    chunk = max(16, int(rate * duration * 1.1 + 6 * math.sqrt(rate * duration * (1 + cv**2)) + 1))
    while t0 < end:
        t = t0 + np.cumsum(gaps(rng, rate, cv, chunk))
        chunks.append(t[t < end])
        t0 = t[-1]
    return np.concatenate(chunks)


def staged_arrival_times(rng: np.random.Generator, stages, cv: float = 1.0,
                         num_requests: int | None = None) -> np.ndarray:
    """Stages of `(rate, duration)` back to back; each stage is its own renewal process."""
    out, t0 = [], 0.0
    for rate, dur in stages:
        out.append(arrival_times(rng, rate, cv, duration=dur, start=t0))
        t0 += dur
    t = np.concatenate(out) if out else np.empty(0)
    return t if num_requests is None else t[:num_requests]

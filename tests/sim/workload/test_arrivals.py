"""Arrival processes against renewal-process theory (tolerances of several standard errors)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.workload.arrivals import arrival_times, staged_arrival_times

N = 20_000


def cv_of(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1) / np.mean(x))


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    t = arrival_times(np.random.default_rng(1), rate=5.0, cv=1.0, num_requests=N)
    g = np.diff(np.concatenate([[0.0], t]))
    assert np.mean(g) == pytest.approx(0.2, rel=4 / math.sqrt(N))  # SE of the mean = 1/sqrt(N) of it
    assert cv_of(g) == pytest.approx(1.0, abs=0.05)
    assert np.all(g > 0)


def test_poisson_gaps_are_exponential():
    """Kolmogorov-Smirnov distance to the exponential CDF below the 1% critical value 1.63/sqrt(n)."""
    n, rate = 5000, 3.0
    t = arrival_times(np.random.default_rng(2), rate=rate, num_requests=n)
    g = np.sort(np.diff(np.concatenate([[0.0], t])))
    cdf = 1.0 - np.exp(-rate * g)
    d = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert d < 1.63 / math.sqrt(n)


def test_poisson_count_in_a_window_is_poisson():
    rate, dur = 20.0, 500.0
    counts = [len(arrival_times(np.random.default_rng(s), rate, duration=dur)) for s in range(20)]
    mean = rate * dur
    assert np.mean(counts) == pytest.approx(mean, abs=4 * math.sqrt(mean / 20))
    assert np.var(counts, ddof=1) == pytest.approx(mean, rel=0.8)  # Poisson: variance = mean (loose: 20 runs)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv_matches_the_knob(cv):
    t = arrival_times(np.random.default_rng(3), rate=2.0, cv=cv, num_requests=4 * N)
    g = np.diff(np.concatenate([[0.0], t]))
    assert np.mean(g) == pytest.approx(0.5, rel=0.05)
    assert cv_of(g) == pytest.approx(cv, rel=0.08)


def test_cv_zero_is_a_constant_rate():
    t = arrival_times(np.random.default_rng(0), rate=4.0, cv=0.0, num_requests=10)
    assert np.allclose(np.diff(t), 0.25) and t[0] == pytest.approx(0.25)


def test_duration_and_num_requests_bound_the_arrivals():
    t = arrival_times(np.random.default_rng(0), rate=100.0, num_requests=50, duration=1e9)
    assert len(t) == 50
    t = arrival_times(np.random.default_rng(0), rate=100.0, num_requests=10**6, duration=2.0)
    assert t.max() < 2.0 and len(t) == pytest.approx(200, abs=4 * math.sqrt(200))


def test_staged_rates_give_the_right_counts_per_stage():
    stages = [(10.0, 100.0), (50.0, 100.0), (0.0, 50.0), (20.0, 100.0)]
    t = staged_arrival_times(np.random.default_rng(4), stages)
    start = 0.0
    for rate, dur in stages:
        n = np.count_nonzero((t >= start) & (t < start + dur))
        assert n == pytest.approx(rate * dur, abs=4 * math.sqrt(rate * dur) + 1), (rate, n)
        start += dur
    assert np.all(np.diff(t) >= 0)


def test_same_seed_same_arrivals():
    a = arrival_times(np.random.default_rng(7), 3.0, 2.0, 100)
    b = arrival_times(np.random.default_rng(7), 3.0, 2.0, 100)
    c = arrival_times(np.random.default_rng(8), 3.0, 2.0, 100)
    assert np.array_equal(a, b) and not np.array_equal(a, c)

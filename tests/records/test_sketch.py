"""QuantileSketch: exact while small (the in-memory `stats`), within its stated error past the limit."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from records.metrics import PERCENTILES, stats
from records.sketch import QuantileSketch


def sketch_of(values, exact_limit=1 << 22, accuracy=1e-3, batch=97):
    s = QuantileSketch(exact_limit, accuracy)
    for i in range(0, len(values), batch):
        s.add(values[i:i + batch])
    return s


def test_below_the_limit_it_is_the_in_memory_computation():
    v = np.random.default_rng(1).lognormal(-3, 1.2, 5000)
    s = sketch_of(v)
    assert s.exact
    assert s.stats() == stats(v)


def test_nan_and_inf_are_skipped_as_stats_skips_them():
    v = np.array([1.0, math.nan, 2.0, math.inf, 3.0])
    assert sketch_of(v).stats() == stats(v)
    assert sketch_of(v, exact_limit=0).count == 3
    assert QuantileSketch().stats() is None


@pytest.mark.parametrize("kind", ["lognormal", "uniform", "with_zeros", "negative", "heavy_tail", "ties"])
def test_past_the_limit_every_percentile_is_within_the_stated_relative_error(kind):
    rng = np.random.default_rng(7)
    v = {"lognormal": rng.lognormal(-3, 1.5, 50_000),
         "uniform": rng.uniform(1e-3, 1.0, 50_000),
         "with_zeros": np.where(rng.random(50_000) < 0.3, 0.0, rng.exponential(0.05, 50_000)),
         "negative": -rng.lognormal(0, 1, 50_000),
         "heavy_tail": rng.pareto(1.1, 50_000) + 1e-6,
         "ties": np.repeat(rng.lognormal(0, 1, 50), 1000)}[kind]
    for accuracy in (1e-3, 1e-2):
        s = sketch_of(v, exact_limit=1000, accuracy=accuracy)
        assert not s.exact
        assert s.count == v.size and s.max == v.max() and s.min == v.min()
        assert s.sum == pytest.approx(v.sum(), rel=1e-12)
        for p in list(PERCENTILES) + [0, 1, 25, 75, 99.9, 100]:
            exact = float(np.percentile(v, p))
            assert abs(s.percentile(p) - exact) <= accuracy * abs(exact) * (1 + 1e-9) + 1e-300, (p, exact)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1e-9, max_value=1e6, allow_nan=False), min_size=1, max_size=400),
       st.integers(min_value=0, max_value=50), st.sampled_from([1e-3, 5e-3, 0.05]))
def test_any_positive_stream_any_limit(values, limit, accuracy):
    v = np.array(values)
    s = sketch_of(v, exact_limit=limit, accuracy=accuracy, batch=7)
    got = s.stats()
    want = stats(v)
    assert got["max"] == want["max"]
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-12)
    for p in PERCENTILES:
        assert abs(got[f"p{p}"] - want[f"p{p}"]) <= accuracy * want[f"p{p}"] * (1 + 1e-9)


def test_values_are_not_available_past_the_limit():
    s = sketch_of(np.arange(1.0, 100.0), exact_limit=10)
    with pytest.raises(ValueError, match="exact_limit"):
        s.values()
    with pytest.raises(ValueError, match="relative_accuracy"):
        QuantileSketch(relative_accuracy=0)


@pytest.mark.parametrize("exact_limit", [1 << 22, 1000])
def test_a_deep_copy_is_independent_and_shares_the_exact_values(exact_limit):
    """A spooled recorder's snapshot deep-copies the summary under the engine's lock: a copy of the
    exact values (up to 32 MiB a metric) stalled every running request; the arrays are never
    changed in place, so the copy shares them and stays independent of the original."""
    import copy
    import tracemalloc

    rng = np.random.default_rng(2)
    v = rng.lognormal(-3, 1, 500_000)
    s = sketch_of(v, exact_limit, batch=25_600)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        twin = copy.deepcopy(s)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 200_000, grown  # the values are 4 MB
    want = s.stats()
    more = rng.lognormal(0, 1, 3000)
    twin.add(more)
    assert s.stats() == want and s.count == len(v)
    s.add(more)
    s.add(more)
    assert twin.stats() == pytest.approx(sketch_of(np.concatenate([v, more]), exact_limit, batch=25_600).stats(),
                                         rel=1e-12)  # sums taken in another order

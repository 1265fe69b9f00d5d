"""Length distributions: parameters mean what the docs say; clipping; empirical from a trace."""
from __future__ import annotations

import math

import numpy as np
import pytest

from policies import ConfigError
from sim.workload import LengthDist
from sim.workload.lengths import sample_lengths
from sim.workload.traces import write_trace_csv


def draw(n=40_000, seed=0, **kw):
    return sample_lengths(LengthDist(**kw), n, np.random.default_rng(seed))


def test_lognormal_median_parameter_is_the_median():
    x = draw(kind="lognormal", median=300, sigma=1.0)
    assert np.median(x) == pytest.approx(300, rel=0.03)


def test_lognormal_mean_parameter_is_the_mean():
    sigma = 0.8
    x = draw(kind="lognormal", mean=500, sigma=sigma)
    assert np.mean(x) == pytest.approx(500, rel=0.03)
    # and the median sits where theory puts it: mean / e^(sigma^2 / 2)
    assert np.median(x) == pytest.approx(500 / math.exp(sigma**2 / 2), rel=0.04)


def test_uniform_is_inclusive_and_flat():
    x = draw(kind="uniform", low=10, high=13)
    counts = np.bincount(x)[10:14]
    assert x.min() == 10 and x.max() == 13
    assert np.all(np.abs(counts - len(x) / 4) < 4 * math.sqrt(len(x) / 4))


def test_min_and_max_clip():
    x = draw(kind="lognormal", median=100, sigma=2.0, min=5, max=400)
    assert x.min() >= 5 and x.max() <= 400
    assert np.count_nonzero(x == 400) > 0 and np.count_nonzero(x == 5) > 0


def test_empirical_resamples_the_trace_column(tmp_path):
    path = write_trace_csv(tmp_path / "t.csv", [0, 1, 2], [7, 70, 700], [3, 30, 300])
    prompts = sample_lengths(LengthDist(kind="empirical", path=str(path)), 3000, np.random.default_rng(0), "prompt")
    outputs = sample_lengths(LengthDist(kind="empirical", path=str(path)), 3000, np.random.default_rng(0), "output")
    assert set(prompts.tolist()) == {7, 70, 700}
    assert set(outputs.tolist()) == {3, 30, 300}


@pytest.mark.parametrize("kw, field", [
    (dict(kind="constant"), "value"), (dict(kind="uniform", low=5, high=2), "high"),
    (dict(kind="lognormal", median=5, mean=5), "median"), (dict(kind="empirical", path="/nope.csv"), "path"),
    (dict(kind="zipf"), "kind"),
])
def test_bad_length_dist_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=rf"^workload\.length\.{field}"):
        LengthDist(**kw)

"""Curves of dense noisy grids continue in proportion to their input beyond the data."""
from __future__ import annotations

import numpy as np
import pytest

from calibrate.fit import fit_op
from calibrate.importers.beyond_grid import extend_dense_grids, extend_in_proportion
from sim.latency.profile import Profile


def dense_noisy_gemm(seed: int = 0, top: int = 4096, step: int = 128):
    """A compute-bound op timed every `step` tokens up to `top` (1 us launch + 0.1 us/token, 3% noise),
    like Vidur's tables (which step by 32, making the last segment's slope noisier still)."""
    rng = np.random.default_rng(seed)
    xs = np.arange(step, top + 1, step)
    return [[float(x), float((1e-6 + 1e-7 * x) * (1 + 0.03 * rng.standard_normal()))] for x in xs for _ in range(3)]


def test_inside_the_data_nothing_changes():
    op = fit_op("qkv_proj", dense_noisy_gemm())
    ext = extend_in_proportion(op)
    for x in (1, 32, 100, 1000, 2049.5, 4000, 4096):
        assert ext(x) == pytest.approx(op(x), rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_beyond_the_data_time_grows_in_proportion_to_the_input(seed):
    op = extend_in_proportion(fit_op("qkv_proj", dense_noisy_gemm(seed)))
    true_4096 = 1e-6 + 1e-7 * 4096
    for factor in (2, 4, 8):
        assert op(4096 * factor) == pytest.approx(factor * op(4096), rel=1e-9)
        # the true op at factor x the data: within the noise of the last point, whatever the last slope
        true = 1e-6 + 1e-7 * 4096 * factor
        assert op(4096 * factor) == pytest.approx(true, rel=0.1)
    assert op(4096) == pytest.approx(true_4096, rel=0.1)


def test_the_last_segment_slope_alone_can_be_far_off():
    """Why the extension exists: with the raw curve some seeds' 4x-the-data times are off by > 25%."""
    worst = 0.0
    for seed in range(20):
        op = fit_op("qkv_proj", dense_noisy_gemm(seed))
        true = 1e-6 + 1e-7 * 4096 * 4
        worst = max(worst, abs(op(4096 * 4) - true) / true)
    assert worst > 0.25


def test_only_ops_of_the_named_source_are_extended():
    a = fit_op("qkv_proj", dense_noisy_gemm(), source="vidur-per-op compute/h100/x/mlp.csv attn_pre_proj")
    b = fit_op("o_proj", dense_noisy_gemm(1), source="aiconfigurator gemm")
    c = fit_op("attn_decode", [[b, s, 1e-6 * b * s] for b in (1, 2, 4) for s in (16, 64, 256)], source="vidur-per-op")
    p = Profile({"device": "x"}, {}, {"qkv_proj": a, "o_proj": b, "attn_decode": c})
    assert extend_dense_grids(p) == ["qkv_proj"]
    assert p.ops["o_proj"] is b and p.ops["attn_decode"] is c
    assert p.meta["extended_in_proportion"] == ["qkv_proj"]
    assert "in proportion" in p.ops["qkv_proj"].source


def test_two_input_curves_and_bad_factors_are_refused():
    c = fit_op("attn_decode", [[b, s, 1e-6 * b * s] for b in (1, 2, 4) for s in (16, 64, 256)])
    with pytest.raises(ValueError, match="op: attn_decode"):
        extend_in_proportion(c)
    with pytest.raises(ValueError, match="factor"):
        extend_in_proportion(fit_op("qkv_proj", dense_noisy_gemm()), factor=1.0)

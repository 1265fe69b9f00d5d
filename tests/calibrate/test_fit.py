"""Curve fits: monotone piecewise-linear (isotonic) and non-negative bilinear, with their fit errors."""
from __future__ import annotations

import numpy as np
import pytest

from calibrate.fit import fit_bilinear, fit_error, fit_op, fit_pwl


def roofline(x):
    """A launch floor, then bandwidth-bound, then compute-bound: the shape real GEMMs have."""
    return max(10e-6, 2e-6 + 1e-8 * x, -3e-4 + 5e-8 * x)


def noisy_points(f, xs, repeats=5, noise=0.03, seed=0):
    rng = np.random.default_rng(seed)
    return [[x, f(x) * (1 + noise * rng.standard_normal())] for x in xs for _ in range(repeats)]


def test_pwl_is_monotone_and_follows_a_roofline_within_noise():
    xs = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    pts = noisy_points(roofline, xs)
    curve = fit_pwl(pts)
    ys = [curve(x) for x in np.linspace(1, 20000, 500)]
    assert all(b >= a for a, b in zip(ys, ys[1:]))
    for x in (3, 100, 3000, 12000, 30000):  # between knots and beyond the grid
        assert curve(x) == pytest.approx(roofline(x), rel=0.08)


def test_pwl_never_dips_even_when_a_median_does():
    pts = [[1, 5.0], [2, 4.0], [4, 6.0], [8, 8.0]]
    curve = fit_pwl(pts)
    assert curve(2) >= curve(1)
    assert fit_error(curve, pts)["max_abs_pct"] > 0  # the dip is reported as fit error, not hidden


def test_bilinear_recovers_known_coefficients():
    coef = (1e-5, 2e-8, 3e-9, 4e-11)
    f = lambda x, y: coef[0] + coef[1] * x + coef[2] * y + coef[3] * x * y  # noqa: E731
    pts = [[x, y, f(x, y)] for x in (1, 4, 16, 64, 256) for y in (16, 128, 1024, 4096)]
    curve = fit_bilinear(pts)
    for x, y in ((2, 50), (300, 5000), (1000, 20000)):
        assert curve(x, y) == pytest.approx(f(x, y), rel=1e-3)
    assert fit_error(curve, pts)["max_abs_pct"] < 0.1


def test_fit_error_is_against_the_median_of_repeats():
    pts = [[10, 1.0], [10, 1.0], [10, 100.0], [20, 2.0]]
    err = fit_error(fit_pwl(pts), pts)
    assert err == {"median_abs_pct": 0.0, "max_abs_pct": 0.0}


def test_fit_op_checks_the_op_and_its_rows():
    with pytest.raises(ValueError, match="^op: 'foo'"):
        fit_op("foo", [[1, 1.0]])
    with pytest.raises(ValueError, match="^points: op attn_decode"):
        fit_op("attn_decode", [[1, 1.0]])
    op = fit_op("qkv_proj", [[1, 1e-5], [2, 2e-5]])
    assert op.inputs == ("num_tokens",) and op.fit_error["median_abs_pct"] == 0.0

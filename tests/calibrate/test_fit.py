"""Curve fits: monotone piecewise-linear (isotonic, but for an exact prefix of counts) and non-negative bilinear,
with their fit errors."""
from __future__ import annotations

import numpy as np
import pytest

from calibrate.fit import fit_bilinear, fit_error, fit_grid, fit_op, fit_pwl
from sim.latency.curves import Bilinear, Grid2D


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


def test_an_exact_prefix_of_token_counts_keeps_its_measured_dips():
    # every count 1-8 timed, as our grids do: a small-M kernel slower at 3 tokens than at 4 stays so
    dips = {1: 5.0, 2: 6.0, 3: 9.0, 4: 7.0, 5: 8.0, 6: 8.0, 7: 8.5, 8: 9.0, 16: 12.0, 32: 11.0, 64: 20.0}
    curve = fit_pwl([[x, t] for x, t in dips.items() for _ in range(3)], exact_prefix=True)
    assert [curve(x) for x in range(1, 9)] == [dips[x] for x in range(1, 9)]
    # above the prefix time still never decreases with more work
    assert curve(32) >= curve(16) and curve(64) == 20.0
    # a grid without every small count (1, 2, 4, 8) stays monotone throughout, and so does an
    # imported table (exact_prefix off)
    sparse = fit_pwl([[1, 5.0], [2, 9.0], [4, 7.0], [8, 10.0]], exact_prefix=True)
    assert sparse(4) >= sparse(2)
    imported = fit_pwl([[x, t] for x, t in dips.items()])
    assert imported(4) >= imported(3)


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


def test_a_full_rectangle_of_points_gets_a_grid_curve():
    f = lambda b, L: 1e-5 + 1e-8 * b * L + (2e-4 if b * L > 4096 else 0.0)  # noqa: E731 (a cache knee)
    pts = [[b, L, f(b, L)] for b in (1, 4, 16) for L in (64, 256, 1024) for _ in range(3)]
    op = fit_op("attn_decode", pts)
    assert isinstance(op.curve, Grid2D) and not op.curve.y_minus_x
    assert op.fit_error["median_abs_pct"] == 0.0  # through every cell median
    assert op.curve(4, 256) == pytest.approx(f(4, 256))


def f_attention(q, e):
    """Attention seconds of a chunk of q tokens after e cached ones: a later chunk's kernel costs twice a
    first chunk's per token, and the work grows with q x context."""
    return 1e-5 * q * (1 + (e > 0)) + 1e-8 * q * (q + e)


def test_a_prefill_grid_over_cached_context_is_recognised():
    # chunks x cached context (0 = a first chunk); the top corner beyond a max length is missing
    pts = [[q, q + e, f_attention(q, e)] for q in (16, 64, 256) for e in (0, 64, 256) if q + e <= 200]
    g = fit_grid(pts)
    assert isinstance(g, Grid2D) and g.y_minus_x and g.x == (16.0, 64.0)  # the 256 row has no cell: dropped
    assert g(64, 64) < g(64, 128)  # a later chunk costs more than a first one of the same size


def test_a_whole_prompt_row_cut_by_the_max_length_is_kept_and_filled_as_attention_grows():
    # the grid's last chunk is the model length (a whole prompt): only its first cell fits
    pts = [[q, q + e, f_attention(q, e)] for q in (16, 64, 256) for e in (0, 64, 256) if q + e <= 320]
    g = fit_grid(pts)
    assert g.x == (16.0, 64.0, 256.0)
    assert g(256, 256) == pytest.approx(f_attention(256, 0))  # measured
    assert g(256, 256 + 64) == pytest.approx(f_attention(256, 64))  # measured
    # beyond the max length: z(256, c) = z(256, 0) + (z(64, c) - z(64, 0)) * 256 / 64, exact for q x c work
    assert g(256, 256 + 256) == pytest.approx(f_attention(256, 256))
    # so a chunk between the rows interpolates towards a physical value, not the last row's flat slope
    assert g(160, 160 + 256) == pytest.approx((f_attention(64, 256) + f_attention(256, 256)) / 2)


def test_scattered_two_input_points_fall_back_to_bilinear():
    pts = [[1, 1, 1e-5], [2, 8, 2e-5], [8, 100, 9e-5]]
    assert fit_grid(pts) is None
    assert isinstance(fit_op("attn_prefill", pts).curve, Bilinear)


def test_overhead_curve_is_robust_to_a_few_outliers_at_a_knot():
    pts = [[n, 2e-3 + 1e-5 * n] for n in (1, 2, 4, 8, 16, 32) for _ in range(5)]
    pts += [[4, 0.5]]  # one plan hit by a burst of load
    pts += [[32, 0.0]] * 3  # and one residual eaten by an over-predicted op
    op = fit_op("step_overhead", pts)
    for n in (1, 8, 32, 64):
        assert op.curve(n) == pytest.approx(2e-3 + 1e-5 * n, rel=0.05)


def test_overhead_curve_follows_a_jump_a_line_would_miss():
    # one sequence: 1 ms of host time; from two on: 2 ms + 20 us a sequence (a step shape)
    pts = [[1, 1e-3]] * 30 + [[n, 2e-3 + 2e-5 * n] for n in (2, 4, 8, 16, 32) for _ in range(10)]
    op = fit_op("step_overhead", pts)
    assert op.curve(1) == pytest.approx(1e-3, rel=0.02)
    for n in (2, 4, 16):
        assert op.curve(n) == pytest.approx(2e-3 + 2e-5 * n, rel=0.02)

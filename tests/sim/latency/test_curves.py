"""Latency curves (`sim.latency.curves`): interpolation, the ends, and what a bad curve is told."""
from __future__ import annotations

import pytest

from sim.latency.curves import Bilinear, Grid2D, PiecewiseLinear


def test_pwl_interpolates_and_extends_its_ends():
    c = PiecewiseLinear((10.0, 20.0, 40.0), (1.0, 2.0, 6.0))
    assert c(15) == pytest.approx(1.5)
    assert c(30) == pytest.approx(4.0)
    assert c(5) == 1.0  # launch floor below the grid
    assert c(60) == pytest.approx(10.0)  # last slope (0.2 / token) beyond the grid
    assert c(0) == 0.0  # op not run


def test_pwl_rejects_unsorted_or_negative_knots():
    with pytest.raises(ValueError, match="curve.x"):
        PiecewiseLinear((2.0, 1.0), (1.0, 2.0))
    with pytest.raises(ValueError, match="curve.y"):
        PiecewiseLinear((1.0, 2.0), (1.0, -2.0))


def test_bilinear_is_monotone_in_both_inputs():
    c = Bilinear((1.0, 2.0, 3.0, 4.0))
    assert c(2, 5) == pytest.approx(1 + 4 + 15 + 40)
    assert c(3, 5) > c(2, 5) and c(2, 6) > c(2, 5)
    with pytest.raises(ValueError, match="curve.coef"):
        Bilinear((1.0, -1.0, 0.0, 0.0))


def test_grid_interpolates_bilinearly_and_extends_its_ends():
    g = Grid2D((1.0, 3.0), (10.0, 20.0), ((1.0, 2.0), (3.0, 6.0)))
    assert g(2, 15) == pytest.approx((1 + 2 + 3 + 6) / 4)
    assert g(1, 5) == 1.0  # held below the grid
    assert g(5, 20) == pytest.approx(10.0)  # the last cell's slope along x: 6 + 2 * (6 - 2) / 2
    assert g(0, 15) == 0.0
    with pytest.raises(ValueError, match="curve.z"):
        Grid2D((1.0, 3.0), (10.0, 20.0), ((1.0, 2.0),))


def test_grid_beyond_both_last_knots_grows_with_each_input():
    # a last cell whose increments shrink (cross term 5 - 3 - 4 + 1 = -1 < 0): the bilinear form
    # beyond both ends fell as both inputs grew, to 0 s (a decode batch beyond the grid's at a KV
    # length beyond it cost nothing)
    g = Grid2D((1.0, 2.0), (10.0, 20.0), ((1.0, 3.0), (4.0, 5.0)))
    corner = [[g(x, y) for y in (20.0, 40.0, 80.0, 160.0)] for x in (2.0, 4.0, 8.0, 16.0)]
    assert corner[0][0] == 5.0 and corner[-1][-1] > 5.0
    for row in corner:  # non-decreasing in y at each x
        assert all(b >= a for a, b in zip(row, row[1:])), row
    for col in zip(*corner):  # and in x at each y
        assert all(b >= a for a, b in zip(col, col[1:])), col
    # continuous at the corner's edges: the single-axis extrapolations as before
    assert g(2.0 + 1e-9, 50.0) == pytest.approx(g(2.0, 50.0)) == pytest.approx(5.0 + (5.0 - 4.0) * 3)
    assert g(6.0, 20.0 + 1e-9) == pytest.approx(g(6.0, 20.0)) == pytest.approx(5.0 + (5.0 - 3.0) * 4)


def test_grid_over_cached_context_separates_first_and_later_chunks():
    # y_minus_x: second axis is context - chunk (tokens cached before the chunk)
    g = Grid2D((16.0, 64.0), (0.0, 64.0), ((1.0, 3.0), (2.0, 6.0)), y_minus_x=True)
    assert g(16, 16) == 1.0 and g(16, 80) == 3.0 and g(64, 128) == 6.0

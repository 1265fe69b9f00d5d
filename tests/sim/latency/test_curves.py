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


def test_grid_over_cached_context_separates_first_and_later_chunks():
    # y_minus_x: second axis is context - chunk (tokens cached before the chunk)
    g = Grid2D((16.0, 64.0), (0.0, 64.0), ((1.0, 3.0), (2.0, 6.0)), y_minus_x=True)
    assert g(16, 16) == 1.0 and g(16, 80) == 3.0 and g(64, 128) == 6.0

"""Latency curves of one or two inputs, evaluated in plain Python (no numpy, no scipy).

`PiecewiseLinear` (one input: linear between knots, the end slopes continued beyond them),
`Bilinear` (`c0 + cx*x + cy*y + cxy*x*y`) and `Grid2D` (bilinear between the knots of a grid,
clamped at its edges); `curve_from_dict` reads any of them from a profile file's `curve` object.
`calibrate.fit` fits them; `sim.latency.profile` stores them per op.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Mapping

from policies import ConfigError


@dataclass(frozen=True)
class PiecewiseLinear:
    """Monotone piecewise-linear curve through (x, y) knots; see the module docstring for the ends."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or not self.x:
            raise ValueError("curve: x and y must be non-empty and of equal length")
        if any(b <= a for a, b in zip(self.x, self.x[1:])):
            raise ValueError("curve.x: knots must be strictly increasing")
        if any(not math.isfinite(v) or v < 0 for v in self.y):
            raise ValueError("curve.y: values must be finite and >= 0")

    def __call__(self, x: float) -> float:
        if x <= 0:
            return 0.0
        xs, ys = self.x, self.y
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            if len(xs) == 1:
                return ys[0]
            slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
            return ys[-1] + slope * (x - xs[-1])
        i = bisect.bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    def to_dict(self) -> dict:
        return {"kind": "pwl", "x": list(self.x), "y": list(self.y)}


@dataclass(frozen=True)
class Bilinear:
    """``c0 + cx*x + cy*y + cxy*x*y`` with non-negative coefficients: monotone in x and y."""

    coef: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        if len(self.coef) != 4 or any(not math.isfinite(c) or c < 0 for c in self.coef):
            raise ValueError("curve.coef: expected 4 finite non-negative numbers")

    def __call__(self, x: float, y: float) -> float:
        if x <= 0:
            return 0.0
        c0, cx, cy, cxy = self.coef
        return c0 + cx * x + cy * y + cxy * x * y

    def to_dict(self) -> dict:
        return {"kind": "bilinear", "coef": list(self.coef)}


def locate(knots: tuple[float, ...], v: float) -> tuple[int, float]:
    """(i, t): v = knots[i] + t * (knots[i+1] - knots[i]); t = 0 below the grid, t > 1 beyond it."""
    if len(knots) == 1 or v <= knots[0]:
        return 0, 0.0
    if v >= knots[-1]:
        i = len(knots) - 2
    else:
        i = bisect.bisect_right(knots, v) - 1
    return i, (v - knots[i]) / (knots[i + 1] - knots[i])


@dataclass(frozen=True)
class Grid2D:
    """Bilinear interpolation in a rectangular grid of medians (see the module docstring)."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    z: tuple[tuple[float, ...], ...]  # z[i][j] at (x[i], y[j])
    y_minus_x: bool = False

    def __post_init__(self) -> None:
        if len(self.x) < 2 or len(self.y) < 2:
            raise ValueError("curve: a grid needs at least 2 knots on each axis")
        for name, knots in (("x", self.x), ("y", self.y)):
            if any(b <= a for a, b in zip(knots, knots[1:])):
                raise ValueError(f"curve.{name}: knots must be strictly increasing")
        if len(self.z) != len(self.x) or any(len(row) != len(self.y) for row in self.z):
            raise ValueError("curve.z: expected len(x) rows of len(y) values")
        if any(not math.isfinite(v) or v < 0 for row in self.z for v in row):
            raise ValueError("curve.z: values must be finite and >= 0")

    def __call__(self, x: float, y: float) -> float:
        if x <= 0:
            return 0.0
        if self.y_minus_x:
            y = y - x
        i, tx = locate(self.x, x)
        j, ty = locate(self.y, y)
        z = self.z
        z00, z01, z10, z11 = z[i][j], z[i][j + 1], z[i + 1][j], z[i + 1][j + 1]
        v = (z00 * (1 - tx) * (1 - ty) + z10 * tx * (1 - ty) + z01 * (1 - tx) * ty + z11 * tx * ty)
        # Beyond both last knots the bilinear form is z11 + a*u + b*w + d*u*w (u = tx - 1, w = ty - 1,
        # a, b >= 0 the edge slopes). A last cell whose increments shrink (d < 0) would make that
        # fall, to 0, as both grow (a decode batch 4x the grid's at 8x its KV length cost nothing);
        # its cross term is dropped there. It vanishes on the corner's edges: still continuous.
        if tx > 1 and ty > 1:
            d = z00 - z01 - z10 + z11
            if d < 0:
                v -= d * (tx - 1) * (ty - 1)
        return max(v, 0.0)

    def to_dict(self) -> dict:
        return {"kind": "grid", "x": list(self.x), "y": list(self.y), "z": [list(r) for r in self.z],
                "y_minus_x": self.y_minus_x}


def curve_from_dict(d: Mapping, where: str) -> PiecewiseLinear | Bilinear | Grid2D:
    """Build a curve from its JSON form; errors name `where` (the field path)."""
    if not isinstance(d, Mapping):
        raise ConfigError.at(where, f"expected an object, got {type(d).__name__}")
    kind = d.get("kind")
    try:
        if kind == "pwl":
            return PiecewiseLinear(tuple(float(v) for v in d["x"]), tuple(float(v) for v in d["y"]))
        if kind == "bilinear":
            return Bilinear(tuple(float(v) for v in d["coef"]))
        if kind == "grid":
            return Grid2D(tuple(float(v) for v in d["x"]), tuple(float(v) for v in d["y"]),
                          tuple(tuple(float(v) for v in row) for row in d["z"]), bool(d.get("y_minus_x", False)))
    except KeyError as exc:
        raise ConfigError.at(where, f"missing key {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError.at(where, str(exc)) from None
    raise ConfigError.at(f"{where}.kind", f"{kind!r} is not allowed; choose one of pwl, bilinear, grid")

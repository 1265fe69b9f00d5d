"""Curve fits for per-op latency points (scipy), with the fit error stored beside each curve.

- One-input ops (GEMMs, norms, LM head, copies over bytes): a **monotone piecewise-linear** curve,
  the isotonic regression of the per-x medians, a knot at each distinct x. A roofline
  ``max(a + b*x, c + d*x)`` would smooth away the launch floor, wave-quantization steps and the
  memory/compute knee, which sit wherever the device puts them. An exact prefix (every count
  1, 2, 3, ... timed, as our grids do) keeps its medians as measured (`_pwl`).
- Two-input attention on a full rectangle (our calibration): bilinear interpolation of the per-cell
  medians, non-decreasing on both axes (`fit_grid`). Other two-input data (tables with holes):
  ``c0 + cx*x + cy*y + cxy*x*y`` by non-negative least squares on relative error (`fit_bilinear`).
- Host overhead (`step_overhead`, `prefill_overhead`), a residual of two larger measured numbers:
  a robust line over sequences (Theil-Sen, slope >= 0; `fit_robust_line`), not isotonic knots.

Fit error: ``{"median_abs_pct", "max_abs_pct"}`` against the per-x medians, and, since a curve through
its knots is exact there, the leave-one-out ``{"loo_median_abs_pct", "loo_max_abs_pct"}`` (`loo_error`).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from sim.latency.curves import Bilinear, Grid2D, PiecewiseLinear
from sim.latency.profile import OP_INPUTS, OpProfile


def _medians(points: list) -> tuple[list[tuple[float, ...]], np.ndarray]:
    """Group raw [x..., t] rows by x and take the median time of each group."""
    keys, med, _ = _grouped(points)
    return keys, med


def _grouped(points: list) -> tuple[list[tuple[float, ...]], np.ndarray, np.ndarray]:
    """(sorted distinct x, the median time at each, the number of rows at each)."""
    groups: dict[tuple[float, ...], list[float]] = defaultdict(list)
    for row in points:
        groups[tuple(float(v) for v in row[:-1])].append(float(row[-1]))
    keys = sorted(groups)
    return (keys, np.array([float(np.median(groups[k])) for k in keys]),
            np.array([len(groups[k]) for k in keys], dtype=float))


#: at least this many consecutive counts from 1 (1, 2, 3, ...) timed make an exact prefix (`_pwl`)
MIN_EXACT_PREFIX = 3


def _exact_prefix(x: np.ndarray) -> int:
    """How many leading knots are the integers 1, 2, 3, ... (0 when fewer than `MIN_EXACT_PREFIX`)."""
    n = 0
    while n < len(x) and x[n] == n + 1:
        n += 1
    return n if n >= MIN_EXACT_PREFIX else 0


def _pwl(x: np.ndarray, med: np.ndarray, counts: np.ndarray, exact_prefix: bool = False) -> PiecewiseLinear:
    from scipy.optimize import isotonic_regression  # an extra (calibrate): imported where the fit runs

    # with `exact_prefix`, where every count from 1 up was timed (our grids time 1-8 tokens), the medians stand as
    # measured: small-M GEMM kernels differ by M (on the CPU: gate/up 284 us at 2 tokens, 239 us
    # at 4; down 109 us at 3, 84 us at 4), and inside engine steps decodes of 2-3 sequences paid
    # it (0.6-0.9 ms a step over the pooled curve). Isotonic pooling applies above that prefix.
    n = _exact_prefix(x) if exact_prefix else 0
    y = np.array(med, dtype=float)
    if n < len(x):
        y[n:] = isotonic_regression(med[n:], weights=counts[n:], increasing=True).x
    return PiecewiseLinear(tuple(float(v) for v in x), tuple(float(max(v, 0.0)) for v in y))


def fit_pwl(points: list, exact_prefix: bool = False) -> PiecewiseLinear:
    """Monotone piecewise-linear curve through the isotonic fit of the per-x medians (but for an exact
    prefix of counts 1, 2, 3, ... when `exact_prefix`: see `_pwl`)."""
    keys, med, counts = _grouped(points)
    if not keys:
        raise ValueError("points: need at least one [x, seconds] row")
    return _pwl(np.array([k[0] for k in keys]), med, counts, exact_prefix)


def fit_robust_line(points: list) -> PiecewiseLinear:
    """Theil-Sen line through [x, seconds] rows (slope and intercept >= 0), as a two-knot curve."""
    from scipy.stats import theilslopes  # an extra (calibrate): imported where the fit runs

    x = np.array([float(r[0]) for r in points])
    y = np.array([float(r[-1]) for r in points])
    if len(np.unique(x)) < 2:
        return PiecewiseLinear((float(x.min()),), (float(max(np.median(y), 0.0)),))
    slope = max(float(theilslopes(y, x)[0]), 0.0)
    intercept = max(float(np.median(y - slope * x)), 0.0)
    lo, hi = float(x.min()), float(x.max())
    return PiecewiseLinear((lo, hi), (intercept + slope * lo, intercept + slope * hi))


def fit_bilinear(points: list) -> Bilinear:
    """Non-negative least squares of ``c0 + cx*x + cy*y + cxy*x*y`` on relative error.

    ``x*y`` is the attention FLOPs (chunk x context) or the KV bytes read (batch x KV length), the
    linear terms catch per-token and per-sequence work, ``c0`` the launch cost. Non-negative
    coefficients keep it monotone and make extrapolation to larger shapes safe.
    """
    from scipy.optimize import nnls  # an extra (calibrate): imported where the fit runs

    keys, med = _medians(points)
    if len(keys) < 2:
        raise ValueError("points: need at least two distinct [x, y, seconds] rows for a 2-input fit")
    x = np.array([k[0] for k in keys])
    y = np.array([k[1] for k in keys])
    a = np.stack([np.ones_like(x), x, y, x * y], axis=1)
    # relative error: divide each row by its time, so small shapes weigh as much as large ones.
    # Columns are scaled to unit norm first for conditioning (x*y spans ~8 orders of magnitude).
    w = 1.0 / np.maximum(med, 1e-12)
    aw = a * w[:, None]
    scale = np.linalg.norm(aw, axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(aw / scale, med * w)
    coef = coef / scale
    return Bilinear(tuple(float(max(c, 0.0)) for c in coef))


def fit_grid(points: list) -> Grid2D | None:
    """A `Grid2D` if the points cover a rectangle in (x, y) or in (x, y - x), else None.

    Rows of the largest x that are incomplete (a grid capped at the model's maximum length) are
    left out; the curve continues the last full row's slope there. In (x, y - x) (chunk x cached
    context) such a row that has its first column is kept instead (a whole prompt of the model's
    length: no cached context fits beside it): its missing cells, shapes beyond the maximum length,
    are filled from the row below as attention work grows, the part that grows with the cached
    context in proportion to the chunk (`_fill_capped_rows`), so that interpolation towards them
    stays physical. Why a grid and not a smooth form: the engine's CPU attention has regimes none
    follows (a first chunk runs SDPA's causal kernel, a later chunk the explicit-mask one at twice
    the cost; caches fill at some batch x length).
    """
    keys, med = _medians(points)
    for offset in (False, True):
        cells = {(k[0], k[1] - k[0] if offset else k[1]): m for k, m in zip(keys, med)}
        xs = sorted({c[0] for c in cells})
        ys = sorted({c[1] for c in cells})
        if offset:
            _fill_capped_rows(cells, xs, ys)
        # a grid capped by a maximum length misses its top corner: drop the incomplete largest-x rows
        while xs and any((xs[-1], y) not in cells for y in ys):
            xs.pop()
        if len(xs) < 2 or len(ys) < 2 or any((x, y) not in cells for x in xs for y in ys):
            continue
        z = np.array([[cells[(x, y)] for y in ys] for x in xs])
        z = np.maximum.accumulate(np.maximum.accumulate(z, axis=0), axis=1)  # non-decreasing both ways
        return Grid2D(tuple(map(float, xs)), tuple(map(float, ys)), tuple(tuple(map(float, r)) for r in z), offset)
    return None


def _fill_capped_rows(cells: dict, xs: list, ys: list) -> None:
    """Fill, in place, the missing cells of the top rows of a chunk x cached-context grid that have
    their first (least cached context) cell: z(x, c) = z(x, c0) + (z(x', c) - z(x', c0)) * x / x',
    x' the largest complete row (attention over cached context c costs ~ chunk x c)."""
    complete = [x for x in xs if all((x, y) in cells for y in ys)]
    if not complete:
        return
    base = complete[-1]
    for x in xs:
        if x <= base or (x, ys[0]) not in cells:
            continue
        for y in ys:
            if (x, y) not in cells:
                cells[(x, y)] = cells[(x, ys[0])] + max(cells[(base, y)] - cells[(base, ys[0])], 0.0) * x / base


def grid_loo_error(curve: Grid2D) -> dict[str, float]:
    """Each interior x knot predicted from its two neighbours along x (at every y): the error between grid lines."""
    errs = []
    for i in range(1, len(curve.x) - 1):
        x0, x1, x2 = curve.x[i - 1], curve.x[i], curve.x[i + 1]
        for j in range(len(curve.y)):
            z0, z1, z2 = curve.z[i - 1][j], curve.z[i][j], curve.z[i + 1][j]
            if z1 > 0:
                errs.append(abs(z0 + (z2 - z0) * (x1 - x0) / (x2 - x0) - z1) / z1 * 100.0)
    if not errs:
        return {}
    return {"loo_median_abs_pct": round(float(np.median(errs)), 3), "loo_max_abs_pct": round(float(max(errs)), 3)}


def fit_error(curve, points: list) -> dict[str, float]:
    """Median and max absolute % error of `curve` against the per-x medians of `points`."""
    keys, med = _medians(points)
    pred = np.array([curve(*k) for k in keys])
    ok = med > 0
    err = np.abs(pred[ok] - med[ok]) / med[ok] * 100.0
    if err.size == 0:
        return {"median_abs_pct": 0.0, "max_abs_pct": 0.0}
    return {"median_abs_pct": round(float(np.median(err)), 3), "max_abs_pct": round(float(err.max()), 3)}


def loo_error(points: list, exact_prefix: bool = False) -> dict[str, float]:
    """Leave-one-out error of the piecewise-linear fit at each interior x (see module docstring)."""
    keys, med, counts = _grouped(points)
    xs = np.array([k[0] for k in keys])
    errs = []
    for i in range(1, len(xs) - 1):
        keep = np.arange(len(xs)) != i  # the curve fitted without knot i (same medians as refitting its rows)
        if med[i] > 0:
            errs.append(abs(_pwl(xs[keep], med[keep], counts[keep], exact_prefix)(xs[i]) - med[i]) / med[i] * 100.0)
    if not errs:
        return {}
    return {"loo_median_abs_pct": round(float(np.median(errs)), 3), "loo_max_abs_pct": round(float(max(errs)), 3)}


def fit_op(name: str, points: list, source: str = "measured", exact_prefix: bool = False) -> OpProfile:
    """Fit op `name` (its inputs come from `OP_INPUTS`) to raw [x..., seconds] rows.

    `exact_prefix`: one-input curves keep the measured medians where every count 1, 2, 3, ... was
    timed (our own calibration grids; published tables are smoothed monotone throughout).
    """
    if name not in OP_INPUTS:
        raise ValueError(f"op: {name!r} is not allowed; choose one of {', '.join(OP_INPUTS)}")
    inputs = OP_INPUTS[name]
    rows = [[float(v) for v in r] for r in points]
    if any(len(r) != len(inputs) + 1 for r in rows):
        raise ValueError(f"points: op {name} needs rows of [{', '.join(inputs)}, seconds]")
    if len(inputs) == 2:
        curve = fit_grid(rows) or fit_bilinear(rows)
    elif name == "prefill_overhead":
        curve = fit_robust_line(rows)
    # step_overhead: monotone piecewise-linear through per-x medians like the ops (robust to a few
    # outliers at a knot). A straight line missed a measured ~0.8-1 ms jump from one sequence to
    # two (the engine's residual, CPU, round-robin timing): decode steps of 2-4 sequences came out
    # ~9% under, single-sequence ones ~5% over
    else:
        curve = fit_pwl(rows, exact_prefix)
    err = fit_error(curve, rows)
    if len(inputs) == 1 and name not in ("step_overhead", "prefill_overhead"):
        err.update(loo_error(rows, exact_prefix))
    elif isinstance(curve, Grid2D):
        err.update(grid_loo_error(curve))
    return OpProfile(name, inputs, curve, rows, err, source)

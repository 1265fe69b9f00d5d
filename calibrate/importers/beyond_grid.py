"""Curves beyond their measured range: time in proportion to the work, not the last segment's slope.

`sim.latency.curves.PiecewiseLinear` continues a curve beyond its last knot with the slope of
its last segment. For a coarse grid (aiconfigurator's GEMMs: 16384 -> 32768 tokens) that slope is
a measured compute-bound rate. For a dense, noisy grid it is noise: Vidur's per-op tables step by
32 tokens up to 4096, and the slope between 4064 and 4096 tokens is the difference of two medians a
few percent apart (on the Splitwise check it blew GEMMs up or made them flat: see
docs/results/2026-12-02-docstring-history.md).

`extend_in_proportion` adds one knot at `factor` x the last one, at `factor` x its time, so
beyond the data the op's time grows in proportion to its input: a GEMM at thousands of tokens is
compute-bound, an elementwise op and an all-reduce of tens of MB bandwidth-bound, all in
proportion to tokens or bytes. Within the data nothing changes. Nothing here is fitted to anything.
"""
from __future__ import annotations

from sim.latency.curves import PiecewiseLinear
from sim.latency.profile import OpProfile, Profile


def extend_in_proportion(op: OpProfile, factor: float = 2.0) -> OpProfile:
    """`op` whose one-input piecewise-linear curve continues as time ~ input beyond its last knot."""
    curve = op.curve
    if not isinstance(curve, PiecewiseLinear) or len(op.inputs) != 1:
        raise ValueError(f"op: {op.name} is not a one-input piecewise-linear curve")
    if factor <= 1.0:
        raise ValueError(f"factor: must be > 1, got {factor}")
    x_last, y_last = curve.x[-1], curve.y[-1]
    extended = PiecewiseLinear(curve.x + (x_last * factor,), curve.y + (y_last * factor,))
    return OpProfile(op.name, op.inputs, extended, op.points, op.fit_error,
                     f"{op.source}; beyond {x_last:g} {op.inputs[0]}: in proportion to {op.inputs[0]}")


def extend_dense_grids(profile: Profile, source_prefix: str = "vidur-per-op") -> list[str]:
    """Extend (in place) every one-input curve of `profile` whose source starts with `source_prefix`.

    Returns the names of the extended ops; records them in `meta["extended_in_proportion"]`.
    """
    names = []
    for name, op in sorted(profile.ops.items()):
        if (str(op.source).startswith(source_prefix) and len(op.inputs) == 1
                and isinstance(op.curve, PiecewiseLinear)):
            profile.ops[name] = extend_in_proportion(op)
            names.append(name)
    if names:
        profile.meta["extended_in_proportion"] = names
    return names

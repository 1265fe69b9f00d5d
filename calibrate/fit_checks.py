"""The calibration's own checks of its fits, said loudly when they fail.

A profile is only as good as its engine-step fit (`calibrate.engine_steps`): on a busy machine
that fit can go degenerate without anything looking wrong (the in-step scales sitting at their
clamp bounds, trading one op group against another to absorb a slow stretch), and every later
prediction inherits it. `check_profile` looks for that and returns one plain sentence per
problem; `calibrate` stores them in `meta.warnings` and issues each as a `CalibrationWarning`,
the CLIs print them, `validate` copies them into details.json and its report page.

Checks:
- an in-step scale at (within 0.5% of) a bound of `SCALE_BOUNDS`: the fit wanted to go further,
  so that scale and everything it multiplies are not measured but clamped;
- the fit's held-out error (each scheduler configuration of the calibration workload predicted
  by the fit on the others) above `HELD_OUT_LIMIT_PCT`: the fit does not carry over to step
  mixes it was not fitted on, which is what a validation workload is.
"""
from __future__ import annotations

import os
import sys
import warnings

from calibrate.engine_steps import SCALE_BOUNDS

#: the engine-step fit's held-out median |error| above which the calibration says it failed: twice the
#: per-step acceptance bar of `servesim validate` (5%), so a miss cannot be read as the model's error
HELD_OUT_LIMIT_PCT = 10.0
#: a scale within this fraction of a bound counts as sitting on it
AT_BOUND = 0.005


class CalibrationWarning(UserWarning):
    """A calibration fit clamped at its bounds or missed its own held-out check."""


def check_profile(meta: dict) -> list[str]:
    """One sentence per failed check of a profile's `meta` (empty: all passed or nothing to check)."""
    out = []
    lo, hi = SCALE_BOUNDS
    for name, value in sorted((meta.get("in_step_scale") or {}).items()):
        for bound, side in ((lo, "lower"), (hi, "upper")):
            if abs(value - bound) <= AT_BOUND * bound:
                out.append(f"in-step scale {name} = {value:.3f} sits at its {side} bound {bound}: the engine-step "
                           "fit is degenerate (op timings and engine steps met different machine states, or the "
                           "steps cannot tell this op group from another); its predictions are not measured")
    fit = meta.get("engine_step_fit") or {}
    held = fit.get("holdout_median_abs_pct")
    if held is not None and held > HELD_OUT_LIMIT_PCT:
        out.append(f"the engine-step fit misses its held-out check: each scheduler configuration predicted from "
                   f"the others is off by {held:.1f}% median (in-sample {fit.get('median_abs_pct', float('nan')):.1f}%,"
                   f" limit {HELD_OUT_LIMIT_PCT:.0f}%)")
    return out


def warn(messages: list[str]) -> None:
    """Issue each message as a `CalibrationWarning` (stacklevel: the caller of `calibrate`)."""
    for m in messages:
        warnings.warn(m, CalibrationWarning, stacklevel=3)


def print_warnings(meta: dict, file=None) -> None:
    """Print `meta.warnings` as 'WARNING: ...' lines (stderr by default), with the load during the
    calibration, which is the usual cause on a shared machine."""
    file = file or sys.stderr
    messages = meta.get("warnings") or []
    for m in messages:
        print(f"WARNING: calibration: {m}", file=file)
    if messages and meta.get("load_avg_1m_at_start") is not None:
        lo, hi = meta.get("load_avg_1m_at_start"), meta.get("load_avg_1m_at_end")
        # below one busy core per two the processes we see are not the cause: on a shared VM the
        # machine's own speed still moved by 10-25% at load 0.6 (benchmarks/machine_floor.py)
        quiet = max(lo, hi if hi is not None else lo) < 0.5 * (os.cpu_count() or 1)
        advice = ("the processes here were few; benchmarks/machine_floor.py measures how much the machine's own "
                  "speed moves" if quiet else "rerun on a quieter machine")
        print(f"WARNING: calibration: load average {lo}-{hi} while it ran; {advice}", file=file)


def held_out_line(meta: dict) -> str | None:
    """'engine-step fit: in-sample X%, held out Y% (...)' of a profile's meta, None without a fit."""
    fit = meta.get("engine_step_fit") or {}
    if fit.get("median_abs_pct") is None:
        return None
    held = fit.get("holdout_median_abs_pct")
    held_s = "-" if held is None else f"{held:.1f}%"
    by = fit.get("holdout_median_abs_pct_by_configuration") or {}
    each = (", ".join(f"{k} {v:.1f}%" for k, v in by.items()) if by
            else f"each of {', '.join(fit.get('configurations') or [])}")
    return (f"calibration: engine-step fit in-sample {fit['median_abs_pct']:.1f}%, held out {held_s} median "
            f"({each}, each predicted from the others; limit {HELD_OUT_LIMIT_PCT:.0f}%)")

"""The CPU acceptance protocol of issue 5: `servesim validate` of every shipped workload, each with a
quick profile made in its own run (as `servesim validate CONFIG --device cpu` does).

    .venv/bin/python benchmarks/validate_cpu.py [--out runs/validate-cpu] [--full] [--one-profile]

Each run calibrates the engine for examples/tiny-llama (quick grid, one torch thread) around the
engine's run of the workload (half the calibration's engine steps before it, half after), then
compares; `--one-profile` instead makes one profile first and validates every workload with it.
It prints, per workload,
the median / p90 per-step error, the mean TTFT / TPOT / E2E errors, the same per-step error
against the engine thread's CPU time (model error without the time spent waiting for a core) and
the load average. The bar: per-step median <= 5%, mean TTFT, TPOT and E2E within 10%.

Then, per workload, the median signed per-step error against the engine's CPU time by step kind
(decode-only with 1, 2-4, 5+ sequences; prefill-only; mixed): where the model is biased, apart
from noise. Thread CPU time is robust to waiting for a core but not to other processes sharing
the last-level cache, so compare runs at similar load.
"detrend" is the per-step median error after taking out the drift of the machine's speed over
the run (each step's signed error minus the median of its 51 neighbours'): the model's own error.
"drift" is how much slower the calibration's engine steps ran after the run than before it (the
machine changing speed around the run; see `calibrate.bench.bracket_drift_pct`).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def by_kind(steps_csv: Path) -> dict[str, str]:
    """Median signed % error (predicted vs the engine thread's CPU time) per kind of step."""
    import numpy as np
    import pandas as pd

    d = pd.read_csv(steps_csv)
    err = (d.predicted_s - d.measured_cpu_s) / d.measured_cpu_s * 100.0
    dec = d.num_prefill_tokens == 0
    kinds = {"dec1": dec & (d.num_seqs == 1), "dec2-4": dec & d.num_seqs.between(2, 4), "dec5+": dec & (d.num_seqs >= 5),
             "prefill": d.num_decode_tokens == 0, "mixed": ~dec & (d.num_decode_tokens > 0)}
    return {k: f"{np.median(err[m]):+.1f}% ({int(m.sum())})" for k, m in kinds.items() if m.any()}


def main(argv=None) -> int:
    import torch

    from calibrate.bench import calibrate
    from calibrate.validate import validate

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "runs" / "validate-cpu"))
    ap.add_argument("--full", action="store_true", help="calibrate on the full grid")
    ap.add_argument("--one-profile", action="store_true", help="one profile made first for every workload")
    args = ap.parse_args(argv)
    out = Path(args.out)
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    prof_path = None
    if args.one_profile:
        profile = calibrate(REPO / "examples/tiny-llama/config.json", "cpu", quick=not args.full, progress=True)
        prof_path = profile.save(out / "profile.json")
    print(f"{'workload':<26} {'step med':>8} {'step p90':>8} {'TTFT':>7} {'TPOT':>7} {'E2E':>7} {'cpu med':>8} {'detrend':>8} {'drift':>6} {'load':>5}")
    ok = True
    for toml in sorted((REPO / "examples").glob("validate-*.toml")):
        report = validate(toml, "cpu", profile=prof_path, out_dir=out / toml.stem, quick=not args.full, progress=False)
        details = json.loads((out / toml.stem / "details.json").read_text())
        st, m = report["step_time_abs_pct_error"], report["metrics"]
        errs = [m[k]["mean"]["abs_pct_error"] for k in ("ttft_s", "tpot_s", "e2e_s")]
        ok &= st["median"] <= 5.0 and all(e is not None and e <= 10.0 for e in errs)
        cpu = details["step_time_abs_pct_error_vs_cpu_time"]["median"]
        print(f"{toml.stem:<26} {st['median']:>7.1f}% {st['p90']:>7.1f}% " + " ".join(f"{e:>6.1f}%" for e in errs)
              + f" {cpu:>7.1f}% {details['step_time_abs_pct_error_detrended']['median'] or float('nan'):>7.1f}%"
              + f" {details.get('bracket_drift_pct') if details.get('bracket_drift_pct') is not None else float('nan'):>+5.1f}%"
              f" {details['load_avg_1m'][1]:>5.2f}")
    print(f"bar (step <= 5%, TTFT/TPOT/E2E <= 10%): {'met' if ok else 'not met'}; reports under {out}")
    print(f"load average after: {os.getloadavg()[0]:.2f}  ({_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} CPUs)")
    print("\nmedian signed error vs engine CPU time by step kind (steps):")
    for toml in sorted((REPO / "examples").glob("validate-*.toml")):
        print(f"  {toml.stem:<24} " + "  ".join(f"{k} {v}" for k, v in by_kind(out / toml.stem / "steps.csv").items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`servesim validate CONFIG.toml --device cpu|cuda [--profile PROFILE] [--out DIR]`.

Calibrates the engine's ops (or loads a profile), simulates the config's workload with the
profiled latency model, runs the same workload on the real engine, and writes the comparison
(`calibrate.validate`): validation.json, steps.csv, cdfs.png, steps.png, index.html.
"""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML config whose model is a HF config.json the engine can build")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", default=None, help="use this profile instead of calibrating now")
    parser.add_argument("--out", default=None, help="report folder (default: runs/validate-<config name>)")
    parser.add_argument("--full", action="store_true", help="calibrate on the full grid (default: the quick grid)")
    parser.add_argument("--grid", default=None, choices=("smoke", "quick", "full"),
                        help="the calibration grid (default quick; smoke: a handful of shapes, seconds, for dry "
                             "runs of the machinery, not for accuracy)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, as calibrate)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value (repeatable)")
    parser.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    from pathlib import Path

    from calibrate.validate import validate

    import warnings

    from calibrate.fit_checks import CalibrationWarning, held_out_line, print_warnings

    if args.full and args.grid not in (None, "full"):
        raise ValueError(f"--full: contradicts --grid {args.grid}; give one of them")
    grid = args.grid or ("full" if args.full else "quick")
    out = args.out or f"runs/validate-{Path(args.config).stem}"
    with warnings.catch_warnings():  # printed below, after the figures they qualify
        warnings.simplefilter("ignore", CalibrationWarning)
        report = validate(args.config, args.device, args.profile, out, quick=grid, overrides=args.set,
                          progress=not args.no_progress, threads=args.threads)
    st = report["step_time_abs_pct_error"]
    print(f"per-step time abs error: median {st['median']:.1f}%  p90 {st['p90']:.1f}%")
    print(f"{'metric':<10} {'stat':<20} {'predicted':>12} {'measured':>12} {'error':>8}")
    for name, block in report["metrics"].items():
        scale = 1e3 if name != "throughput" else 1.0
        for stat, c in block.items():
            if c["measured"] is None:
                continue
            p = "-" if c["predicted"] is None else f"{c['predicted'] * scale:.4g}"
            e = "-" if c["abs_pct_error"] is None else f"{c['abs_pct_error']:.1f}%"
            print(f"{name:<10} {stat:<20} {p:>12} {c['measured'] * scale:>12.4g} {e:>8}")
    import json

    details = json.loads((Path(out) / "details.json").read_text())
    cpu = details.get("step_time_abs_pct_error_vs_cpu_time") or {}
    if cpu.get("median") is not None:
        print(f"diagnostic: per-step error against the engine thread's CPU time: median {cpu['median']:.1f}% "
              f"p90 {cpu['p90']:.1f}% (wall/CPU median {details.get('wall_over_cpu_median'):.2f}: "
              f"above 1, the machine was busy)")
    dt = details.get("step_time_abs_pct_error_detrended") or {}
    if dt.get("median") is not None:
        print(f"diagnostic: per-step error with the machine's drift over the run taken out (each step against the "
              f"median of its {dt['window']} neighbours): median {dt['median']:.1f}% p90 {dt['p90']:.1f}%")
    drift = details.get("bracket_drift_pct")
    if drift is not None:
        note = (" (above 5%: the machine changed speed around the run, which the per-step figure mostly measures;"
                " run again on a quieter machine)" if abs(drift) > 5.0 else "")
        how = f"{drift:.1f}% slower" if drift >= 0 else f"{-drift:.1f}% faster"
        print(f"diagnostic: the calibration's engine steps ran {how} after the run than before it{note}")
    meta = details.get("profile_meta") or {}
    line = held_out_line(meta)
    if line:
        print(line)
    print(f"report: {out}/index.html")
    print_warnings({**meta, "warnings": details.get("calibration_warnings") or []})
    return 0

"""`servesim validate CONFIG.toml --device cpu|cuda [--profile PROFILE] [--out DIR]`.

Calibrates the engine's ops (or loads a profile), simulates the config's workload with the
profiled latency model, runs the same workload on the real engine, and writes the comparison
(`calibrate.validate`): validation.json, steps.csv, cdfs.png, steps.png, index.html. The table
and the machine's diagnostics print from the report in memory.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from calibrate.fit_checks import CalibrationWarning, held_out_line, print_warnings
from calibrate.validate import figures_by_speed, run_validation
from records.display import number, percent, slower_or_faster
from servesim.commands import options
from servesim.commands.calibrate import small_grid
from sim.notes import setting_notes
from sim.workload import build_workload


def configure(parser: argparse.ArgumentParser) -> None:
    options.add_config(parser, help="TOML config whose model is a HF config.json the engine can build")
    options.add_device(parser)
    parser.add_argument("--profile", default=None, help="use this profile instead of calibrating now")
    options.add_out(parser, "validation.json, steps.csv, the plots and index.html",
                    default_text="runs/validate-<config name>")
    parser.add_argument("--full", action="store_true", help="calibrate on the full grid (default: the quick grid)")
    parser.add_argument("--grid", default=None, choices=("smoke", "quick", "full"),
                        help="the calibration grid (default quick; smoke: a handful of shapes, seconds, for dry "
                             "runs of the machinery, not for accuracy)")
    parser.add_argument("--no-speed-probe", action="store_true",
                        help="do not read the machine's speed through the calibration and the run (calibrate."
                             "speed_probe); the predictions are then the profile's machine's")
    options.add_threads(parser)
    options.add_set(parser)
    options.add_json(parser, "validation.json")
    options.add_quiet(parser)


def report_lines(report: dict, details: dict) -> list[str]:
    """The table of predicted vs measured and the diagnostics lines of one validation."""
    st = report["step_time_abs_pct_error"]
    lines = [f"per-step time abs error: median {percent(st['median'] / 100)}  p90 {percent(st['p90'] / 100)}",
             f"{'metric':<10} {'stat':<20} {'predicted':>12} {'measured':>12} {'error':>8}"]
    for name, block in report["metrics"].items():
        scale = 1e3 if name != "throughput" else 1.0
        for stat, c in block.items():
            if c["measured"] is None:
                continue
            p = "-" if c["predicted"] is None else number(c["predicted"] * scale)
            e = "-" if c["abs_pct_error"] is None else percent(c["abs_pct_error"] / 100)
            lines.append(f"{name:<10} {stat:<20} {p:>12} {number(c['measured'] * scale):>12} {e:>8}")
    cpu = details.get("step_time_abs_pct_error_vs_cpu_time") or {}
    if cpu.get("median") is not None:
        lines.append(f"diagnostic: per-step error against the engine thread's CPU time: median {cpu['median']:.1f}% "
                     f"p90 {cpu['p90']:.1f}% (wall/CPU median {details.get('wall_over_cpu_median'):.2f}: "
                     f"above 1, the machine was busy)")
    waited = details.get("waited_for_core_fraction")
    if waited is not None:
        lines.append(f"engine clock: {details.get('engine_clock')} (its thread waited for a core {waited * 100:.1f}% of the "
                     "steps' wall time; left out of every measured time)")
    amp = details.get("mean_amplification") or {}
    if amp.get("ttft_s") is not None:
        lines.append(f"diagnostic: a 1% error in every step moves the mean TTFT {amp['ttft_s']:.1f}%, TPOT "
                     f"{amp.get('tpot_s') or 0:.1f}%, E2E {amp.get('e2e_s') or 0:.1f}% on this workload (predicted "
                     f"utilization {details.get('predicted_utilization') or 0:.2f}; well above 1: queueing "
                     "amplifies the step error)")
    dt = details.get("step_time_abs_pct_error_detrended") or {}
    if dt.get("median") is not None:
        lines.append(f"diagnostic: per-step error with the machine's drift over the run taken out (each step against "
                     f"the median of its {dt['window']} neighbours): median {dt['median']:.1f}% p90 {dt['p90']:.1f}%")
    drift = details.get("bracket_drift_pct")
    if drift is not None:
        note = (" (above 5%: the machine changed speed around the run, which the per-step figure mostly measures;"
                " run again on a quieter machine)" if abs(drift) > 5.0 else "")
        lines.append(f"diagnostic: the calibration's engine steps ran {slower_or_faster(drift)} after the run than "
                     f"before it{note}")
    lines += speed_lines(details)
    cache_note = (details.get("last_level_cache") or {}).get("note")
    if cache_note:
        lines.append(f"diagnostic: {cache_note}")
    line = held_out_line(details.get("profile_meta") or {})
    if line:
        lines.append(line)
    return lines


def speed_lines(details: dict) -> list[str]:
    """What the speed probe saw (`calibrate.speed_probe`), which speed the figures above are at
    (`calibrate.validate.speed_basis`) and why, and the same comparison at the other speed."""
    probe = details.get("speed_probe") or {}
    if not probe:
        return []
    lines = []
    # the run's speed is against the calibration's reference: without one (a profile made without
    # the probe) no reading says how the two compare
    if probe.get("run_median") is not None and probe.get("reference_s"):
        how = slower_or_faster((probe["run_median"] - 1) * 100)
        lines.append(f"diagnostic: by the speed probe ({probe['run_num_readings']} readings) the machine ran the "
                     f"engine {how} during the run than during its calibration (p10-p90 {probe['run_p10']:.2f}-"
                     f"{probe['run_p90']:.2f})")
    basis, headline, other = figures_by_speed(details)
    at_run = basis == "run"
    scatter = probe.get("run_scatter_pct")
    if scatter is not None:
        head = (headline.get("step_time_abs_pct_error") or {}).get("median")
        cal = probe.get("calibration_scatter_pct")
        mostly = head is not None and scatter >= 0.5 * head
        lines.append(f"diagnostic: the probe's fixed step scattered {scatter:.1f}% around the speed nearest it during "
                     f"the run{f' ({cal:.1f}% during the calibration)' if cal is not None else ''}: the per-step "
                     "error a prediction exact up to the machine's speed would still show"
                     + ("; half the per-step figure or more, so much of that figure is the machine's" if mostly else ""))
    why = (details.get("speed_basis") or {}).get("why")
    if why:
        lines.append(f"the figures above are at the {basis}'s speed: {why}")
    st, means = (other.get("step_time_abs_pct_error") or {}).get("median"), other.get("mean_abs_pct_error") or {}
    if st is not None:
        lines.append(f"diagnostic: at the {'calibration' if at_run else 'run'}'s speed instead"
                     f"{'' if at_run else ' (every prediction scaled by it)'}: per-step median " + percent(st / 100)
                     + ", mean " + ", ".join(f"{k.split('_')[0].upper()} {percent(v / 100)}"
                                             for k, v in means.items() if v is not None))
    return lines


def run(args) -> int:
    options.check_threads(args)
    if args.full and args.grid not in (None, "full"):
        raise ValueError(f"--full: contradicts --grid {args.grid}; give one of them")
    grid = args.grid or ("full" if args.full else "quick")
    if args.profile is None:
        grid = small_grid(args, grid)
    out = args.out or f"runs/validate-{Path(args.config).stem}"
    config = options.load_config_args(args)  # SERVESIM_SMALL's caps join args.overrides
    notes = [*config.notes, *setting_notes(config, build_workload(config.workload, config.scheduler.max_model_len))]
    options.note(args, *notes)
    with warnings.catch_warnings():  # printed below, after the figures they qualify
        warnings.simplefilter("ignore", CalibrationWarning)
        report, details = run_validation(args.config, args.device, args.profile, out, quick=grid,
                                         overrides=args.overrides, progress=options.progress(args),
                                         threads=args.threads, notes=notes,
                                         speed_probe=not args.no_speed_probe)
    if args.json:
        options.print_json(report)
    options.say(args, *report_lines(report, details), f"report: {out}/index.html")
    print_warnings({**(details.get("profile_meta") or {}), "warnings": details.get("calibration_warnings") or []})
    return 0

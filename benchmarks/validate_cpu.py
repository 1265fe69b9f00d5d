"""The CPU acceptance protocol (issues 5 and 15): `servesim validate` of fresh random workloads and of
every shipped one, each with a quick profile made in its own run (as `servesim validate` does).

    .venv/bin/python benchmarks/validate_cpu.py [--random N] [--seed S] [--no-shipped] [--out runs/validate-cpu]
                                                [--full] [--one-profile] [--floor S] [--no-speed-probe]
                                                [--model auto|tiny-llama|small-llama]

`--random N` first draws N workloads nobody tuned anything on (`calibrate.random_workloads`; seed
`--seed`, default a new one, printed; TOML files beside the reports), then the shipped
examples/validate-*.toml. Each run calibrates its model (quick grid, one torch thread; the random
workloads' is `--model`: examples/tiny-llama, or examples/small-llama whose weights do not fit a
shared last-level cache; by default the smallest whose weights exceed this CPU's last-level cache,
`calibrate.random_workloads.default_model`) around the engine's run (`--one-profile`: one profile
per model, for all its workloads; `--floor S`: first measure for S seconds what a perfect model would score on this
machine, `benchmarks/machine_floor.py`). The bar: per-step median <= 5%, mean TTFT, TPOT and E2E
within 10%. Columns: "cpu med" the per-step error against the engine
thread's CPU time; "detrend" with the machine's drift taken out (each step's error minus its 51
neighbours' median); "drift" the calibration's engine steps' slow-down from before to after the run
(`calibrate.engine_bench.bracket_drift_pct`); "held" the calibration's held-out error; "offer" the load a
random workload was drawn at (against the generator's rough rates); "waited" the share of
the steps' wall time the engine's thread waited for a core (left out on validate's engine clock,
`calibrate.validate.engine_clock`); "util" the predicted run's busy share of its span, "amp" how
many % the mean TTFT moves per % of every step's time (`calibrate.validate.conditioning`: above ~2
the workload is near saturation and its mean errors say more about queueing than the model); then
warnings and
the median signed error by step kind (decode-only 1, 2-4, 5+; prefill-only; mixed; the decode-only
steps 1-3 after a step that carried prefill tokens). "speed": how much
slower (+) the machine ran the engine during the run than during its calibration, read by the speed
probe (`calibrate.speed_probe`, which the calibration divides out of its own timings); "scat": the
probe's own fixed step's median |deviation| from the speed around it during the run
(`SpeedProbe.scatter`), the per-step floor of the machine measured alongside the run, where
`--floor S` measures one before it; "at": the
speed the figures are at (`calibrate.validate.speed_basis`: "run" where the model's weights exceed
the last-level cache and the probe follows the machine, else "cal"), "other" and "o mean" (the worst
of the three means) the same comparison at the other speed. `--no-speed-probe`: the calibration's
speed, no other. Last, the decode-only steps of all runs pooled with each
run's own level taken out, by decode batch and context per sequence (`decode_shape`): what the model
gets wrong whatever speed the machine ran at. Under `--out`: each workload's reports, and
summary.csv / summary.png, every workload's four figures against the bar.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def by_kind(steps_csv: Path) -> dict[str, str]:
    """Median signed % error (predicted vs the engine thread's CPU time) per kind of step."""
    import numpy as np
    import pandas as pd

    d = pd.read_csv(steps_csv).sort_values("step_id")
    err = (d.predicted_s - d.measured_cpu_s) / d.measured_cpu_s * 100.0
    dec = d.num_prefill_tokens == 0
    # steps since the last one that carried prefill tokens: the first few decode steps after a prefill
    # run slower than the model says (a warm-up the plan-pure step time does not charge)
    prefills_so_far = (~dec).cumsum()
    since = dec.astype(int).groupby(prefills_so_far).cumsum()
    kinds = {"dec1": dec & (d.num_seqs == 1), "dec2-4": dec & d.num_seqs.between(2, 4), "dec5+": dec & (d.num_seqs >= 5),
             "prefill": d.num_decode_tokens == 0, "mixed": ~dec & (d.num_decode_tokens > 0),
             "dec1-3 after prefill": dec & since.between(1, 3) & (prefills_so_far > 0)}
    if "num_context_tokens" in d:  # long contexts: where the decode attention curve is least certain
        kinds["dec ctx>=256/seq"] = dec & (d.num_context_tokens >= 256 * d.num_seqs)
    return {k: f"{np.median(err[m]):+.1f}% ({int(m.sum())})" for k, m in kinds.items() if m.any()}


def decode_shape(steps_csvs: list[Path], min_steps: int = 5):
    """The model's error by decode batch and context per sequence with each run's own level taken out.

    A run's per-step figure is mostly the level the machine met (its speed against the calibration),
    which hides a shape the model gets wrong at every level. Per run: each decode-only step's
    predicted / measured (the engine thread's CPU time) over the run's median of it over all its
    steps, as a signed %, the median per cell (cells of at least `min_steps` steps); then per cell
    the median over runs, and how many runs had it: a DataFrame (median_pct, runs) indexed by decode
    batch (1, 2, 3, 4, 5-8, 9+) and context tokens per sequence (<=128, 129-256, 257-512, >512), empty
    without decode steps."""
    import numpy as np
    import pandas as pd

    cells = []
    for path in steps_csvs:
        d = pd.read_csv(path)
        ratio = d.predicted_s / d.measured_cpu_s
        dec = (d.num_prefill_tokens == 0) & (d.num_decode_tokens > 0)
        if "num_context_tokens" not in d or not dec.any():
            continue
        # the level as a factor: a machine 30% slower scales every measured step alike
        rel = (ratio / float(np.median(ratio)) - 1.0)[dec] * 100.0
        seqs = d.num_seqs[dec]
        batch = pd.cut(seqs, [0, 1, 2, 3, 4, 8, np.inf], labels=["1", "2", "3", "4", "5-8", "9+"])
        ctx = pd.cut(d.num_context_tokens[dec] / seqs, [-np.inf, 128, 256, 512, np.inf],
                     labels=["<=128", "129-256", "257-512", ">512"])
        g = pd.DataFrame({"batch": batch, "ctx": ctx, "rel": rel}).groupby(["batch", "ctx"], observed=True).rel
        run = g.median()[g.size() >= min_steps]
        cells.append(run)
    if not cells:
        return pd.DataFrame()
    runs = pd.concat(cells, axis=1)
    return pd.DataFrame({"median_pct": runs.median(axis=1), "runs": runs.notna().sum(axis=1)})


BAR_STEP, BAR_MEAN = 5.0, 10.0  # % per-step median; % each of the mean TTFT, TPOT and E2E


def write_summary(out: Path, rows: list[dict]) -> Path | None:
    """summary.csv (one row per workload: group, workload, step median, TTFT, TPOT, E2E, met, the
    speed they are at, the speed probe's own scatter in the run: the machine's per-step floor)
    under `out`, and summary.png beside it: each workload's four figures against
    the bar's two lines (None for the figure without matplotlib)."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows, columns=["group", "workload", "step_median_pct", "ttft_pct", "tpot_pct", "e2e_pct", "met",
                                        "speed_basis", "probe_scatter_pct"])
    table.to_csv(out / "summary.csv", index=False)
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = ("step_median_pct", "ttft_pct", "tpot_pct", "e2e_pct")
    labels = ("step median", "mean TTFT", "mean TPOT", "mean E2E")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(table) + 2), 4.2))
    width, xs = 0.2, range(len(table))
    for k, (col, label) in enumerate(zip(cols, labels)):
        ax.bar([x + (k - 1.5) * width for x in xs], table[col].fillna(0.0), width, label=label)
    ax.axhline(BAR_STEP, color="k", lw=0.8, ls="--", label=f"bar: step {BAR_STEP:g}%")
    ax.axhline(BAR_MEAN, color="k", lw=0.8, ls=":", label=f"bar: means {BAR_MEAN:g}%")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([w.split("-", 2)[-1] if w.startswith("random-") else w for w in table.workload],
                       rotation=30, ha="right", fontsize=7)
    top = max(float(table[list(cols)].max().max()) if len(table) else 0.0, BAR_MEAN)
    ax.set_ylim(0, top * 1.4)  # headroom for the legend above the bars
    ax.set_ylabel("|error| (%)")
    ax.set_title(f"CPU validation: {int(table.met.sum())} of {len(table)} workloads met the bar", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(out / "summary.png", dpi=110)
    plt.close(fig)
    return out / "summary.png"


def main(argv=None) -> int:
    import torch

    from calibrate.bench import calibrate
    from calibrate.fit_checks import CalibrationWarning
    from calibrate.cpu_cache import last_level_cache
    from calibrate.random_workloads import AUTO, VALIDATION_MODELS, default_model, draw, write
    from calibrate.validate import figures_by_speed, validate
    from sim.config import load_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "runs" / "validate-cpu"))
    ap.add_argument("--full", action="store_true", help="calibrate on the full grid")
    ap.add_argument("--grid", choices=("smoke", "quick", "full"), default=None,
                    help="the calibration grid (default quick; smoke: seconds, for trying the machinery only)")
    ap.add_argument("--one-profile", action="store_true",
                    help="one profile per model, made at its first workload, for every workload of that model")
    ap.add_argument("--random", type=int, default=0, metavar="N", help="also validate N fresh random workloads, first")
    ap.add_argument("--model", default=AUTO, choices=(AUTO, *VALIDATION_MODELS),
                    help="the random workloads' model (default auto: the smallest whose weights exceed this "
                         "CPU's last-level cache, so that other tenants of that cache do not decide its steps' "
                         "times; examples/small-llama/README.md); the shipped workloads name their own")
    ap.add_argument("--seed", type=int, default=None, help="their seed (default: a new one, printed)")
    ap.add_argument("--no-shipped", action="store_true", help="leave out the shipped examples/validate-*.toml")
    ap.add_argument("--floor", type=float, default=0.0, metavar="S",
                    help="first measure the machine's per-step floor for S seconds (benchmarks/machine_floor.py)")
    ap.add_argument("--no-speed-probe", action="store_true",
                    help="without the speed probe (calibrate.speed_probe): the profile's machine, as before it")
    args = ap.parse_args(argv)
    if args.random < 0:
        raise SystemExit(f"--random: expected a count >= 0, got {args.random}")
    if args.model == AUTO:
        args.model, why = default_model(last_level_cache())
        print(f"random workloads' model: {args.model} ({why})")
    model_config = REPO / VALIDATION_MODELS[args.model].config
    grid = args.grid or ("full" if args.full else "quick")
    out = Path(args.out)
    torch.set_num_threads(1)
    if args.floor > 0:  # what a perfect model would score on this machine now (the bar's floor)
        from machine_floor import main as floor

        floor(["--seconds", str(args.floor), "--model", str(model_config)])
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    groups, offered = [], {}
    if args.random:
        seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "little")
        paths = write(seed, args.random, out / f"random-{seed}", model=args.model)
        offered.update({(w := draw(seed, i, args.model))["name"]: w["offered_load"] for i in range(args.random)})
        groups.append((f"fresh random workloads (seed {seed}; rerun: --random {args.random} --seed {seed})", paths))
    if not args.no_shipped:
        groups.append(("shipped workloads (examples/validate-*.toml)", sorted((REPO / "examples").glob("validate-*.toml"))))
    profiles: dict[str, Path] = {}  # --one-profile: one per model the workloads name, made at its first

    def profile_for(toml: Path) -> Path | None:
        if not args.one_profile:
            return None
        model = str(load_config(toml).model.name)  # the shipped workloads name the tiny model, whatever --model
        if model not in profiles:
            profiles[model] = calibrate(model, "cpu", quick=grid, progress=True).save(
                out / f"profile-{Path(model).parent.name}.json")
        return profiles[model]

    summary: list[dict] = []
    ok, warned, cache_notes, width = True, [], set(), max([26] + [len(p.stem) for _, paths in groups for p in paths])
    for title, paths in groups:
        print(f"\n{title}")
        print(f"{'workload':<{width}} {'step med':>8} {'step p90':>8} {'TTFT':>7} {'TPOT':>7} {'E2E':>7} {'cpu med':>8} "
              f"{'detrend':>8} {'drift':>6} {'held':>5} {'waited':>6} {'offer':>5} {'util':>5} {'amp':>5} {'load':>5} "
              f"{'speed':>6} {'scat':>5} {'at':>3} {'other':>6} {'o mean':>7} bar")
        met = 0
        for toml in paths:
            profile = profile_for(toml)
            with warnings.catch_warnings():  # counted in the table and listed after it
                warnings.simplefilter("ignore", CalibrationWarning)
                report = validate(toml, "cpu", profile=profile, out_dir=out / toml.stem, quick=grid,
                                  progress=False, speed_probe=not args.no_speed_probe)
            details = json.loads((out / toml.stem / "details.json").read_text())
            st, m = report["step_time_abs_pct_error"], report["metrics"]
            basis, _, other = figures_by_speed(details)
            errs = [m[k]["mean"]["abs_pct_error"] for k in ("ttft_s", "tpot_s", "e2e_s")]
            this = st["median"] <= BAR_STEP and all(e is not None and e <= BAR_MEAN for e in errs)
            # the probe's fixed step around the speed nearest it: the machine's per-step floor, in the run
            scat = (details.get("speed_probe") or {}).get("run_scatter_pct")
            summary.append({"group": title, "workload": toml.stem, "step_median_pct": st["median"],
                            "ttft_pct": errs[0], "tpot_pct": errs[1], "e2e_pct": errs[2], "met": bool(this),
                            "speed_basis": basis, "probe_scatter_pct": scat})
            ok &= this
            met += this
            cpu = details["step_time_abs_pct_error_vs_cpu_time"]["median"]
            held = (details.get("engine_step_fit") or {}).get("holdout_median_abs_pct")
            drift = details.get("bracket_drift_pct")
            if details.get("calibration_warnings"):
                warned.append((toml.stem, details["calibration_warnings"]))
            if (details.get("last_level_cache") or {}).get("note"):
                cache_notes.add(details["last_level_cache"]["note"])
            print(f"{toml.stem:<{width}} {st['median']:>7.1f}% {st['p90']:>7.1f}% "
                  + " ".join(f"{e:>6.1f}%" if e is not None else f"{'-':>7}" for e in errs)
                  + f" {cpu:>7.1f}% {details['step_time_abs_pct_error_detrended']['median'] or float('nan'):>7.1f}%"
                  + f" {drift if drift is not None else float('nan'):>+5.1f}% {held if held is not None else float('nan'):>4.1f}%"
                  + f" {(details.get('waited_for_core_fraction') or 0.0) * 100:>5.1f}%"
                  + f" {offered.get(toml.stem, float('nan')):>5.2f}"
                  + f" {details.get('predicted_utilization') or float('nan'):>5.2f}"
                  + f" {(details.get('mean_amplification') or {}).get('ttft_s') or float('nan'):>5.1f}"
                  f" {details['load_avg_1m'][1]:>5.2f}"
                  + f" {((details.get('speed_probe') or {}).get('run_median') or 1.0) * 100 - 100:>+5.1f}%"
                  + f" {scat if scat is not None else float('nan'):>4.1f}%"
                  + f" {basis[:3]:>3}"
                  + f" {(other.get('step_time_abs_pct_error') or {}).get('median') or float('nan'):>5.1f}%"
                  + f" {max((e for e in (other.get('mean_abs_pct_error') or {}).values() if e is not None), default=float('nan')):>6.1f}%"
                  + f" {'met' if this else 'MISSED'}"
                  + (" (calibration warned)" if details.get("calibration_warnings") else ""))
        print(f"  {met} of {len(paths)} met the bar")
    plot = write_summary(out, summary)
    print(f"\nbar (step <= {BAR_STEP:g}%, TTFT/TPOT/E2E <= {BAR_MEAN:g}%): {'met' if ok else 'not met'}; reports under "
          f"{out} (summary.csv{', summary.png' if plot else ''})")
    for stem, msgs in warned:
        for msg in msgs:
            print(f"WARNING: {stem}: calibration: {msg}")
    for note in sorted(cache_notes):  # calibrate.cpu_cache: why a run may miss on a shared machine
        print(f"note: {note}")
    print(f"load average after: {os.getloadavg()[0]:.2f}  ({_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} CPUs)")
    print("\nmedian signed error vs engine CPU time by step kind (steps):")
    for toml in [p for _, paths in groups for p in paths]:
        print(f"  {toml.stem:<24} " + "  ".join(f"{k} {v}" for k, v in by_kind(out / toml.stem / "steps.csv").items()))
    shape = decode_shape([out / toml.stem / "steps.csv" for _, paths in groups for toml in paths])
    if not shape.empty:
        print("\ndecode-only steps, each run's level taken out: median over runs of the run's median signed error "
              "(runs) by decode batch x context tokens per sequence")
        table = shape.apply(lambda r: f"{r.median_pct:+.1f}% ({int(r.runs)})", axis=1).unstack("ctx").fillna("")
        print(table.to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`servesim reproduce GROUNDTRUTH_DIR --out REPORT`: simulate every real run found there and score it.

Writes to the REPORT folder: `report.md` (a table per run and metric: measured, predicted, error;
medians of |error| per source and over all runs), `report.csv` (the same rows), `medians.csv`,
`fits.json` (the overhead terms each run was predicted with and the runs they were fitted on),
`settings.csv` (every engine setting the runs record: modelled or not, `fidelity.engine_settings`;
the not-modelled ones are also noted on stderr and in `report.csv`'s `not_modelled`),
`ttft_parts.csv` (each run's mean TTFT as named parts, measured and predicted, with their origins:
`fidelity.ttft_parts`; `ttft_parts.png` draws them, a panel a run), `workload.csv` (the client behaviour simulated and the generated against the
measured request lengths: `fidelity.client_workload`), `served.csv` (each run's requests by how
they ended, measured and predicted, with the client's timeout: `fidelity.client_timeout`),
`benchmarks.csv` for runs measured by their guidellm report (each benchmark's req/s, TTFT, ITL
and E2E beside the report's, replayed or simulated from the profile) and inference-perf runs
simulated stage by stage (each stage beside its own report), with benchmarks.png, each run's
curve, and a report.md section: `fidelity.benchmarks`) and `errors.png` (predicted vs measured).
With `--fit source` (default: a planner predicting a new deployment) nothing measured or fitted on
a run's own source (campaign folder) reaches it (`fidelity.reproduce.reproduce_source_out`); with
`--fit loo` each run is predicted with terms fitted on the other runs of its source only;
`--overhead FILE` applies a fitted layer instead and leaves the runs it was fitted on out of the
score.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from fidelity.benchmarks import write_benchmarks
from fidelity.client_workload import version_assumption
from fidelity.engine_settings import not_modelled, settings_table
from fidelity.host_overhead import HostOverhead
from fidelity.predict import GPU_MODEL_KINDS, why_unpredictable
from fidelity.reproduce import reproduce
from fidelity.run_folders import FOLDER_HELP, LAYOUTS, find_runs, matches, measurements_not_runs, run_candidates
from fidelity.runs import METRICS
from fidelity.ttft_parts import write_run_tables
from policies import ConfigError
from records.display import number, percent
from records.files import read_json_object, write_json
from servesim.commands import options

LABELS = {"ttft_s": "mean TTFT", "tpot_s": "mean TPOT", "e2e_s": "mean E2E"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("groundtruth", help=FOLDER_HELP)
    options.add_out(parser, "report.md, report.csv, medians.csv, fits.json, settings.csv, served.csv, not_predicted.csv and errors.png", required=True,
                    metavar="REPORT")
    parser.add_argument("--fit", choices=("source", "loo", "none"), default="source",
                        help="source: nothing measured or fitted on a run's own source (campaign; default, "
                             "a new deployment's situation); loo: host-overhead terms fitted leave-one-run-out "
                             "within each source; "
                             "none: nothing fitted, the GPU model with its host prior (documented constants, or "
                             "host times measured on the other runs' idle engines)")
    parser.add_argument("--overhead", metavar="FILE", help="a fitted overhead layer (servesim calibrate fit-runs); "
                        "the runs it was fitted on are excluded from the score")
    parser.add_argument("--workload", choices=("auto", "replay", "profile"), default="auto",
                        help="replay the recorded requests, or regenerate them from the profile (auto: replay if known)")
    parser.add_argument("--gpu", help="GPU for runs that do not name one (default H100)")
    parser.add_argument("--gpu-model", default="auto",
                        choices=GPU_MODEL_KINDS,
                        help="which measured data drives the GPU step time (auto: the most specific available; "
                             "aiconfigurator-eager: aiconfigurator's kernels in an engine without CUDA graphs, as "
                             "auto takes for a vLLM release before 0.2.6)")
    parser.add_argument("--only", metavar="TEXT", action="append", default=[],
                        help="only runs whose name or source contains TEXT (repeatable)")
    options.add_json(parser, "the medians of |error| per source")
    options.add_quiet(parser)


def load_overhead_layer(path: str | Path) -> tuple:
    """(HostOverhead, runs it was fitted on) from a `servesim-overhead` file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--overhead: {p}: no such file")
    data = read_json_object(p, "--overhead")
    if data.get("format") != "servesim-overhead":
        raise ConfigError(f"--overhead: {p} is not a servesim-overhead file (format: {data.get('format')!r})")
    if not isinstance(data.get("overhead"), dict):
        raise ConfigError(f"--overhead: {p} has no 'overhead' table of terms (servesim calibrate fit-runs writes one)")
    fitted_on = data.get("fitted_on", [])
    if not isinstance(fitted_on, list) or not all(isinstance(n, str) for n in fitted_on):
        raise ConfigError(f"--overhead: {p}: fitted_on must be a list of run names, got {fitted_on!r}")
    return HostOverhead.from_dict(data["overhead"]), fitted_on


def markdown_report(table: pd.DataFrame, medians: pd.DataFrame, excluded: list[str], title: str,
                    settings: pd.DataFrame | None = None, unpredicted: pd.DataFrame | None = None,
                    assumed: list[str] | None = None) -> str:
    """report.md: medians, each run's errors, the runs not predicted, the settings not modelled and
    (`assumed`) what each run's files leave unsaid and was assumed (`version_assumption`)."""
    lines = [f"# {title}", "", "Errors are (predicted - measured) / measured of each run's mean. "
             "Medians are of |error| over runs.", ""]
    lines += ["## Medians of |error|", "", "| source | runs | " + " | ".join(LABELS[m] for m in METRICS) + " |",
              "|---|---:|" + "---:|" * len(METRICS)]
    for source, row in medians.iterrows():
        cells = " | ".join(f"{100 * row[m]:.1f}%" if m in row and pd.notna(row[m]) else "-" for m in METRICS)
        lines.append(f"| {source} | {int(row['num_runs'])} | {cells} |")
    if "gpu_model_note" in table:  # what the GPU step-time data holds besides a profile (DistServe's alignment)
        notes = table[table["gpu_model_note"].fillna("") != ""].drop_duplicates(["source", "gpu_model_note"])
        if len(notes):
            lines += ["", "## GPU step-time data", ""] + [f"- {r.source}: {r.gpu_model_note}"
                                                         for r in notes.itertuples(index=False)]
    lines += ["", "## Per run", ""]
    for metric in METRICS:
        lines += [f"### {LABELS[metric]} (s)", "", "| source | run | measured | predicted | error | GPU model | host-overhead terms |",
                  "|---|---|---:|---:|---:|---|---|"]
        for r in table[table["metric"] == metric].itertuples(index=False):
            used = r.fit in ("leave-one-run-out", "source-out fit") and isinstance(r.fitted_on, str) and r.fitted_on
            where = "other sources' runs" if r.fit == "source-out fit" else "other runs"
            fitted = f"terms fitted on {len(r.fitted_on.split(';'))} {where}" if used else r.fit
            lines.append(f"| {r.source} | {r.run} | {number(r.measured)} | {number(r.predicted)} | {100 * r.error:+.1f}% | "
                         f"{r.gpu_model} | {fitted} |")
        lines.append("")
    if excluded:
        lines += ["Excluded from the score (the given fit was trained on them): " + ", ".join(excluded), ""]
    if unpredicted is not None and len(unpredicted):
        lines += ["## Runs not predicted", "", "Found, but not simulated here (not in the medians); each row "
                  "says why.", "", "| source | run | reason |", "|---|---|---|"]
        lines += [f"| {r.source} | {r.run} | {r.reason} |" for r in unpredicted.itertuples(index=False)]
        lines.append("")
    if settings is not None and len(settings):
        lines += ["## Engine settings not modelled or inferred", "",
                  "Every setting the runs record is in settings.csv (modelled, not modelled, no effect, inferred).", "",
                  "| run | setting | value | status | note |", "|---|---|---|---|---|"]
        for r in settings[settings["status"].isin(["not modelled", "inferred"])].itertuples(index=False):
            lines.append(f"| {r.run} | {r.setting} | {r.value} | {r.status} | {r.note} |")
        lines.append("")
    if assumed:  # the releases read from a file's layout or assumed, as the CLI notes them
        lines += ["## Releases assumed", "", "What each run's files do not record, and what was read instead.", ""]
        lines += [f"- {line}" for line in assumed] + [""]
    return "\n".join(lines)


def plot_errors(table: pd.DataFrame, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 4.5))
    for ax, metric in zip(axes, METRICS):
        t = table[table["metric"] == metric]
        for source, g in t.groupby("source"):
            ax.scatter(g["measured"], g["predicted"], label=source, s=24)
        lo = float(min(t["measured"].min(), t["predicted"].min())) * 0.8
        hi = float(max(t["measured"].max(), t["predicted"].max())) * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="±10%")
        ax.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="predicted (s)", title=LABELS[metric])
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    root = Path(args.groundtruth)
    # a run that cannot be loaded or simulated from what it records is listed with its reason, not a stop
    unloadable: list[tuple[str, str, str]] = []
    runs = find_runs(root, args.only, unloadable=unloadable)
    if not runs and not unloadable:
        everything = run_candidates(root) if args.only else []
        if everything:
            sources = sorted({source for _, source, _ in everything})
            raise ValueError(f"--only: no run's name or source contains {' or '.join(map(repr, args.only))} "
                             f"({len(everything)} runs found, sources: {', '.join(sources)})")
        raise FileNotFoundError(f"{args.groundtruth}: no runs found (expected {LAYOUTS})")
    why = {id(r): w for r in runs if (w := why_unpredictable(r, args.gpu, args.workload, args.gpu_model)) is not None}
    skipped = unloadable + [(r.name, r.source, why[id(r)]) for r in runs if id(r) in why]
    for name, _, reason in skipped:  # said even under --quiet: the score no longer covers every run found
        print(f"warning: {name}: not predicted: {reason}", file=sys.stderr)
    runs = [r for r in runs if id(r) not in why]
    # what the folder holds besides runs (DistServe's own system, static batches): listed, not scored
    others = [(name, source, why) for name, source, why in measurements_not_runs(root)
              if matches(name, source, args.only)]
    for why in dict.fromkeys(why for _, _, why in others):
        names = [name for name, _, w in others if w == why]
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        print(f"warning: {names[0]}{more}: not predicted: {why}", file=sys.stderr)
    if not runs:
        raise ConfigError(f"{args.groundtruth}: no run can be predicted ({len(skipped)} found; "
                          f"{skipped[0][0]}: {skipped[0][2]})")
    excluded: list[str] = []
    fit, fitted_on = args.fit, []
    if args.overhead:
        fit, fitted_on = load_overhead_layer(args.overhead)
        excluded = [r.name for r in runs if r.name in fitted_on]
        runs = [r for r in runs if r.name not in fitted_on]
        if not runs:
            raise ConfigError("--overhead: every run found was used to fit it; nothing is left to score")
    rep = reproduce(runs, fit=fit, workload=args.workload, gpu=args.gpu, gpu_model=args.gpu_model,
                    progress=options.progress(args), fitted_on=fitted_on)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    med = rep.medians()
    rep.table.to_csv(out / "report.csv", index=False)
    settings = pd.DataFrame([row for r in runs for row in settings_table(r)],
                            columns=["run", "setting", "value", "status", "note", "recorded_in"])
    settings.to_csv(out / "settings.csv", index=False)
    assumed = [line for line in map(version_assumption, runs) if line]  # also in report.md
    for r in runs:  # a recorded engine setting is never silently ignored, nor an unrecorded release
        if version_assumption(r):
            options.note(args, version_assumption(r))
        if not_modelled(r):
            options.note(args, f"{r.name}: not modelled: {', '.join(not_modelled(r))} (settings.csv)")
    med.to_csv(out / "medians.csv", index_label="source")
    write_json(out / "fits.json", {"per_run": rep.fits, "per_source": rep.group_fits})
    title = f"servesim reproduce {args.groundtruth} (fit: {'given layer' if args.overhead else args.fit})"
    unpredicted = pd.DataFrame(skipped + others,
                               columns=["run", "source", "reason"])
    unpredicted.to_csv(out / "not_predicted.csv", index=False)
    # runs scored benchmark by benchmark or stage by stage: benchmarks.csv / .png and report.md's section
    bench_lines, bench_section = write_benchmarks(list(rep.predictions.values()), out / "benchmarks.csv")
    report = markdown_report(rep.table, med, excluded, title, settings, unpredicted, assumed)
    (out / "report.md").write_text(report + ("\n" + bench_section if bench_section else ""))
    plot_errors(rep.table, out / "errors.png")
    workload_lines = write_run_tables(rep, runs, out) + bench_lines  # ttft_parts.csv, workload.csv
    if workload_lines and not options.quiet(args):
        print("\n".join(workload_lines), file=sys.stderr)
    if args.json:
        options.print_json({source: row.to_dict() for source, row in med.iterrows()})
    else:
        options.say(args, med.to_string(float_format=lambda v: percent(v) if v < 10 else number(v, trim=True)))
    if not options.quiet(args):
        names = ["report.md", "report.csv", "medians.csv", "fits.json", "settings.csv", "errors.png", "ttft_parts.csv",
                 "ttft_parts.png", "workload.csv", "served.csv", "benchmarks.csv", "benchmarks.png", "not_predicted.csv"]
        print(f"wrote {out}/{', '.join(n for n in names if (out / n).is_file())}", file=sys.stderr)
    return 0

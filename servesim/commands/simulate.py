"""`servesim simulate CONFIG.toml [--set section.key=value ...] [--out DIR] [--plot] [--json] [--quiet]`.

Loads the config (or rebuilds one from a real run with `--from-run RUN_DIR`), simulates it with a
progress bar, prints the summary table and, with `--out`, writes summary.json, requests.csv,
steps.csv (+ Parquet copies with pyarrow) and the resolved config.toml to DIR (with `--from-run`
also settings.csv: every engine setting the run records, modelled or not; the ones not modelled
print as notes); `--plot` adds timeline.png. A workload that runs benchmarks one after another
(guidellm's) also prints each as its client reports it, and writes benchmarks.csv (`--plot`:
benchmarks.png, its curve). The run streams (`records.stream`): tables are written as it goes and
finished requests leave memory, so a run's memory is what is live, at any size. Each setting that changed
another (`sim.notes`) prints one `note:` line on stderr and is kept in config.toml. Bad input
raises ValueError/ConfigError, which the `servesim` dispatcher prints as one line with exit code 2.
"""
from __future__ import annotations

import argparse
import csv

from fidelity.engine_settings import INFERRED, NOT_MODELLED, settings_table
from policies import ConfigError
from records.display import format_benchmarks
from records.metrics import format_summary
from records.sketch import DEFAULT_RELATIVE_ACCURACY
from servesim.commands import options, small
from sim.notes import empty_notes, setting_notes, with_notes
from sim.runner import simulate
from sim.workload import build_workload


def configure(parser: argparse.ArgumentParser) -> None:
    options.add_config(parser, optional=True)
    options.add_set(parser)
    options.add_out(parser, "summary.json, requests.csv, steps.csv, config.toml")
    parser.add_argument("--from-run", metavar="RUN_DIR",
                        help="rebuild the config of a recorded real run (instead of CONFIG)")
    options.add_json(parser)
    options.add_quiet(parser)
    parser.add_argument("--plot", action="store_true", help="with --out: also draw timeline.png (needs matplotlib)")
    parser.add_argument("--no-plot", action="store_true", help=argparse.SUPPRESS)  # the default now


def load(args: argparse.Namespace):
    """The Config the arguments name (shortened under SERVESIM_SMALL)."""
    if args.from_run and args.config:
        raise ConfigError("--from-run: give either CONFIG or --from-run RUN_DIR, not both")
    if args.from_run:
        try:  # the run-folder readers: their tables import pandas, which a plain run never loads (start-up)
            from fidelity.from_run import config_from_run
        except ImportError as exc:
            raise ConfigError(f"--from-run: not available in this installation ({exc})") from None
        config = config_from_run(args.from_run, args.overrides)
        extra, notes = small.caps(config)
        if extra:
            args.overrides = [*args.overrides, *extra]
            config = config_from_run(args.from_run, args.overrides)
        return with_notes(config, notes)
    if not args.config:
        raise ConfigError("config: give a TOML file (e.g. examples/default.toml) or --from-run RUN_DIR")
    return options.load_config_args(args)


def recorded_settings(args: argparse.Namespace) -> list[dict]:
    """The run's recorded engine settings (`fidelity.engine_settings`); each one servesim does not
    model, or that was inferred rather than recorded, is said as a note."""
    from fidelity.client_workload import version_assumption  # pandas on demand, as in `load`
    from fidelity.from_run import load_run

    run = load_run(args.from_run)
    rows = settings_table(run)
    if version_assumption(run):  # what is assumed for the releases the run does not record: one line
        options.note(args, f"--from-run: {version_assumption(run)}")
    for r in rows:
        if r["status"] in (NOT_MODELLED, INFERRED):
            options.note(args, f"--from-run: {r['setting']}={r['value']} {r['status']}: {r['note']}")
    return rows


def write_rows(path, rows: list[dict]) -> None:
    """`rows` (dicts with the same keys) as a CSV table, the first row's keys as its header."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def run(args: argparse.Namespace) -> int:
    config = load(args)
    settings = recorded_settings(args) if args.from_run else []
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    config = with_notes(config, setting_notes(config, workload))
    options.note(args, *config.notes)
    plot = args.plot and not args.no_plot
    result = simulate(config, progress=options.progress(args), workload=workload, out=args.out, stream=True,
                      plot=plot)
    out = result.out_dir
    if out is not None and settings:
        write_rows(out / "settings.csv", settings)
    # what the run did to its workload (`sim.runner.with_run_notes`: in config.toml already)
    empty = empty_notes(result.config, workload, result.summary["num_requests"])
    options.note(args, *[n for n in result.config.notes if n not in config.notes and n not in empty])
    if empty:  # nothing was measured: an error, not a summary of dashes
        raise ConfigError(empty[0])
    if result.sketched_metrics:
        options.note(args, f"percentiles of {', '.join(result.sketched_metrics)} are within "
                     f"{DEFAULT_RELATIVE_ACCURACY:.1%} (more values than kept exactly)")
    # a client that runs benchmarks one after another (guidellm's sweep): each as that client reports it
    benchmarks = workload.benchmark_rows() if hasattr(workload, "benchmark_rows") else []
    if benchmarks and out is not None:
        write_rows(out / "benchmarks.csv", benchmarks)
        if plot:  # the curve: latency against the rate each benchmark achieved
            from fidelity.benchmarks import plot_simulated  # pandas and the run readers: a plot's only

            plot_simulated(benchmarks, out / "benchmarks.png", title=str(args.config or args.from_run))
    try:
        if args.json:
            options.print_json({**result.summary, "benchmarks": benchmarks} if benchmarks else result.summary)
        else:
            options.say(args, format_summary(result.summary))
            if benchmarks:
                options.say(args, "", format_benchmarks(benchmarks))
            if out is not None:
                options.say(args, f"\nwrote {out}/: {options.written(out)}")
    except BrokenPipeError:  # `| head`: the reader left; not an error
        pass
    options.flush_stdout()
    return 0

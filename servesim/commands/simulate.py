"""`servesim simulate CONFIG.toml [--set section.key=value ...] [--out DIR] [--plot] [--quiet]`.

Loads the config (or rebuilds one from a real run with `--from-run RUN_DIR`), simulates it with a
progress bar, prints the summary table and, with `--out`, writes summary.json, requests.csv,
steps.csv (+ Parquet copies with pyarrow) and the resolved config.toml to DIR; `--plot` adds
timeline.png. The run streams (`records.stream`): tables are written as it goes and finished
requests leave memory, so a run's memory is what is live, at any size. Bad input raises
ValueError/ConfigError, which the `servesim` dispatcher prints as one line with exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from policies import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="a TOML config (see examples/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (repeatable), e.g. --set scheduler.policy=continuous")
    parser.add_argument("--out", metavar="DIR", help="write summary.json, requests.csv, steps.csv, config.toml here")
    parser.add_argument("--from-run", metavar="RUN_DIR",
                        help="rebuild the config of a recorded real run (instead of CONFIG)")
    parser.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    parser.add_argument("--plot", action="store_true", help="with --out: also draw timeline.png (needs matplotlib)")
    parser.add_argument("--no-plot", action="store_true", help=argparse.SUPPRESS)  # the default now


def load(args: argparse.Namespace):
    """The Config the arguments name."""
    from sim.config import load_config

    if args.from_run and args.config:
        raise ConfigError("--from-run: give either CONFIG or --from-run RUN_DIR, not both")
    if args.from_run:
        try:
            from fidelity.from_run import config_from_run
        except ImportError as exc:
            raise ConfigError(f"--from-run: not available in this installation ({exc})") from None
        return config_from_run(args.from_run, args.overrides)
    if not args.config:
        raise ConfigError("config: give a TOML file (e.g. examples/default.toml) or --from-run RUN_DIR")
    return load_config(args.config, args.overrides)


def run(args: argparse.Namespace) -> int:
    from records.metrics import format_summary
    from sim.runner import simulate

    config = load(args)
    result = simulate(config, progress=not args.quiet, out=args.out, stream=True,
                      plot=args.plot and not args.no_plot)
    out = result.out_dir
    if result.sketched_metrics and not args.quiet:
        from records.sketch import DEFAULT_RELATIVE_ACCURACY

        print(f"note: percentiles of {', '.join(result.sketched_metrics)} are within "
              f"{DEFAULT_RELATIVE_ACCURACY:.1%} (more values than kept exactly)", file=sys.stderr)
    try:
        if args.json:
            from records.results import json_safe

            print(json.dumps(json_safe(result.summary), indent=2))
        elif not args.quiet:
            print(format_summary(result.summary))
            if out is not None:
                names = ["summary.json", "requests.csv", "steps.csv", "config.toml", "requests.parquet",
                         "steps.parquet"] + (["timeline.png"] if args.plot else [])
                print(f"\nwrote {out}/: {', '.join(n for n in names if (out / n).is_file())}")
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader left; not an error
        sys.stdout = open("/dev/null", "w")  # noqa: SIM115 (keeps the interpreter's final flush quiet)
    return 0

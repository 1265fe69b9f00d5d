"""Arguments the three capacity commands share: config, --set, SLO targets, executor, output flags.

The flags every command has (`--set`, `--quiet`, `--no-progress`, `--json`) come from
`servesim.commands.options`; `--set` applies to every point, and `--json` prints the table's
rows as a JSON list.
"""
from __future__ import annotations

import argparse

from policies.config import check_number
from records.display import number
from servesim.commands import options
from sim.capacity.executor import EXECUTORS, make_executor
from sim.capacity.slo import SLO
from sim.config import load_config
from sim.notes import setting_notes
from sim.workload import build_workload


def add_common(parser: argparse.ArgumentParser) -> None:
    options.add_config(parser, help="base configuration (TOML)")
    options.add_set(parser)  # every point gets the overrides
    slo = parser.add_argument_group("SLO (seconds; defaults: the config's [slo] section; a target left out "
                                    "there and here is no target, so inf is refused)")
    slo.add_argument("--slo-ttft", type=float, help="time-to-first-token target (s)")
    slo.add_argument("--slo-tpot", type=float, help="time-per-output-token target (s)")
    slo.add_argument("--slo-e2e", type=float, help="end-to-end latency target (s)")
    slo.add_argument("--slo-attainment", type=float, default=0.9,
                     help="fraction of requests that must meet every target (default 0.9, the usual goodput bar)")
    ex = parser.add_argument_group("execution")
    ex.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="local processes (default), serial, or ray (the optional ray extra)")
    ex.add_argument("--workers", type=int, help="parallel points (default: CPU count)")
    ex.add_argument("--address", help="Ray cluster address (ray://host:10001 or auto); default: a local Ray")
    options.add_json(parser, "the table's rows")
    options.add_quiet(parser)


def load_base(args):
    """The base config (SERVESIM_SMALL's caps joining `args.overrides`, so every point gets them); its
    notes printed."""
    base = options.load_config_args(args)
    options.note(args, *base.notes, *setting_notes(base, build_workload(base.workload, base.scheduler.max_model_len)))
    return base


def slo_from_args(args, base=None) -> SLO:
    """The SLO of the --slo-* flags over the config's [slo] section (`base`: the config, if loaded already)."""
    for flag, value in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot), ("--slo-e2e", args.slo_e2e)):
        if value is not None:  # named as typed (SLO would say slo.ttft_s)
            check_number(flag, value, 0.0, strict_min=True, hint="leave the flag out for no target")
    if base is None:
        base = load_config(args.config, args.overrides)
    return SLO.from_config(base, ttft_s=args.slo_ttft, tpot_s=args.slo_tpot, e2e_s=args.slo_e2e,
                           min_attainment=args.slo_attainment)


def executor_from_args(args):
    return make_executor(args.executor, args.workers, args.address)


def fmt_table(df, columns) -> str:
    cols = [c for c in columns if c in df]
    return df[cols].to_string(index=False, float_format=number)


def show_table(args, df, columns) -> None:
    """The table's `columns` (those it has): printed for people, or every column as JSON with --json."""
    if args.json:
        options.print_json(df.to_dict(orient="records"))
    options.say(args, fmt_table(df, columns))

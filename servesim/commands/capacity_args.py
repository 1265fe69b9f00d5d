"""Arguments the three capacity commands share: config, --set, SLO targets, executor."""
from __future__ import annotations

import argparse

from sim.capacity.executor import EXECUTORS, make_executor
from sim.capacity.slo import SLO


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="base configuration (TOML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key for every point (repeatable), e.g. workload.num_requests=500")
    slo = parser.add_argument_group("SLO (seconds; defaults: the config's [slo] section)")
    slo.add_argument("--slo-ttft", type=float, help="time-to-first-token target (s)")
    slo.add_argument("--slo-tpot", type=float, help="time-per-output-token target (s)")
    slo.add_argument("--slo-e2e", type=float, help="end-to-end latency target (s)")
    slo.add_argument("--slo-attainment", type=float, default=0.9,
                     help="fraction of requests that must meet every target (default 0.9, DistServe)")
    ex = parser.add_argument_group("execution")
    ex.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="local processes (default), serial, or ray (the optional ray extra)")
    ex.add_argument("--workers", type=int, help="parallel points (default: CPU count)")
    ex.add_argument("--address", help="Ray cluster address (ray://host:10001 or auto); default: a local Ray")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def slo_from_args(args, base=None) -> SLO:
    """The SLO of the --slo-* flags over the config's [slo] section (`base`: the config, if loaded already)."""
    if base is None:
        from sim.config import load_config

        base = load_config(args.config, args.overrides)
    return SLO.from_config(base, ttft_s=args.slo_ttft, tpot_s=args.slo_tpot, e2e_s=args.slo_e2e,
                           min_attainment=args.slo_attainment)


def executor_from_args(args):
    return make_executor(args.executor, args.workers, args.address)


def fmt_table(df, columns) -> str:
    cols = [c for c in columns if c in df]
    return df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")

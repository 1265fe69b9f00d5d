"""`servesim sweep CONFIG.toml --grid KEY=V1,V2,... [--list KEY=V1,V2,...] [--out DIR]`.

Simulates every point (grid keys crossed; list keys zipped, then crossed with the grid), writes
one table (`sweep.csv`, and `sweep.parquet` with pyarrow) holding each point's swept values and
overrides beside its metrics, the base config, and `sweep.png` (latency percentiles and SLO
attainment against the first swept key, or `--x`).
A sweep of `workload.rate` offers every rate the same requests (common random numbers, as `servesim
capacity` does: `sim.capacity.sweep.rate_streams`), so its curves move with the load, not with a
fresh sample; one line (and the `common_across_rates` column) says what the rates share;
`--fresh-draws` draws each point's workload as `simulate` does.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from policies import ConfigError
from servesim.commands import options
from servesim.commands.capacity_args import add_common, executor_from_args, load_base, show_table, slo_from_args
from sim.capacity.plots import plot_sweep
from sim.capacity.search import DEFAULT_RATE_KEY, held_common
from sim.capacity.sweep import (combine, expand_grid, expand_list, hold_window, parse_assignments, run_sweep,
                                write_table)

SHOWN = ("point", "num_gpus", "num_finished", "num_rejected", "throughput_output_tokens_per_s",
         "ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "tpot_s_p99", "slo_attainment", "goodput_rps")


def configure(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="sweep KEY over the values, crossed with every other --grid key (repeatable)")
    parser.add_argument("--list", dest="lists", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="sweep KEY's i-th value together with the other --list keys' i-th values")
    parser.add_argument("--fixed-count", action="store_true",
                        help="keep workload.num_requests when sweeping workload.rate (default: scale it with the "
                             "rate so every point spans the same arrival window)")
    parser.add_argument("--fresh-draws", action="store_true",
                        help="draw each point's workload as simulate does, one generator for arrivals and lengths "
                             "(default, when the sweep sets workload.rate: common random numbers: request i has "
                             "the same lengths at every rate and its arrival time scales as 1/rate)")
    parser.add_argument("--x", help="the plots' x axis: one of the swept keys, with numeric values (default: the "
                        "first swept key)")
    options.add_out(parser, "sweep.csv, base_config.toml and sweep.png", default="runs/sweep")
    parser.add_argument("--no-plot", action="store_true", help="skip sweep.png")


def run(args) -> int:
    grid = parse_assignments(args.grid, "--grid")
    lists = parse_assignments(args.lists, "--list", taken=dict.fromkeys(grid, "--grid"))
    if not grid and not lists:
        raise ValueError("--grid: give at least one --grid or --list KEY=V1,V2,...")
    keys = list(grid) + list(lists)
    if args.x is not None and args.x not in keys:  # said before the sweep runs, not after it (no plot)
        raise ConfigError(f"--x: {args.x!r} is not swept; choose one of {', '.join(keys)}")
    base = load_base(args)
    points = combine(expand_grid(grid), expand_list(lists))
    if not args.fixed_count:
        points = hold_window(args.config, points, args.overrides)
    slo = slo_from_args(args, base)
    if DEFAULT_RATE_KEY in keys:  # said before the points run, as capacity says it
        held = not args.fixed_count and "workload.num_requests" not in keys
        shared = held_common(base.workload, held, not args.fresh_draws,
                             count_swept="workload.num_requests" in keys)
        options.say(args, f"common across rates: {shared}")
    df = run_sweep(args.config, points, slo, executor_from_args(args), args.overrides,
                   progress=options.progress(args), common_random_numbers=not args.fresh_draws)
    if DEFAULT_RATE_KEY in keys:
        df["common_across_rates"] = shared
    shown = list(keys)
    if any("workload.num_requests" in p for p in points) and "workload.num_requests" not in keys:
        shown.append("workload.num_requests")  # set by the held window: shown, not a plot grouping
    out = Path(args.out)
    paths = write_table(df, out)
    shutil.copyfile(args.config, out / "base_config.toml")
    show_table(args, df, ["point", *shown, *SHOWN[1:]])
    x = args.x or keys[0]
    if not args.no_plot and x in df and df[x].dtype.kind in "if":
        png = plot_sweep(df, x, keys, out / "sweep.png", title=f"{Path(args.config).name}: sweep over {x}")
        if png:
            paths.append(png)
    elif not args.no_plot:  # e.g. a GPU name: no axis to plot along
        print(f"warning: sweep.png not written: {x}'s values are not numbers; plot along a numeric key with --x "
              "(or give --no-plot)", file=sys.stderr)
    options.say(args, "wrote " + ", ".join(str(p) for p in paths))
    return 0

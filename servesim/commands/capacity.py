"""`servesim capacity CONFIG.toml --slo-ttft S --slo-tpot S [--layout colocated --layout disaggregated]`.

Finds the highest request rate the configuration sustains with >= 90% of requests meeting every
SLO target (DistServe goodput), by bracketing and bisection to a relative tolerance `--tol`.
With several `--layout`s it compares layouts of the same GPU count in one command:
`as-is` (the config), `colocated` (the same number of GPUs as colocated replicas of the top-level
`hardware.tp`), `disaggregated` (the config's `[disaggregation]` pools, enabled).
Every rate sees the same requests (common random numbers, `sim.capacity.search`): request i's
lengths and unit-rate arrival draw do not change with the rate; `--fresh-draws` draws each rate's
workload as `simulate` does. One line says what the rates share (`common_across_rates` in the table).
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from policies import ConfigError
from policies.config import check_number
from records.display import number
from servesim.commands import options
from servesim.commands.capacity_args import add_common, executor_from_args, load_base, show_table, slo_from_args
from sim.capacity.plots import plot_search
from sim.capacity.search import DEFAULT_RATE_KEY, find_max_rate
from sim.cluster.layout import num_gpus

LAYOUT_CHOICES = ("as-is", "colocated", "disaggregated")


def layout_overrides(config, layout: str, gpus: int) -> list[str]:
    """Overrides turning `config` into `layout` on `gpus` GPUs (colocated: gpus / hardware.tp replicas)."""
    if layout == "as-is":
        return []
    if layout == "disaggregated":  # the pools are its replicas (`sim.cluster.layout.check_disaggregated`)
        return ["disaggregation.enabled=true", "cluster.replicas=[]", "cluster.num_replicas=1", "autoscaling.enabled=false"]
    tp = config.hardware.tp
    if gpus % tp:
        raise ConfigError(f"hardware.tp: {gpus} GPUs do not split into replicas of tp={tp}")
    return ["disaggregation.enabled=false", "cluster.replicas=[]", f"cluster.num_replicas={gpus // tp}"]


def reference_gpus(config, layouts: list[str]) -> int:
    """The GPU count every layout gets: the disaggregated pools' when they are compared, else the config's."""
    if "disaggregated" in layouts:
        config = dataclasses.replace(config, disaggregation=dataclasses.replace(config.disaggregation, enabled=True))
    return num_gpus(config)


def configure(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--rate-key", default=DEFAULT_RATE_KEY, help=f"the rate key (default {DEFAULT_RATE_KEY})")
    parser.add_argument("--start-rate", type=float, help="first rate tried (default: the config's)")
    parser.add_argument("--tol", type=float, default=0.05,
                        help="stop when upper/lower - 1 <= TOL (default 0.05: the answer is within 5%%)")
    parser.add_argument("--layout", action="append", choices=LAYOUT_CHOICES,
                        help="compare layouts of the same GPU count (repeatable; default: as-is)")
    parser.add_argument("--fixed-count", action="store_true",
                        help="keep workload.num_requests at every rate (default: scale it with the rate so "
                             "every probe spans the same arrival window)")
    parser.add_argument("--fresh-draws", action="store_true",
                        help="draw each rate's workload as simulate does, one generator for arrivals and lengths "
                             "(default: common random numbers: request i has the same lengths at every rate and "
                             "its arrival time scales as 1/rate)")
    options.add_out(parser, "search.csv (every rate tried) and search.png")


def run(args) -> int:
    base = load_base(args)
    slo = slo_from_args(args, base)
    layouts = args.layout or ["as-is"]
    start = args.start_rate
    check_number("--tol", args.tol, 0.0, strict_min=True)  # under the flags' names, not the search's arguments
    if start is not None:
        check_number("--start-rate", start, 0.0, strict_min=True)
    if start is None:
        section, _, key = args.rate_key.partition(".")
        start = float(getattr(getattr(base, section, None), key, None) or 1.0)
    executor = executor_from_args(args)
    options.say(args, f"SLO: ttft<={slo.ttft_s} tpot<={slo.tpot_s} e2e<={slo.e2e_s} s for >= "
                f"{slo.min_attainment:.0%} of requests; tolerance {args.tol:.1%}")
    gpus = reference_gpus(base, layouts)
    if "disaggregated" in layouts and "as-is" not in layouts and gpus != num_gpus(base):
        d = base.disaggregation
        options.note(args, f"capacity: every layout gets {gpus} GPUs, the disaggregation pools' ({d.prefill.count} "
                     f"prefill + {d.decode.count} decode), not the config's {num_gpus(base)}")
    tables = []
    for layout in layouts:
        overrides = list(args.overrides) + layout_overrides(base, layout, gpus)
        res = find_max_rate(args.config, slo, args.rate_key, start, args.tol, executor, overrides,
                            progress=options.progress(args), hold_window=not args.fixed_count,
                            common_random_numbers=not args.fresh_draws)
        if layout == layouts[0]:  # the same for every layout: said once
            options.say(args, f"common across rates: {res.common}")
        options.say(args, f"{layout:>13}: {number(res.rate)} req/s sustained ({number(res.rate_per_gpu)} per GPU, "
                    f"{res.num_gpus} GPUs); {number(res.upper)} req/s is not")
        table = res.table()
        table.insert(0, "layout", layout)
        table["common_across_rates"] = res.common
        tables.append(table)
    import pandas as pd

    table = pd.concat(tables, ignore_index=True)
    show_table(args, table, ["layout", "rate", "num_gpus", "slo_attainment", "ttft_s_p90", "tpot_s_p90",
                             "goodput_rps"])
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "search.csv", index=False)
        png = plot_search(table, slo.min_attainment, out / "search.png", per_gpu=len(layouts) > 1)
        options.say(args, f"wrote {out / 'search.csv'}" + (f", {png}" if png else ""))
    return 0

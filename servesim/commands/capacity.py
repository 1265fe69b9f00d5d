"""`servesim capacity CONFIG.toml --slo-ttft S --slo-tpot S [--layout colocated --layout disaggregated]`.

Finds the highest request rate the configuration sustains with >= 90% of requests meeting every
SLO target (DistServe goodput), by bracketing and bisection to a relative tolerance `--tol`.
With several `--layout`s it compares layouts of the same GPU count in one command:
`as-is` (the config), `colocated` (the same number of GPUs as colocated replicas of the top-level
`hardware.tp`), `disaggregated` (the config's `[disaggregation]` pools, enabled).
Every rate sees the same requests (common random numbers, `sim.capacity.search`): request i's
lengths and unit-rate arrival draw do not change with the rate; `--fresh-draws` draws each rate's
workload as `simulate` does. One line says what the rates share (`common_across_rates` in the table).
An answer is for one workload draw (`workload.seed`), and another seed moves it by more than
`--tol`; `--seeds N` repeats the search over N seeds (`sim.capacity.spread`) and reports the
answer as the median and range of theirs (`seed` and `max_sustained_rate` in the table; one row
per layout and seed in answers.csv).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from policies import ConfigError
from policies.config import check_int, check_number
from records.display import number
from servesim.commands import options
from servesim.commands.capacity_args import add_common, executor_from_args, load_base, show_table, slo_from_args
from sim.capacity.plots import plot_search
from sim.capacity.search import DEFAULT_RATE_KEY
from sim.capacity.spread import SeedSpread, consecutive_seeds, search_seeds
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
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="repeat the search over N workload seeds (the config's workload.seed and the N-1 "
                             "after it) and report the answer's median and range (default 1: one workload draw)")
    options.add_out(parser, "search.csv (every rate tried), answers.csv (each layout's and seed's answer) "
                    "and search.png")


def spread_line(layout: str, spread: SeedSpread) -> str:
    """One layout's answer over several seeds: the median, the range, each seed's."""
    lo, hi = spread.relative_range()
    gpus = spread.num_gpus
    return (f"{layout:>13}: {number(spread.median)} req/s sustained, the median of {len(spread.seeds)} workload seeds "
            f"({number(spread.median / gpus if gpus else 0.0)} per GPU, {gpus} GPUs); range {number(spread.low)} - "
            f"{number(spread.high)} req/s ({lo:+.0%} / {hi:+.0%}); per seed "
            + ", ".join(f"{s}: {number(r)}" for s, r in zip(spread.seeds, spread.rates)))


def run(args) -> int:
    base = load_base(args)
    slo = slo_from_args(args, base)
    layouts = args.layout or ["as-is"]
    start = args.start_rate
    check_number("--tol", args.tol, 0.0, strict_min=True)  # under the flags' names, not the search's arguments
    check_int("--seeds", args.seeds, 1)
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
    seeds = consecutive_seeds(base.workload.seed, args.seeds)
    tables, answers = [], []
    for layout in layouts:
        overrides = list(args.overrides) + layout_overrides(base, layout, gpus)

        def done(seed, res, layout=layout):  # progress: one line a seed's search
            if len(seeds) > 1 and options.progress(args):
                print(f"{layout}: workload.seed = {seed} ({seeds.index(seed) + 1} of {len(seeds)}): "
                      f"{number(res.rate)} req/s sustained", file=sys.stderr)

        spread = search_seeds(args.config, slo, seeds, base_overrides=overrides, on_result=done,
                              rate_key=args.rate_key, start_rate=start, rel_tol=args.tol, executor=executor,
                              progress=options.progress(args), hold_window=not args.fixed_count,
                              common_random_numbers=not args.fresh_draws)
        res = spread.results[0]
        if layout == layouts[0]:  # the same for every layout: said once
            options.say(args, f"common across rates: {res.common}")
        if len(seeds) == 1:
            options.say(args, f"{layout:>13}: {number(res.rate)} req/s sustained ({number(res.rate_per_gpu)} per "
                        f"GPU, {res.num_gpus} GPUs); {number(res.upper)} req/s is not")
        else:
            options.say(args, spread_line(layout, spread))
        for seed, one in zip(seeds, spread.results):
            table = one.table()
            table.insert(0, "layout", layout)
            table.insert(1, "seed", seed)
            table["max_sustained_rate"] = one.rate
            table["common_across_rates"] = one.common
            tables.append(table)
            answers.append({"layout": layout, "seed": seed, "rate": one.rate, "upper": one.upper,
                            "rate_per_gpu": one.rate_per_gpu, "num_gpus": one.num_gpus})
    if len(seeds) == 1:  # the tolerance is the bracket's, not the sample's: said where the answer is
        options.say(args, f"the answer is for one workload draw (workload.seed = {seeds[0]}) and --tol is not its "
                    "spread over draws: --seeds N gives the median and range over N seeds")
    import pandas as pd

    table = pd.concat(tables, ignore_index=True)
    shown_seed = ["seed"] if len(seeds) > 1 else []
    show_table(args, table, ["layout", *shown_seed, "rate", "num_gpus", "slo_attainment", "ttft_s_p90", "tpot_s_p90",
                             "goodput_rps"])
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "search.csv", index=False)
        pd.DataFrame(answers).to_csv(out / "answers.csv", index=False)
        png = plot_search(table, slo.min_attainment, out / "search.png", per_gpu=len(layouts) > 1)
        options.say(args, f"wrote {out / 'search.csv'}, answers.csv" + (f", {png}" if png else ""))
    return 0

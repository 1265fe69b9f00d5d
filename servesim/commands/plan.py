"""`servesim plan CONFIG.toml --target-rate R --slo-ttft S --slo-tpot S [--gpus ...] [--price GPU=USD]`.

Simulates every candidate layout (GPU type x TP x replicas, colocated or disaggregated, chunk
budget) at the target rate and prints the fitting layout with the fewest GPUs, the cheapest per
hour, the cheapest per million output tokens and the one using the least energy per output token.
Prices default to the GPU catalog's rough on-demand figures.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from policies import ConfigError
from policies.config import check_number
from records.display import number
from servesim.commands import options
from servesim.commands.capacity_args import add_common, executor_from_args, load_base, show_table, slo_from_args
from sim.capacity.planner import LAYOUTS, CandidateGrid, plan
from sim.capacity.plots import plot_plan


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def configure(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--target-rate", type=float, required=True, help="requests per second to serve")
    parser.add_argument("--gpus", default="H100-SXM", help="GPU types to try, comma-separated")
    parser.add_argument("--tp", default="1,2", help="tensor-parallel degrees to try")
    parser.add_argument("--replicas", default="1,2,4", help="colocated replica counts to try")
    parser.add_argument("--pool-counts", default="1,2,3", help="disaggregated pool sizes to try (each pool)")
    parser.add_argument("--budgets", default="", help="scheduler.max_num_batched_tokens values to try "
                        "(default: the config's)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="colocated,disaggregated")
    parser.add_argument("--max-gpus", type=int, default=8, help="largest layout to consider")
    parser.add_argument("--price", action="append", default=[], metavar="GPU=USD",
                        help="USD per GPU-hour, >= 0, of one of the --gpus (repeatable; default: the catalog's)")
    options.add_out(parser, "plan.csv (every candidate) and plan.png")


def parse_prices(items: list[str]) -> dict[str, float]:
    """`--price GPU=USD` flags as {GPU: USD}; the planner checks the GPUs and the values
    (`sim.capacity.planner.check_prices`)."""
    prices = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            usd = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise ConfigError(f"--price: expected GPU=USD_PER_HOUR, got {item!r}")
        if name in prices:  # the later one would silently win
            raise ConfigError(f"--price: {name} is given twice; give each GPU one price")
        prices[name] = usd
    return prices


def shape(row: dict) -> str:
    """'2 x H100-SXM tp1' or 'P 1x tp2 + D 2x tp1 on H100-SXM'."""
    if row.get("layout") == "colocated":
        return f"{row['replicas']} x {row['gpu']} tp{row['tp']}"
    return f"P {row['prefill']} + D {row['decode']} on {row['gpu']}"


def run(args) -> int:
    check_number("--target-rate", args.target_rate, 0.0, strict_min=True)  # before any work, named as typed
    try:
        grid = CandidateGrid(gpus=tuple(g.strip() for g in args.gpus.split(",") if g.strip()),
                             tps=_ints(args.tp), replicas=_ints(args.replicas),
                             budgets=_ints(args.budgets) or (None,),
                             layouts=tuple(v.strip() for v in args.layouts.split(",") if v.strip()),
                             pool_counts=_ints(args.pool_counts), max_gpus=args.max_gpus)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"plan: --tp, --replicas, --pool-counts and --budgets take integers ({exc})") from None
    base = load_base(args)
    slo = slo_from_args(args, base)
    result = plan(args.config, args.target_rate, slo, grid, parse_prices(args.price), executor_from_args(args),
                  args.overrides, progress=options.progress(args))
    for row in result.rows:
        row["shape"] = shape(row)
    table = result.table()
    cols = ["layout", "shape", "budget", "num_gpus", "cost_per_hour", "cost_per_million_output_tokens",
            "energy_j_per_output_token", "slo_attainment", "fits", "ttft_s_p90", "tpot_s_p90", "error"]
    if "budget" in table and table["budget"].isna().all():
        cols.remove("budget")
    if "error" in table and table["error"].isna().all():
        cols.remove("error")
    show_table(args, table.sort_values(["num_gpus", "point"]) if "num_gpus" in table else table, cols)
    if result.by_gpus is None:
        options.say(args, f"no candidate serves {args.target_rate} req/s within the SLO; widen --gpus/--tp/--max-gpus")
    else:
        for what, row in (("fewest GPUs", result.by_gpus), ("cheapest", result.by_cost),
                          ("$/1M tokens", result.by_token_cost), ("least energy", result.by_energy)):
            per_m, joules = row.get("cost_per_million_output_tokens"), row.get("energy_j_per_output_token")
            options.say(args, f"{what:>12}: {row['layout']} {row['shape']}: {row['num_gpus']} GPUs, "
                        f"${row['cost_per_hour']:.2f}/h"
                        + (f", ${number(per_m)} per 1M output tokens" if per_m is not None else "")
                        + (f", {number(joules)} J per output token" if joules is not None else "")
                        + f", {row['slo_attainment']:.1%} within SLO")
    # a candidate near its limit can fit one draw of the workload and miss the next
    options.say(args, f"each candidate is judged on one workload draw (workload.seed = {base.workload.seed}); "
                "`servesim capacity --seeds N` shows how far another seed moves a layout's sustainable rate")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "plan.csv", index=False)
        png = plot_plan(table, out / "plan.png", slo.min_attainment, result.by_cost)
        options.say(args, f"wrote {out / 'plan.csv'}" + (f", {png}" if png else ""))
    return 0 if result.by_gpus is not None else 1

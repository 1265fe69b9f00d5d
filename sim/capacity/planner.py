"""The planner: the cheapest layout that serves a target rate within an SLO.

Candidates are layouts built from a base config: colocated (`replicas` copies of `gpu` x `tp`,
with a chunk budget) and disaggregated (a prefill pool and a decode pool, each `count` x `tp` of
one GPU type). Each is simulated at the target rate; a layout *fits* when it sustains it as the
SLO search means it (`sim.capacity.sweep.sustains`: `slo.min_attainment` of its requests meet the
SLO and its queue does not grow through the run). The plan reports the fitting layout with the
fewest GPUs (ties: cheaper), the one with the lowest cost per hour (ties: fewer GPUs), and the ones
with the lowest cost per million output tokens and the lowest energy per output token (`sim.cost`).
Prices are USD per GPU-hour by GPU name (defaults: the GPU catalog's rough prices). Each candidate
sees the base workload's arrival window (n0 requests at rate r0 -> n0 * target / r0 requests).
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Sequence

from policies import ConfigError
from policies.config import check_choice, check_int, check_number
from sim.capacity.executor import LocalExecutor
from sim.capacity.slo import SLO
from sim.capacity.sweep import (DEFAULT_SIMULATE, PointSpec, check_paced, evaluate_point, format_override,
                                 hold_window_of, load_point_config, sustains)
from sim.cluster.layout import cost_per_hour
from sim.config import load_config
from specs import check_parallelism, get_gpu
from specs.hardware import TP_SIZES

LAYOUTS = ("colocated", "disaggregated")


@dataclass(frozen=True)
class CandidateGrid:
    """Which layouts to try. Disaggregated pools take every (count, tp) pair up to `max_gpus` GPUs."""

    gpus: tuple[str, ...] = ("H100-SXM",)
    tps: tuple[int, ...] = (1, 2)
    replicas: tuple[int, ...] = (1, 2, 4)
    budgets: tuple[int | None, ...] = (None,)  # scheduler.max_num_batched_tokens (None = the base's)
    layouts: tuple[str, ...] = LAYOUTS
    pool_counts: tuple[int, ...] = (1, 2, 3)
    max_gpus: int = 8

    def __post_init__(self) -> None:
        for name in ("gpus", "tps", "replicas", "budgets", "layouts", "pool_counts"):
            if not getattr(self, name):
                raise ConfigError(f"plan.{name}: give at least one value")
        for layout in self.layouts:
            check_choice("plan.layouts", layout, LAYOUTS)
        for name in ("tps", "replicas", "pool_counts"):
            for v in getattr(self, name):
                check_int(f"plan.{name}", v, 1)
        for v in self.tps:  # hardware.tp's choices: any other degree fails every candidate alike
            check_choice("plan.tps", v, TP_SIZES)
        for v in self.budgets:
            if v is not None:
                check_int("plan.budgets", v, 1)
        for gpu in self.gpus:  # said once here, not once a candidate
            get_gpu(gpu, field="plan.gpus")
        check_int("plan.max_gpus", self.max_gpus, 1)

    def check_model(self, config: Any) -> None:
        """Refuse a TP degree the base's model cannot be split into (`specs.check_parallelism`: its
        heads and MLP width must divide, as every candidate's config would check).

        The candidates change the GPU and the layout, never the model, so such a TP would fail every
        candidate that uses it: said once here, naming `plan.tps`, not once a row. A TP the model
        splits into is fine even where it does not fit a GPU's memory: that candidate's row says so.
        """
        model = config.model.spec()
        for tp in self.tps:
            try:
                hardware = dataclasses.replace(config.hardware, tp=tp)  # hardware.tp's own checks (with ep)
                check_parallelism(model, tp, hardware.ep)
            except ConfigError as exc:
                raise ConfigError(f"plan.tps: {tp} cannot serve {model.name} on any GPU ({exc})") from None

    def candidates(self) -> list[dict[str, Any]]:
        """Each candidate: {'layout', 'gpu', ..., 'overrides': [...]} (GPU count within max_gpus)."""
        out: list[dict[str, Any]] = []
        for gpu, budget in itertools.product(self.gpus, self.budgets):
            common = [f"scheduler.max_num_batched_tokens={budget}"] if budget is not None else []
            if "colocated" in self.layouts:
                for tp, n in itertools.product(self.tps, self.replicas):
                    if tp * n <= self.max_gpus:
                        out.append({"layout": "colocated", "gpu": gpu, "budget": budget, "tp": tp, "replicas": n,
                                    "overrides": common + [f'hardware.gpu="{gpu}"', f"hardware.tp={tp}",
                                                           "cluster.replicas=[]", f"cluster.num_replicas={n}",
                                                           "disaggregation.enabled=false"]})
            if "disaggregated" in self.layouts:
                for tp_p, n_p, tp_d, n_d in itertools.product(self.tps, self.pool_counts, self.tps, self.pool_counts):
                    if tp_p * n_p + tp_d * n_d <= self.max_gpus:
                        pool = 'disaggregation.{}={{count={}, gpu="{}", tp={}}}'
                        out.append({"layout": "disaggregated", "gpu": gpu, "budget": budget,
                                    "prefill": f"{n_p}x tp{tp_p}", "decode": f"{n_d}x tp{tp_d}",
                                    # the pools are the replicas: a base's [cluster] replicas would be refused
                                    "overrides": common + [f'hardware.gpu="{gpu}"', "disaggregation.enabled=true",
                                                           "cluster.replicas=[]", "cluster.num_replicas=1",
                                                           pool.format("prefill", n_p, gpu, tp_p),
                                                           pool.format("decode", n_d, gpu, tp_d)]})
        return out


def check_prices(prices: dict[str, float] | None, gpus: Sequence[str]) -> dict[str, float]:
    """`prices` (USD per GPU-hour by GPU name or alias) keyed as `gpus`, the plan's GPUs, spell them.

    Aliases of one card match (a price for `h100` prices `H100-SXM`, `specs.get_gpu`). A price for
    a GPU the plan does not try would be ignored, so it is refused naming both lists; a negative
    or non-finite one is refused as `hardware.price_per_hour` is.
    """
    planned: dict[str, list[str]] = {}  # catalog name -> the plan's spellings of it
    for gpu in gpus:
        planned.setdefault(get_gpu(gpu, field="plan.gpus").name, []).append(gpu)
    out: dict[str, float] = {}
    for name, usd in (prices or {}).items():
        check_number(f"plan.prices: {name}", usd, 0.0)
        try:
            card = get_gpu(name).name
        except ConfigError:  # not in the catalog: not among the planned GPUs either
            card = None
        if card not in planned:
            raise ConfigError(f"plan.prices: {name} is not a GPU this plan tries; priced: {', '.join(prices)}; "
                              f"planned (plan.gpus): {', '.join(gpus)}")
        for gpu in planned[card]:
            if gpu in out:
                raise ConfigError(f"plan.prices: {name} prices {card} a second time; give each GPU one price")
            out[gpu] = float(usd)
    return out


def evaluate_candidate(spec: PointSpec) -> dict[str, Any]:
    """`evaluate_point`, except that a layout that cannot be built (the model does not fit) is a row too."""
    try:
        return evaluate_point(spec)
    except ValueError as exc:
        return {"point": spec.index, "overrides": ";".join(spec.overrides), "error": str(exc), "slo_met": False}


@dataclass
class Plan:
    """Every candidate's row, and the two winners (None when no candidate fits)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    by_gpus: dict[str, Any] | None = None
    by_cost: dict[str, Any] | None = None
    by_token_cost: dict[str, Any] | None = None  # lowest cost_per_million_output_tokens
    by_energy: dict[str, Any] | None = None  # lowest energy_j_per_output_token

    def table(self):
        """The rows as a DataFrame; a count only some layouts have (a colocated row's tp and replicas,
        absent from a disaggregated one) stays an integer column, not floats beside the gaps."""
        import pandas as pd

        frame = pd.DataFrame(self.rows)
        for name in frame.columns:
            present = [v for v in (row.get(name) for row in self.rows) if v is not None]
            if present and len(present) < len(self.rows) and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in present):
                frame[name] = frame[name].astype("Int64")
        return frame


def plan(base: Any, target_rate: float, slo: SLO, grid: CandidateGrid = CandidateGrid(),
         prices: dict[str, float] | None = None, executor=None, base_overrides: Sequence[str] = (),
         rate_key: str = "workload.rate", simulate: str = DEFAULT_SIMULATE, progress: bool = True) -> Plan:
    """Simulate every candidate at `target_rate` and pick the cheapest fitting ones."""
    slo.require_targets()
    check_number("target_rate", target_rate, 0.0, strict_min=True)
    prices = check_prices(prices, grid.gpus)
    candidates = grid.candidates()
    if not candidates:
        raise ConfigError(f"plan.max_gpus: no candidate layout fits in {grid.max_gpus} GPUs")
    config = load_config(base, list(base_overrides))
    check_paced(config.workload, rate_key)  # else every candidate would be offered the base's own load
    grid.check_model(config)
    # the same arrival window as the base config's (as the SLO search does): n0 requests at r0 -> n0/r0 s
    (point,) = hold_window_of(config.workload, [{rate_key: repr(float(target_rate))}], rate_key)
    at_rate = tuple(format_override(k, v) for k, v in point.items())
    specs = [PointSpec(base, (), tuple(base_overrides) + tuple(cand["overrides"]) + at_rate, slo, i, simulate)
             for i, cand in enumerate(candidates)]
    executor = executor or LocalExecutor()
    rows = executor.map(evaluate_candidate, specs, desc="plan", progress=progress)
    for cand, spec, row in zip(candidates, specs, rows):
        for k, v in cand.items():
            if k != "overrides":
                row[k] = v
        if "error" not in row:
            row["cost_per_hour"] = cost_per_hour(load_point_config(spec), prices)
            tokens_per_s = row.get("throughput_output_tokens_per_s") or 0.0
            # at the given prices: dollars an hour over the output tokens of an hour
            row["cost_per_million_output_tokens"] = (row["cost_per_hour"] / (3600.0 * tokens_per_s) * 1e6
                                                     if tokens_per_s > 0 else None)
    result = Plan(rows=rows)
    for row in rows:
        row["fits"] = sustains(row)  # the search's test: the SLO met and the queue not growing
    fitting = [r for r in rows if r["fits"]]
    if fitting:
        result.by_gpus = min(fitting, key=lambda r: (r["num_gpus"], r["cost_per_hour"], r["point"]))
        result.by_cost = min(fitting, key=lambda r: (r["cost_per_hour"], r["num_gpus"], r["point"]))
        inf = float("inf")
        result.by_token_cost = min(fitting, key=lambda r: (r.get("cost_per_million_output_tokens") or inf,
                                                           r["num_gpus"], r["point"]))
        result.by_energy = min(fitting, key=lambda r: (r.get("energy_j_per_output_token") or inf,
                                                       r["num_gpus"], r["point"]))
    return result

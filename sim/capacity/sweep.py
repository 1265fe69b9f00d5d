"""Sweeps: a base config, a list of points (each a set of `key=value` overrides), one table.

A point is evaluated by `evaluate_point(PointSpec)`, a module-level function so that local
processes and Ray can run it. It loads the base config with the point's overrides (the same
`a.b=v` keys as `servesim simulate --set`), simulates it, and returns one flat row: the swept
values, the overrides string, the summary's scalars (nested percentiles flattened to
`ttft_s_p90`...), the SLO attainment and goodput. Runs are seeded by the config, so a point's row
depends only on the point. A point's `streams` (`sim.workload.streams`) says how its workload draws
its quantities: `one` generator, as `simulate` does, or `per_quantity` (common random numbers:
request i the same at every rate). `run_sweep` gives a sweep whose points set the rate common
random numbers, as the SLO search does (`rate_streams`): a rate sweep compares the same requests at
different loads.
"""
from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from policies import ConfigError
from policies.config import check_choice, check_number
from sim.capacity.executor import LocalExecutor
from sim.capacity.slo import SLO, attainment
from sim.cluster.layout import all_replica_configs, num_gpus
from sim.config import load_config, toml_value
from sim.notes import rate_unused
from sim.workload import build_workload
from sim.workload.config import MAX_NUM_REQUESTS
from sim.workload.streams import STREAMS

DEFAULT_SIMULATE = "sim.runner.simulate"


def parse_values(text: str) -> list[str]:
    """'1,2,4' -> ['1', '2', '4'] (values stay strings; `load_config` parses them)."""
    return [v.strip() for v in text.split(",") if v.strip()]


def parse_assignment(text: str, flag: str = "--grid") -> tuple[str, list[str]]:
    """'workload.rate=1,2,4' -> ('workload.rate', ['1', '2', '4'])."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not parse_values(values):
        raise ConfigError(f"{flag}: expected KEY=V1,V2,... got {text!r}")
    return key, parse_values(values)


def parse_assignments(texts: Sequence[str], flag: str = "--grid",
                      taken: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Several `KEY=V1,V2,...` as {key: values}, refusing a key given twice.

    A second `--grid workload.rate=...` would replace the first one's values, and a key both in
    `--grid` and `--list` would be swept twice over in one column: neither is what was meant, so
    both are refused. `taken`: keys already given to another flag (key -> that flag).
    """
    taken = dict(taken or {})
    out: dict[str, list[str]] = {}
    for text in texts:
        key, values = parse_assignment(text, flag)
        if key in out:
            raise ConfigError(f"{flag}: {key} is given twice; give each key once, with all its values: "
                              f"{flag} {key}=V1,V2,...")
        if key in taken:
            raise ConfigError(f"{flag}: {key} is already swept by {taken[key]}; give each key to one flag")
        out[key] = values
    return out


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the values (the first key varies slowest)."""
    keys = list(grid)
    for k in keys:
        if not len(grid[k]):
            raise ConfigError(f"{k}: a grid key needs at least one value")
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def expand_list(lists: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The i-th values of every key together (all keys need the same number of values)."""
    keys = list(lists)
    if not keys:
        return []
    n = len(lists[keys[0]])
    for k in keys:
        if len(lists[k]) != n:
            raise ConfigError(f"{k}: a list sweep needs {n} values like {keys[0]}, got {len(lists[k])}")
    return [{k: lists[k][i] for k in keys} for i in range(n)]


def combine(grid_points: list[dict], list_points: list[dict]) -> list[dict]:
    """Cross a grid with a list sweep (either may be empty)."""
    if not grid_points:
        return list_points or [{}]
    if not list_points:
        return grid_points
    return [{**g, **lp} for g in grid_points for lp in list_points]


def hold_window(base: Any, points: list[dict], base_overrides: Sequence[str] = (),
                rate_key: str = "workload.rate") -> list[dict]:
    """Points that set the rate also get num_requests = n0 * rate / r0 (the base's arrival window).

    With a fixed count a higher rate is a shorter burst with less time to build a queue; holding the
    window (as DistServe's runs do: N = 100 x rate) keeps points comparable. Points that set
    `workload.num_requests` themselves, and duration-bounded workloads, are left alone.
    """
    return hold_window_of(load_config(base, list(base_overrides)).workload, points, rate_key)


def sustains(row: Mapping[str, Any]) -> bool:
    """Whether a point's row (`evaluate_point`) sustains its load: `slo.min_attainment` of its
    requests met the SLO and its queue did not grow through the run (`records.saturation`); a
    target longer than the run cannot be missed however far the backlog grows. The search's
    and the planner's one test."""
    return bool(row.get("slo_met")) and not row.get("saturated", False)


def check_paced(workload: Any, rate_key: str = "workload.rate") -> None:
    """Refuse a search or plan by `workload.rate` of a workload whose pace that rate does not set
    (`sim.notes.rate_unused`: a closed loop, stages, per-class rates, a profile's own load): every
    rate would offer the same load, so every answer would be the same (and a search would double
    its rate forever)."""
    unused = rate_unused(workload) if rate_key == "workload.rate" else None
    if unused:
        raise ConfigError(f"{rate_key}: does not set this workload's pace ({unused}); use an open-loop "
                          "workload (workload.kind = poisson, gamma or constant, one rate) or a trace")


def holds_window(workload: Any, rate_key: str = "workload.rate") -> bool:
    """Whether points setting `rate_key` scale this workload section's request count (`hold_window_of`):
    only `workload.rate` of a workload with both a count and a rate and no duration."""
    n0, r0 = getattr(workload, "num_requests", None), getattr(workload, "rate", None)
    return rate_key == "workload.rate" and bool(n0) and bool(r0) and getattr(workload, "duration", None) is None


def hold_window_of(workload: Any, points: list[dict], rate_key: str = "workload.rate") -> list[dict]:
    """`hold_window` for a workload section already loaded (the base's)."""
    if not holds_window(workload, rate_key):
        return points
    n0, r0 = workload.num_requests, workload.rate
    out = []
    for p in points:
        if rate_key in p and "workload.num_requests" not in p:
            try:
                rate = float(p[rate_key])
            except ValueError:  # said as the config would say it, not as float() does
                raise ConfigError.at(rate_key, f"expected a number, got {p[rate_key]!r}") from None
            # checked here, before round() meets a NaN or an infinity
            check_number(rate_key, rate, 0.0, strict_min=True)
            count = n0 * rate / r0
            if count > MAX_NUM_REQUESTS:
                raise ConfigError.at(rate_key, f"{rate:g} requests/s needs about {count:.3g} requests to span the "
                                     f"base's arrival window ({n0} at {r0:g}/s); at most {MAX_NUM_REQUESTS:,} per "
                                     "run: give a lower rate or a smaller base workload.num_requests")
            p = {**p, "workload.num_requests": str(max(1, round(count)))}
        out.append(p)
    return out


def to_scalar(value: Any) -> Any:
    """'4' -> 4, '0.5' -> 0.5, 'A100' stays: table columns sort and plot as numbers."""
    if not isinstance(value, str):
        return value
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def format_override(key: str, value: Any) -> str:
    """`key=value` as `--set` reads it: a string as given (the command line's own words), anything
    else as TOML (a dict is an inline table, not its Python repr)."""
    if value is None:
        raise ConfigError(f"{key}: None is no value to set; leave the key out of the point to keep the base's")
    return f"{key}={value if isinstance(value, str) else toml_value(value)}"


@dataclass(frozen=True)
class PointSpec:
    """Everything a worker needs to evaluate one point (picklable)."""

    base: Any  # a TOML path (str) or a dict of sections
    values: tuple[tuple[str, Any], ...]  # the swept (key, value) pairs of this point
    base_overrides: tuple[str, ...] = ()  # `--set` overrides shared by every point
    slo: SLO = field(default_factory=SLO)
    index: int = 0
    simulate: str = DEFAULT_SIMULATE  # dotted path of `simulate(config) -> result`
    # how the workload draws its quantities (`sim.workload.streams`); other than `one`, `simulate`
    # is handed the workload too: `simulate(config, workload=...)`
    streams: str = "one"

    def __post_init__(self) -> None:
        check_choice("streams", self.streams, STREAMS)

    @property
    def overrides(self) -> list[str]:
        return list(self.base_overrides) + [format_override(k, v) for k, v in self.values]


def resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def flatten_summary(summary: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'ttft_s': {'p90': x}} -> {'ttft_s_p90': x}; lists and None dropped."""
    row: dict[str, Any] = {}
    for k, v in summary.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            row.update(flatten_summary(v, f"{name}_"))
        elif isinstance(v, (int, float, str, bool)):
            row[name] = v
    return row


def load_point_config(spec: PointSpec):
    return load_config(spec.base, spec.overrides)


def evaluate_point(spec: PointSpec) -> dict[str, Any]:
    """Simulate one point and return its table row."""
    config = load_point_config(spec)
    simulate = resolve(spec.simulate)
    if spec.streams == "one":  # the workload `simulate` builds from the config
        result = simulate(config)
    else:
        result = simulate(config, workload=build_workload(config.workload, config.scheduler.max_model_len,
                                                          spec.streams))
    row: dict[str, Any] = {"point": spec.index}
    row.update({k: to_scalar(v) for k, v in spec.values})
    row["overrides"] = ";".join(spec.overrides)
    row["num_gpus"] = num_gpus(config)
    row.update(flatten_summary(result.summary))
    duration = float(result.summary.get("duration_s") or 0.0)
    frac = attainment(result.requests, spec.slo)
    row["slo_attainment"] = frac
    row["slo_met"] = bool(frac >= spec.slo.min_attainment)
    row["goodput_rps"] = frac * len(result.requests) / duration if duration > 0 else 0.0
    row["goodput_rps_per_gpu"] = row["goodput_rps"] / row["num_gpus"] if row["num_gpus"] else 0.0
    return row


def make_specs(base: Any, points: list[dict], slo: SLO = SLO(), base_overrides: Sequence[str] = (),
               simulate: str = DEFAULT_SIMULATE, streams: str = "one") -> list[PointSpec]:
    if isinstance(points, Mapping) or not all(isinstance(p, Mapping) for p in points):
        raise ConfigError(f"points: expected a list of {{key: value}} tables, one a point, got {points!r}"[:200])
    return [PointSpec(base, tuple(p.items()), tuple(base_overrides), slo, i, simulate, streams)
            for i, p in enumerate(points)]


def rate_streams(points: Sequence[Mapping], common_random_numbers: bool = True,
                 rate_key: str = "workload.rate") -> str:
    """How a sweep's points draw their workloads (`sim.workload.streams`): `per_quantity` when
    `common_random_numbers` and a point sets `rate_key`, else `one` (as `simulate` draws them).

    One generator serves arrival gaps before lengths, so at another rate (and the held window's
    other count) request i gets other lengths, and a rate sweep's curve wiggles with the sample
    (docs/results/2026-12-08-capacity-crn.md). A sweep that leaves the rate alone already offers
    every point the same requests from one generator, and keeps `simulate`'s own workload.
    """
    if common_random_numbers and any(isinstance(p, Mapping) and rate_key in p for p in points):
        return "per_quantity"
    return "one"


def run_sweep(base: Any, points: list[dict], slo: SLO = SLO(), executor=None, base_overrides: Sequence[str] = (),
              simulate: str = DEFAULT_SIMULATE, progress: bool = True, common_random_numbers: bool = True):
    """Evaluate every point (in parallel on `executor`) and return the table, one row per point.

    `common_random_numbers`: points that set the rate draw their workloads from common random
    numbers (`rate_streams`: request i the same at every rate); False: each as `simulate` would.
    """
    import pandas as pd

    if isinstance(base, Path):
        base = str(base)
    streams = rate_streams(points, common_random_numbers)  # checked as points by make_specs
    specs = make_specs(base, points, slo, base_overrides, simulate, streams)
    # fail fast on a bad key or value (pools included), before starting workers
    for spec in specs:
        all_replica_configs(load_point_config(spec))
    executor = executor or LocalExecutor()
    rows = executor.map(evaluate_point, specs, desc="sweep", progress=progress)
    return pd.DataFrame(rows)


def write_table(df, out_dir: str | Path, name: str = "sweep") -> list[Path]:
    """Write `name`.csv, and `name`.parquet when pyarrow is installed; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.csv"]
    df.to_csv(paths[0], index=False)
    try:
        import pyarrow  # noqa: F401

        df.to_parquet(out / f"{name}.parquet", index=False)
        paths.append(out / f"{name}.parquet")
    except ImportError:
        pass
    return paths

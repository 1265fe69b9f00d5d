"""SLO search: the highest request rate a configuration sustains (DistServe goodput).

A rate is *sustained* when at least `slo.min_attainment` (90%) of the requests meet every target
and the run keeps up with it (`records.saturation`: no backlog that grows through the run).
The search brackets the knee by doubling / halving from a starting rate, then narrows the bracket
until `upper / lower - 1 <= rel_tol` (the stated tolerance). With an executor of width k it tests
k rates per round (k-section; plain bisection when k = 1); a bracketing round goes at most three
doublings (8x) past its lowest rate, its k probes spaced evenly in log rate (k doublings for k <= 3),
and never above `max_rate`. It assumes attainment falls with rate.

Common random numbers: by default every probe draws its workload's quantities from their own
streams (`sim.workload.streams`, `per_quantity`), so request i has the same lengths, class and
prefix-group user at every rate, and its arrival time is the same unit-rate draw scaled by 1/rate:
neighbouring rates differ by the rate alone, not by a fresh sample. `common_random_numbers=False`
draws each rate's workload as `simulate` would (one generator: request i's lengths move with the
rate and the count), so attainment wiggles by a few percent between neighbouring rates.
`held_common` says in one line what the probes share.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from policies import ConfigError
from policies.config import check_number
from sim.capacity.executor import SerialExecutor
from sim.capacity.slo import SLO
from sim.capacity.sweep import (DEFAULT_SIMULATE, PointSpec, check_paced, evaluate_point, hold_window_of,
                                holds_window, load_point_config, make_specs, sustains)
from sim.cluster.layout import num_gpus
from sim.workload.config import WorkloadConfig

DEFAULT_RATE_KEY = "workload.rate"
# a bracketing round's probes span at most 2^3 = 8x: a probe's request count grows with its rate (the
# held window) and a saturated one runs out its backlog, so one 2^15 x the start (16 workers
# doubling) would hold millions of requests and never end
MAX_DOUBLINGS_PER_ROUND = 3


@dataclass
class SearchResult:
    """The bracket [rate, upper] around the knee and every point evaluated on the way."""

    rate: float  # highest rate found that sustains the SLO (0 if even `min_rate` fails)
    upper: float  # lowest rate found that does not (inf if even `max_rate` passes)
    rel_tol: float
    num_gpus: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    common: str = ""  # what every probe shared (`held_common`)

    @property
    def rate_per_gpu(self) -> float:
        return self.rate / self.num_gpus if self.num_gpus else 0.0

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows).sort_values("rate").reset_index(drop=True)


def held_common(workload: WorkloadConfig, hold_window: bool = True, common: bool = True,
                rate_key: str = DEFAULT_RATE_KEY, count_swept: bool = False) -> str:
    """One line: what the probes of a search of `workload` by `rate_key` share across rates
    (`count_swept`: a sweep that sets workload.num_requests itself, point by point)."""
    if not common:
        return ("nothing: each rate draws its workload as simulate does, from one generator (request i's "
                "drawn lengths and arrival gap change with the rate)")
    shared = ["trace row" if workload.trace else "prompt and output lengths"]
    if workload.classes:
        shared.append("class")
    if workload.num_prefix_groups:
        shared.append("prefix group and user")
    if rate_key != DEFAULT_RATE_KEY:
        arrival = f"the same: {rate_key} is what varies"
    elif workload.kind == "trace":
        arrival = "the recorded one rescaled to each rate"
    elif workload.kind == "constant":
        arrival = "i / rate"
    else:
        arrival = "a rate-1 draw scaled by 1/rate"
    if count_swept:
        count = "each point's own workload.num_requests: a larger count adds requests after these"
    elif workload.duration is not None:
        count = "the same duration: a higher rate adds requests after these"
    elif hold_window and holds_window(workload, rate_key):
        count = "a higher rate adds requests after these (the count grows with the rate: the same arrival window)"
    else:
        count = "the same request count at every rate"
    return f"request i's {', '.join(shared)} and its arrival time ({arrival}); {count}"


def probe_specs(base: Any, workload: WorkloadConfig, rates: Sequence[float], slo: SLO,
                rate_key: str = DEFAULT_RATE_KEY, base_overrides: Sequence[str] = (),
                simulate: str = DEFAULT_SIMULATE, hold_window: bool = True,
                common_random_numbers: bool = True) -> list[PointSpec]:
    """The points a search evaluates at `rates` (`find_max_rate` says what each argument means);
    `workload`: the base's workload section, whose count and rate set the held window."""
    points = [{rate_key: repr(float(r))} for r in rates]
    if hold_window:
        points = hold_window_of(workload, points, rate_key)
    streams = "per_quantity" if common_random_numbers else "one"
    return make_specs(base, points, slo, base_overrides, simulate, streams)


def find_max_rate(base: Any, slo: SLO, rate_key: str = DEFAULT_RATE_KEY, start_rate: float = 1.0,
                  rel_tol: float = 0.05, executor=None, base_overrides: Sequence[str] = (),
                  min_rate: float = 1e-3, max_rate: float = 1e5, simulate: str = DEFAULT_SIMULATE,
                  progress: bool = True, hold_window: bool = True,
                  common_random_numbers: bool = True) -> SearchResult:
    """Search the highest `rate_key` value at which `base` meets `slo` (see the module docstring).

    `hold_window`: a workload of `num_requests` at the config's rate r0 spans about n0 / r0 seconds;
    each probed rate r then gets round(n0 * r / r0) requests, so every probe covers the same
    arrival window, as DistServe's runs do (N = 100 x rate). Otherwise a fixed count would give a
    high rate a shorter burst and less time to build a queue, flattering it.

    `common_random_numbers`: every probe's workload draws each quantity from its own stream, so
    request i is the same request at every rate (module docstring); False: as `simulate` draws it.
    """
    slo.require_targets()
    check_number("rel_tol", rel_tol, 0.0, strict_min=True)
    check_number("start_rate", start_rate, 0.0, strict_min=True)
    if start_rate > max_rate:  # the search never probes above max_rate: halving down from 1e300 takes ~1000 rounds
        raise ConfigError(f"start_rate: {start_rate:g} requests/s is above the search's ceiling max_rate = "
                          f"{max_rate:g}; start at or below it")
    executor = executor or SerialExecutor()
    width = max(1, getattr(executor, "max_workers", 1) or 1)
    rows: list[dict[str, Any]] = []
    tested: dict[float, bool] = {}

    config = load_point_config(make_specs(base, [{}], slo, base_overrides, simulate)[0])
    check_paced(config.workload, rate_key)

    def test(rates: list[float]) -> None:
        rates = [r for r in rates if r not in tested]
        if not rates:
            return
        specs = probe_specs(base, config.workload, rates, slo, rate_key, base_overrides, simulate, hold_window,
                            common_random_numbers)
        for r, row in zip(rates, executor.map(evaluate_point, specs, desc="slo search", progress=progress)):
            row["rate"] = r
            rows.append(row)
            tested[r] = sustains(row)  # a growing backlog is no steady state (else the search climbs forever)

    def bracket() -> tuple[float, float]:
        passing = [r for r, ok in tested.items() if ok]
        failing = [r for r, ok in tested.items() if not ok]
        hi = min(failing) if failing else float("inf")
        below = [r for r in passing if r < hi]
        return (max(below) if below else 0.0), hi

    # 1. bracket the knee: several doublings (or halvings) per round when the executor is wide, but
    # at most MAX_DOUBLINGS_PER_ROUND: wider executors space their probes more finely within them
    doublings = min(width, MAX_DOUBLINGS_PER_ROUND)
    test([min(start_rate * 2.0 ** (i * doublings / width), max_rate) for i in range(width)])
    lo, hi = bracket()
    while hi == float("inf") and lo < max_rate:
        test([min(lo * 2.0 ** ((i + 1) * doublings / width), max_rate) for i in range(width)])
        lo, hi = bracket()
    while lo == 0.0 and hi > min_rate:
        test([max(hi * 0.5 ** ((i + 1) * doublings / width), min_rate) for i in range(width)])
        lo, hi = bracket()
    # 2. narrow [lo, hi] by k-section until the stated tolerance
    while lo > 0 and hi < float("inf") and hi / lo - 1.0 > rel_tol:
        step = (hi - lo) / (width + 1)
        test([lo + step * (i + 1) for i in range(width)])
        lo, hi = bracket()
    return SearchResult(rate=lo, upper=hi, rel_tol=rel_tol, num_gpus=num_gpus(config), rows=rows,
                        common=held_common(config.workload, hold_window, common_random_numbers, rate_key))

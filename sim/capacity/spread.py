"""`SeedSpread`: the SLO search repeated over workload seeds, its answer as a median and a range.

One search answers for one workload draw: `rel_tol` bounds how far its bracket is from the knee
of *that* sample's attainment curve, not how far the sample's knee is from the workload's.
Another seed is another sample of the same workload (other lengths, other arrival gaps), and on
the example configs its answer moves by more than the tolerance (8-11% from lowest to highest
over six seeds: docs/results/2026-12-08-capacity-crn.md). `search_seeds` runs `find_max_rate`
once per seed, each exactly the single search that config with `workload.seed = s` gets, and
`SeedSpread` reports the answers' median and range. A workload whose draws do not depend on the
seed (constant arrivals and lengths; a trace replayed with its own arrivals and lengths) has no
spread.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from policies import ConfigError
from policies.config import check_int
from sim.capacity.search import SearchResult, find_max_rate
from sim.capacity.slo import SLO


def consecutive_seeds(first: int, count: int) -> list[int]:
    """`count` workload seeds from `first` on (the config's own seed first, so its answer is one of them)."""
    check_int("seeds", count, 1)
    check_int("workload.seed", first, 0)
    return list(range(first, first + count))


@dataclass
class SeedSpread:
    """One search per workload seed (`results[i]` for `seeds[i]`) and what their answers spread over."""

    seeds: list[int]
    results: list[SearchResult]

    @property
    def rates(self) -> list[float]:
        """Each seed's answer: the highest rate its search found sustained."""
        return [r.rate for r in self.results]

    @property
    def median(self) -> float:
        return float(statistics.median(self.rates))

    @property
    def low(self) -> float:
        return min(self.rates)

    @property
    def high(self) -> float:
        return max(self.rates)

    @property
    def num_gpus(self) -> int:
        return self.results[0].num_gpus

    def relative_range(self) -> tuple[float, float]:
        """(low, high) as fractions of the median (-0.05, 0.03); (0, 0) when the median is 0."""
        m = self.median
        return ((self.low / m - 1.0, self.high / m - 1.0) if m > 0 else (0.0, 0.0))


def search_seeds(base: Any, slo: SLO, seeds: Sequence[int], *, base_overrides: Sequence[str] = (),
                 on_result: Callable[[int, SearchResult], None] | None = None, **search: Any) -> SeedSpread:
    """`find_max_rate(base, slo, base_overrides=[*base_overrides, "workload.seed=S"], **search)` for
    every seed S, in turn (each search runs its probes on `search["executor"]`); `on_result(seed,
    result)` is called as each search ends (progress)."""
    if not seeds:
        raise ConfigError("seeds: give at least one workload seed")
    results = []
    for seed in seeds:
        check_int("workload.seed", seed, 0)
        res = find_max_rate(base, slo, base_overrides=[*base_overrides, f"workload.seed={seed}"], **search)
        results.append(res)
        if on_result is not None:
            on_result(seed, res)
    return SeedSpread(list(seeds), results)

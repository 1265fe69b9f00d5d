"""`QuantileSketch`: the mean, percentiles and max of a stream of values in bounded memory.

A streamed run (`records.stream`) cannot keep every TTFT, inter-token gap or step time of a million
requests, yet its summary must read like the in-memory one (`records.metrics.stats`). The sketch
keeps the values themselves while there are at most `exact_limit` of them (default 2**22, 32 MiB),
so the summary of any ordinary run is exact: the same `np.percentile` over the same values. Past
the limit it folds them into logarithmic buckets (the DDSketch layout: bucket i holds
(gamma**(i-1), gamma**i], gamma = (1 + a) / (1 - a), and stands for 2 gamma**i / (gamma + 1), which
is within relative `a` of every value in it); zero and negative values have their own store.

Stated error past the limit: every percentile is within relative `relative_accuracy` (default
0.1%) of `np.percentile`'s linearly interpolated value over the exact values, because it is the
same interpolation between two bucket values each within `a` of the order statistic it stands for
(values of one sign; tests/records/test_sketch.py checks it against exact percentiles). Count,
sum (hence mean, to float rounding), min and max are exact at any size.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from records.metrics import PERCENTILES, stats

DEFAULT_EXACT_LIMIT = 1 << 22
DEFAULT_RELATIVE_ACCURACY = 1e-3

class _LogBuckets:
    """Counts of positive values in log buckets of ratio gamma, in one dense array that grows."""

    def __init__(self, log_gamma: float) -> None:
        self.log_gamma = log_gamma
        self.offset = 0  # bucket index of counts[0]
        self.counts = np.zeros(0, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:  # values > 0
        if values.size == 0:
            return
        idx = np.ceil(np.log(values) / self.log_gamma).astype(np.int64)
        lo, hi = int(idx.min()), int(idx.max())
        if self.counts.size == 0:
            self.offset, self.counts = lo, np.zeros(hi - lo + 1, dtype=np.int64)
        elif lo < self.offset or hi >= self.offset + self.counts.size:
            new_lo, new_hi = min(lo, self.offset), max(hi, self.offset + self.counts.size - 1)
            grown = np.zeros(new_hi - new_lo + 1, dtype=np.int64)
            grown[self.offset - new_lo:self.offset - new_lo + self.counts.size] = self.counts
            self.offset, self.counts = new_lo, grown
        self.counts += np.bincount(idx - self.offset, minlength=self.counts.size)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def __deepcopy__(self, memo) -> "_LogBuckets":
        other = _LogBuckets(self.log_gamma)
        other.offset, other.counts = self.offset, self.counts.copy()  # `add` counts in place
        return other

    def value_at(self, rank: int, ascending: bool = True) -> float:
        """The representative of the bucket holding the `rank`-th smallest (or largest) value."""
        counts = self.counts if ascending else self.counts[::-1]
        i = int(np.searchsorted(np.cumsum(counts), rank, side="right"))
        index = self.offset + (i if ascending else self.counts.size - 1 - i)
        gamma = math.exp(self.log_gamma)
        return 2.0 * math.exp(index * self.log_gamma) / (gamma + 1.0)


class QuantileSketch:
    """Running count, sum, min, max and percentiles of float values (NaN and inf are skipped).

    `add(values)` takes an array (or any sequence) at a time; `stats()` returns the same dict as
    `records.metrics.stats` ({mean, p50, p90, p99, max}, or None when empty); `exact` says whether
    the percentiles are still exact. See the module docstring for the error past `exact_limit`.
    """

    def __init__(self, exact_limit: int = DEFAULT_EXACT_LIMIT,
                 relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        if not 0 < relative_accuracy < 1:
            raise ValueError(f"relative_accuracy: must be in (0, 1), got {relative_accuracy}")
        if exact_limit < 0:
            raise ValueError(f"exact_limit: must be >= 0, got {exact_limit}")
        self.exact_limit = exact_limit
        self.relative_accuracy = relative_accuracy
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf
        self._chunks: list[np.ndarray] | None = []  # the values themselves while exact
        log_gamma = math.log((1 + relative_accuracy) / (1 - relative_accuracy))
        self._pos = _LogBuckets(log_gamma)
        self._neg = _LogBuckets(log_gamma)  # of -value
        self._zeros = 0

    @property
    def exact(self) -> bool:
        return self._chunks is not None

    def __deepcopy__(self, memo) -> "QuantileSketch":
        """An independent copy that shares the exact values' arrays: the sketch never changes an
        array it holds (it appends new ones, and folds by reading them), so only the list is copied.
        A spooled recorder's snapshot (`records.stream`) copies its summary this way under the
        engine's lock, between two steps, where deep-copying up to 32 MiB of values a metric stalled
        every running request (docs/results/2026-12-08-serve-shutdown-and-memory.md)."""
        other = copy.copy(self)
        other._chunks = list(self._chunks) if self._chunks is not None else None
        other._pos, other._neg = copy.deepcopy(self._pos, memo), copy.deepcopy(self._neg, memo)
        return other

    def add(self, values) -> None:
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        self.count += int(v.size)
        self.sum += float(v.sum())
        self.min = min(self.min, float(v.min()))
        self.max = max(self.max, float(v.max()))
        if self._chunks is not None:
            self._chunks.append(v.copy() if v.base is not None else v)
            if self.count > self.exact_limit:
                chunks, self._chunks = self._chunks, None
                for chunk in chunks:
                    self._bucket(chunk)
            return
        self._bucket(v)

    def _bucket(self, v: np.ndarray) -> None:
        self._pos.add(v[v > 0])
        self._neg.add(-v[v < 0])
        self._zeros += int(np.count_nonzero(v == 0))

    def values(self) -> np.ndarray:
        """Every value added, in order (only while exact)."""
        if self._chunks is None:
            raise ValueError("values: the sketch holds buckets, not values, past exact_limit")
        return np.concatenate(self._chunks) if self._chunks else np.empty(0)

    def _order_statistic(self, k: int) -> float:
        """The k-th smallest value (0-based), to the sketch's relative accuracy."""
        num_neg = self._neg.total
        if k < num_neg:
            return -self._neg.value_at(k, ascending=False)
        k -= num_neg
        if k < self._zeros:
            return 0.0
        return self._pos.value_at(k - self._zeros)

    def percentile(self, p: float) -> float:
        """The p-th percentile, interpolated between order statistics as `np.percentile` does."""
        if self.count == 0:
            return math.nan
        if self._chunks is not None:
            return float(np.percentile(self.values(), p))
        h = (self.count - 1) * p / 100.0
        lo = math.floor(h)
        a = self._order_statistic(lo)
        b = self._order_statistic(min(lo + 1, self.count - 1))
        value = a + (h - lo) * (b - a)
        return min(max(value, self.min), self.max)  # the exact extremes bound every percentile

    def stats(self) -> dict | None:
        """{mean, p50, p90, p99, max} like `records.metrics.stats` (None when nothing was added)."""
        if self.count == 0:
            return None
        if self._chunks is not None:  # exact: the very computation of the in-memory summary
            return stats(self.values())
        out = {"mean": self.sum / self.count}
        for p in PERCENTILES:
            out[f"p{p}"] = self.percentile(p)
        out["max"] = self.max
        return out

"""One benchmark's figures as a load generator's client reports them (guidellm's definitions).

TTFT and E2E from each request's send, ITL per output token after the first (vLLM's TPOT:
`records.results.request_row`), requests and output tokens per second over the benchmark's span
(its start to its last answer). The simulated workload's own bookkeeping
(`fidelity.sources.guidellm.Benchmark`) and a finished simulation's requests table
(`fidelity.benchmarks.predicted_benchmarks`) both report through `benchmark_stats`, so `simulate`,
`reproduce` and the app read one definition.

guidellm summarises each metric as a distribution of per-request values (its `DistributionSummary`,
0.3 to 0.7): a request's ITL is weighted by the gaps it averages (output tokens - 1), so the mean
ITL is per token, not per request; a percentile is the smallest value whose cumulative share of the
weight reaches it, never interpolated between two requests (`client_percentile`).
"""
from __future__ import annotations

import math

import numpy as np


def client_percentile(values, p: float, weights=None) -> float:
    """guidellm's p-th percentile of `values` (each weighted by `weights`, default 1): equal values
    merged, zero weights dropped, the first value whose cumulative probability is >= p / 100
    (`Percentiles.from_pdf`); NaN without values."""
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    unique, inverse = np.unique(v, return_inverse=True)
    summed = np.zeros(unique.size)
    np.add.at(summed, inverse, w)
    unique, summed = unique[summed > 0], summed[summed > 0]
    if unique.size == 0:
        return math.nan
    cdf = np.cumsum(summed / summed.sum())
    return float(unique[min(int(np.searchsorted(cdf, p / 100.0, side="left")), unique.size - 1)])


def per_token_mean(itl, gaps) -> float:
    """The mean of per-request ITLs weighted by the gaps each averages (guidellm's mean ITL)."""
    itl, gaps = np.asarray(itl, dtype=float), np.asarray(gaps, dtype=float)
    return float((itl * gaps).sum() / gaps.sum()) if gaps.sum() > 0 else math.nan


def benchmark_stats(ttft, itl, e2e, output_tokens: int, span: float, *, itl_gaps) -> dict:
    """`requests`, `requests_per_s`, TTFT (mean, p50, p99; ms), ITL (mean, p99; ms), E2E (mean,
    p99; s) and `output_tokens_per_s` of one benchmark's served requests (`ttft`, `e2e` one value
    per request, `itl` per request with more than one output token and `itl_gaps` its output tokens
    - 1, which weight it), over `span` seconds, as guidellm summarises them (module docstring)."""
    ttft, itl, e2e = (np.asarray(v, dtype=float) for v in (ttft, itl, e2e))

    def mean(v: np.ndarray) -> float:
        return float(v.mean()) if v.size else math.nan

    per_s = (lambda n: n / span if span > 0 else math.nan)  # noqa: E731
    q = client_percentile
    return {"requests": int(e2e.size), "requests_per_s": per_s(e2e.size),
            "ttft_mean_ms": 1e3 * mean(ttft), "ttft_p50_ms": 1e3 * q(ttft, 50), "ttft_p99_ms": 1e3 * q(ttft, 99),
            "itl_mean_ms": 1e3 * per_token_mean(itl, itl_gaps), "itl_p99_ms": 1e3 * q(itl, 99, itl_gaps),
            "e2e_mean_s": mean(e2e), "e2e_p99_s": q(e2e, 99), "output_tokens_per_s": per_s(output_tokens)}

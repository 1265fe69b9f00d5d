"""One benchmark's figures as a load generator's client reports them (guidellm's definitions).

TTFT and E2E from each request's send, ITL per output token after the first (vLLM's TPOT:
`records.results.request_row`), requests and output tokens per second over the benchmark's span
(its start to its last answer). The simulated workload's own bookkeeping
(`fidelity.sources.guidellm.Benchmark`) and a finished simulation's requests table
(`fidelity.benchmarks.predicted_benchmarks`) both report through `benchmark_stats`, so `simulate`,
`reproduce` and the app read one definition.
"""
from __future__ import annotations

import math

import numpy as np


def benchmark_stats(ttft, itl, e2e, output_tokens: int, span: float) -> dict:
    """`requests`, `requests_per_s`, TTFT (mean, p50, p99; ms), ITL (mean, p99; ms), E2E (mean,
    p99; s) and `output_tokens_per_s` of one benchmark's served requests (`ttft`, `e2e` one value
    per request, `itl` per request with more than one output token), over `span` seconds."""
    ttft, itl, e2e = (np.asarray(v, dtype=float) for v in (ttft, itl, e2e))

    def q(v: np.ndarray, p: float) -> float:
        return float(np.percentile(v, p)) if v.size else math.nan

    def mean(v: np.ndarray) -> float:
        return float(v.mean()) if v.size else math.nan

    per_s = (lambda n: n / span if span > 0 else math.nan)  # noqa: E731
    return {"requests": int(e2e.size), "requests_per_s": per_s(e2e.size),
            "ttft_mean_ms": 1e3 * mean(ttft), "ttft_p50_ms": 1e3 * q(ttft, 50), "ttft_p99_ms": 1e3 * q(ttft, 99),
            "itl_mean_ms": 1e3 * mean(itl), "itl_p99_ms": 1e3 * q(itl, 99),
            "e2e_mean_s": mean(e2e), "e2e_p99_s": q(e2e, 99), "output_tokens_per_s": per_s(output_tokens)}

"""A benchmark's figures as guidellm summarises them: ITL per token, percentiles never interpolated."""
from __future__ import annotations

import numpy as np
import pytest

from fidelity.benchmark_stats import benchmark_stats, client_percentile


def test_itl_is_weighted_by_the_gaps_each_request_averages_as_guidellm_does():
    # guidellm weights a request's ITL by its output tokens - 1: one 2-token answer at 10 ms and
    # one 10-token answer at 20 ms are 1 gap of 10 ms and 9 of 20 ms, a mean of 19 ms (not 15)
    stats = benchmark_stats([0.1, 0.2], [0.010, 0.020], [1.0, 2.0], 12, 2.0, itl_gaps=[1, 9])
    assert stats["itl_mean_ms"] == pytest.approx(19.0)
    assert stats["itl_p99_ms"] == pytest.approx(20.0)


def test_percentiles_are_the_first_value_whose_share_reaches_them():
    ttft = np.arange(1, 41) / 1e3  # 40 requests: guidellm's p50 is the 20th, its p99 the 40th
    stats = benchmark_stats(ttft, [], ttft, 0, 1.0, itl_gaps=[])
    assert stats["ttft_p50_ms"] == pytest.approx(20.0) and stats["ttft_p99_ms"] == pytest.approx(40.0)
    assert stats["e2e_p99_s"] == pytest.approx(0.040)
    assert np.isnan(stats["itl_mean_ms"]) and np.isnan(stats["itl_p99_ms"])
    assert client_percentile([5.0, 5.0, 1.0], 50) == 5.0  # equal values merged, as guidellm's pdf
    assert client_percentile([1.0, 2.0], 10, weights=[0, 1]) == 2.0  # a zero weight is no value

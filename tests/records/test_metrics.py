"""summarize(): vLLM bench-serve definitions, checked by hand-built requests and by identities."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import ConfigError
from records.metrics import SLOConfig, format_summary, stats, summarize
from records.results import StepRecord, pooled_itls, requests_table, steps_table
from records_helpers import make_done_request, make_rejected_request


def summary_of(requests, steps=(), slo=None):
    return summarize(requests_table(requests), steps_table(steps), pooled_itls(requests), slo)


def make_step(step_id, start, duration, prefill=0, decode=0, padding=0, kv_usage=0.5, waiting=0):
    return StepRecord(step_id, start, duration, prefill, decode, padding, decode + (1 if prefill else 0),
                      0, 0, 0, int(kv_usage * 100), kv_usage, waiting, 1, 0)


def test_definitions_on_a_hand_computed_run():
    # request a: arrives 0, tokens at 1.0, 1.5, 2.5 -> TTFT 1, E2E 2.5, TPOT 0.75, ITLs 0.5, 1.0
    # request b: arrives 1, one token at 3.0 -> TTFT 2, E2E 2, no TPOT
    a = make_done_request("a", 0.0, [1.0, 1.5, 2.5], prompt=100)
    b = make_done_request("b", 1.0, [3.0], prompt=50)
    s = summary_of([a, b])
    assert s["num_requests"] == 2 and s["num_finished"] == 2 and s["num_rejected"] == 0
    assert s["duration_s"] == pytest.approx(3.0)
    assert s["ttft_s"]["mean"] == pytest.approx(1.5)
    assert s["ttft_s"]["max"] == pytest.approx(2.0)
    assert s["tpot_s"]["mean"] == pytest.approx(0.75)  # only a has a TPOT
    assert s["e2e_s"]["p50"] == pytest.approx(2.25)
    assert s["itl_s"]["mean"] == pytest.approx(0.75)
    assert s["max_stall_s"] == pytest.approx(1.0)
    assert s["throughput"]["requests_per_s"] == pytest.approx(2 / 3)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(4 / 3)
    assert s["throughput"]["total_tokens_per_s"] == pytest.approx(154 / 3)


def test_rejected_requests_are_counted_and_kept_out_of_latencies():
    a = make_done_request("a", 0.0, [1.0, 2.0])
    r = make_rejected_request("r", 0.5)
    table = requests_table([a, r])
    assert list(table["finish_reason"]) == ["length", "rejected"]
    assert table.loc[1, "reject_reason"].startswith("prompt longer")
    assert math.isnan(table.loc[1, "ttft_s"])
    s = summarize(table, steps_table([]), pooled_itls([a, r]))
    assert s["num_requests"] == 2 and s["num_finished"] == 1 and s["num_rejected"] == 1
    assert s["ttft_s"]["max"] == pytest.approx(1.0)


def test_goodput_counts_only_requests_meeting_every_slo():
    fast = make_done_request("fast", 0.0, [0.1, 0.2, 0.3])  # TTFT 0.1, TPOT 0.1
    slow_first = make_done_request("slow_first", 0.0, [2.0, 2.1])  # TTFT 2
    slow_tokens = make_done_request("slow_tokens", 0.0, [0.1, 1.1, 2.1])  # TPOT 1
    one_token = make_done_request("one", 0.0, [0.2])  # no TPOT to miss
    reqs = [fast, slow_first, slow_tokens, one_token]
    s = summary_of(reqs, slo=SLOConfig(ttft_s=0.5, tpot_s=0.2))
    duration = s["duration_s"]
    assert s["goodput_requests_per_s"] == pytest.approx(2 / duration)
    assert s["slo_attainment"] == pytest.approx(0.5)
    no_slo = summary_of(reqs)
    assert no_slo["goodput_requests_per_s"] == pytest.approx(no_slo["throughput"]["requests_per_s"])


def test_attainment_is_of_every_request_and_the_capacity_search_reads_the_same():
    """A rejected request has missed its SLO: attainment counts it (DistServe's definition), and the
    sweep's and search's `attainment` of the same table agrees with the summary's."""
    from sim.capacity.slo import SLO, attainment

    reqs = [make_done_request("fast", 0.0, [0.1, 0.2]), make_rejected_request("r", 0.5)]
    s = summary_of(reqs, slo=SLOConfig(ttft_s=0.5))
    assert s["slo_attainment"] == pytest.approx(0.5)
    assert attainment(requests_table(reqs), SLO(ttft_s=0.5)) == pytest.approx(s["slo_attainment"])


def test_padding_fraction_and_time_weighted_step_figures():
    steps = [make_step(0, 0.0, 1.0, prefill=30, padding=10, kv_usage=0.2, waiting=4),
             make_step(1, 1.0, 3.0, decode=2, padding=8, kv_usage=0.6, waiting=0)]
    a = make_done_request("a", 0.0, [1.0, 4.0])
    s = summary_of([a], steps)
    assert s["padding_fraction"] == pytest.approx(18 / 50)
    assert s["kv_usage"]["mean"] == pytest.approx((0.2 * 1 + 0.6 * 3) / 4)
    assert s["kv_usage"]["max"] == pytest.approx(0.6)
    assert s["num_waiting"]["mean"] == pytest.approx(1.0)
    assert s["num_waiting"]["max"] == 4


def test_prefix_cache_hit_rate_from_cached_prompt_tokens():
    a = make_done_request("a", 0.0, [1.0], prompt=100)
    b = make_done_request("b", 0.0, [1.0], prompt=100)
    b.num_cached_tokens = 64
    assert summary_of([a, b])["prefix_cache_hit_rate"] == pytest.approx(64 / 200)
    # a rejected request never looked the cache up: not in the denominator
    assert summary_of([a, b, make_rejected_request("c", 0.0, prompt=100)])["prefix_cache_hit_rate"] == \
        pytest.approx(64 / 200)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.lists(st.floats(0.001, 2), min_size=1, max_size=12)),
                min_size=1, max_size=15))
def test_identities_between_tpot_itl_and_stall(spec):
    # TPOT of a request = the mean of its own ITLs; pooled ITL count = sum(n - 1); max stall = max ITL
    reqs = []
    for i, (arrival, gaps) in enumerate(spec):
        times = list(arrival + np.cumsum(gaps))
        reqs.append(make_done_request(i, arrival, times))
    table = requests_table(reqs)
    for r, tpot in zip(reqs, table["tpot_s"]):
        gaps = np.diff(r.token_times)
        assert (math.isnan(tpot) and len(gaps) == 0) or tpot == pytest.approx(gaps.mean())
    itls = pooled_itls(reqs)
    assert len(itls) == sum(len(r.token_times) - 1 for r in reqs)
    s = summarize(table, steps_table([]), itls)
    if len(itls):
        assert s["max_stall_s"] == pytest.approx(table["max_itl_s"].max())
        assert s["itl_s"]["p50"] <= s["itl_s"]["p99"] <= s["itl_s"]["max"]
    assert s["e2e_s"]["mean"] >= s["ttft_s"]["mean"] - 1e-12


def test_stats_ignores_nan_and_is_none_when_empty():
    assert stats([math.nan]) is None
    out = stats([1.0, math.nan, 3.0])
    assert out["mean"] == 2.0 and out["max"] == 3.0


def test_slo_validation_names_the_field():
    with pytest.raises(ConfigError, match=r"^slo\.ttft_s"):
        SLOConfig(ttft_s=-1.0)


def test_format_summary_mentions_every_headline():
    a = make_done_request("a", 0.0, [1.0, 1.5])
    text = format_summary(summary_of([a]))
    for word in ("TTFT", "TPOT", "ITL", "E2E", "throughput", "goodput", "max stall", "preemptions"):
        assert word in text


def test_ttft_parts_line_names_only_what_was_simulated():
    """Without a front end the send/API/first-chunk parts are not simulated: the line says so
    instead of printing them as 0 ms; with one, every part is printed and they sum to the mean."""
    a = make_done_request("a", 0.0, [1.0, 1.5])
    summary = summary_of([a])
    line = next(x for x in format_summary(summary).splitlines() if x.startswith("TTFT parts"))
    assert "no [frontend] simulated" in line and "API server 0" not in line
    parts = {**summary["ttft_parts"], "api_server_s": 0.002, "engine_queue_s": summary["ttft_parts"]["engine_queue_s"] - 0.002}
    line = next(x for x in format_summary({**summary, "ttft_parts": parts}).splitlines() if x.startswith("TTFT parts"))
    assert "API server 2" in line and "first chunk 0" in line


def test_rejections_are_named_by_kind_most_common_first():
    from records.metrics import REJECT_KINDS_SHOWN, add_reject_kinds, format_summary, rejected_reasons

    reasons = [f"prompt ({p} tokens) + max_tokens (247) = {p + 247} exceeds max_model_len (4096)" for p in
               (4000, 4631, 5102)] + ["needs 300 KV blocks; the pool has 256"] * 2 + ["x"] + ["y"] + [None]
    kinds = add_reject_kinds({}, reasons)
    top = rejected_reasons(kinds)
    assert len(top) == REJECT_KINDS_SHOWN and [r["count"] for r in top] == [3, 2, 1]
    assert top[0]["kind"] == "prompt (N tokens) + max_tokens (N) = N exceeds max_model_len (N)"
    assert top[0]["example"] == reasons[0] and top[1]["example"] == "needs 300 KV blocks; the pool has 256"
    assert sum(c for c, *_ in kinds.values()) == len(reasons)  # nothing lost, the reasonless counted too
    # a run's summary names them, and the CLI prints one line per kind
    done = make_done_request("a", 0.0, [1.0, 2.0])
    table = requests_table([done] + [make_rejected_request(f"r{i}", 0.5) for i in range(4)])
    s = summarize(table, steps_table([]), pooled_itls([done]))
    assert s["rejected_reasons"] == [{"kind": "prompt longer than scheduler.max_model_len", "count": 4,
                                      "example": "prompt longer than scheduler.max_model_len"}]
    lines = [line for line in format_summary(s).splitlines() if line.startswith("rejected")]
    assert lines == ["rejected       4: prompt longer than scheduler.max_model_len (and the like)"]
    assert summarize(requests_table([done]), steps_table([]), pooled_itls([done]))["rejected_reasons"] == []

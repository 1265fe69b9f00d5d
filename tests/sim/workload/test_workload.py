"""build_workload: open and closed loops, traces, classes, shared prefixes, max_model_len, seeds."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from policies import ConfigError
from sim.notes import outcome_notes
from sim.workload import WorkloadConfig, build_workload
from sim.workload.traces import write_trace_csv

ROOT = hash(("test", "root"))


def make_workload(max_model_len=4096, **overrides):
    return build_workload(WorkloadConfig(**overrides), max_model_len)


def block_hashes(tokens, block_size=16):
    """Chained hashes of the full blocks, as a prefix cache computes them."""
    out, parent = [], ROOT
    for i in range(len(tokens) // block_size):
        parent = hash((parent, tuple(tokens[i * block_size:(i + 1) * block_size])))
        out.append(parent)
    return out


def test_open_loop_requests_are_sorted_numbered_and_final():
    w = make_workload(rate=10.0, num_requests=200)
    reqs = w.start()
    assert [r.req_id for r in reqs] == list(range(200))
    assert all(a.arrival_time <= b.arrival_time for a, b in zip(reqs, reqs[1:]))
    assert all(r.prompt_token_ids is None for r in reqs)  # no sharing: no ids
    assert w.on_finish(reqs[0], 1.0) == []


def test_same_seed_same_workload_other_seed_different():
    cfg = dict(kind="gamma", rate=3.0, cv=2.0, num_requests=100, prompt_len={"kind": "lognormal", "median": 200},
               num_prefix_groups=3, prefix_len=64, users_per_group=2)
    key = lambda rs: [(r.arrival_time, r.num_prompt_tokens, r.max_tokens, list(r.prompt_token_ids)) for r in rs]  # noqa: E731
    assert key(make_workload(**cfg).start()) == key(make_workload(**cfg).start())
    assert key(make_workload(**cfg).start()) != key(make_workload(**cfg, seed=1).start())
    w = make_workload(**cfg)
    assert key(w.start()) == key(w.start())  # start() is repeatable


def test_closed_loop_keeps_num_users_outstanding():
    users, think = 4, 0.5
    w = make_workload(kind="closed_loop", num_users=users, think_time=think, num_requests=10)
    outstanding = w.start()
    assert len(outstanding) == users and all(r.arrival_time == 0.0 for r in outstanding)
    now, issued = 0.0, users
    while outstanding:
        done = outstanding.pop(0)
        now += 1.0
        follow = w.on_finish(done, now)
        for r in follow:
            assert r.arrival_time == now + think and r.tags["user"] == done.tags["user"]
        issued += len(follow)
        outstanding += follow
        assert len(outstanding) <= users
    assert issued == 10


def test_closed_loop_stops_at_duration():
    w = make_workload(kind="closed_loop", num_users=1, think_time=0.0, duration=3.0)
    r = w.start()[0]
    assert len(w.on_finish(r, 2.0)) == 1 and w.on_finish(r, 3.5) == []


def test_class_fractions_and_priorities():
    w = make_workload(rate=50.0, num_requests=4000, classes=[
        {"name": "chat", "priority": 0, "fraction": 0.7, "output_len": {"kind": "constant", "value": 7}},
        {"name": "batch", "priority": 2, "fraction": 0.3}])
    reqs = w.start()
    chat = [r for r in reqs if r.tags["class"] == "chat"]
    p, n = 0.7, len(reqs)
    assert len(chat) == pytest.approx(p * n, abs=4 * math.sqrt(n * p * (1 - p)))
    assert all(r.priority == 0 and r.max_tokens == 7 for r in chat)
    assert all(r.priority == 2 and r.max_tokens == 128 for r in reqs if r.tags["class"] == "batch")


def test_class_rates_are_independent_streams():
    w = make_workload(duration=200.0, classes=[{"name": "a", "rate": 2.0}, {"name": "b", "rate": 8.0}])
    reqs = w.start()
    for name, rate in (("a", 2.0), ("b", 8.0)):
        n = sum(r.tags["class"] == name for r in reqs)
        assert n == pytest.approx(rate * 200, abs=4 * math.sqrt(rate * 200))


def test_shared_prefix_blocks_match_for_the_shared_part_only():
    prefix = 64  # 4 full blocks of 16
    w = make_workload(rate=5.0, num_requests=60, num_prefix_groups=2, prefix_len=prefix, users_per_group=3,
                      prompt_len={"kind": "uniform", "low": 40, "high": 80})
    reqs = w.start()
    by_group = {}
    for r in reqs:
        assert r.num_prompt_tokens == len(r.prompt_token_ids) >= prefix + 40
        by_group.setdefault(r.tags["group"], []).append(block_hashes(r.prompt_token_ids))
    assert set(by_group) == {0, 1}
    for hashes in by_group.values():
        a, b = hashes[0], hashes[1]
        assert a[:4] == b[:4]  # the system prompt
        assert not set(a[4:]) & set(b[4:])  # each user's own text
    assert not set(by_group[0][0]) & set(by_group[1][0])  # groups share nothing


def test_mooncake_hash_ids_map_to_512_token_segments(tmp_path):
    lines = [dict(timestamp=0, input_length=1100, output_length=3, hash_ids=[0, 1, 2]),
             dict(timestamp=10, input_length=1030, output_length=3, hash_ids=[0, 1, 9]),
             dict(timestamp=20, input_length=700, output_length=3, hash_ids=[5, 6])]
    p = tmp_path / "mc.jsonl"
    p.write_text("\n".join(map(json.dumps, lines)))
    a, b, c = make_workload(trace=str(p)).start()
    ha, hb, hc = (block_hashes(r.prompt_token_ids) for r in (a, b, c))
    assert ha[:64] == hb[:64]  # hash ids 0, 1: 1024 tokens = 64 blocks of 16
    assert not set(ha[64:]) & set(hb[64:])
    assert not set(hc) & set(ha)


def test_trace_replay_rate_override_and_time_scale(tmp_path):
    t = np.cumsum(np.full(101, 0.5)) - 0.5  # 2 requests/s over 50 s
    p = write_trace_csv(tmp_path / "t.csv", t, np.full(101, 10), np.full(101, 5))
    recorded = [r.arrival_time for r in make_workload(trace=str(p)).start()]
    assert recorded[-1] == pytest.approx(50.0)
    assert make_workload(trace=str(p), time_scale=0.5).start()[-1].arrival_time == pytest.approx(25.0)
    assert make_workload(trace=str(p), rate=10.0).start()[-1].arrival_time == pytest.approx(10.0)
    assert len(make_workload(trace=str(p), num_requests=7).start()) == 7
    assert len(make_workload(trace=str(p), duration=10.0).start()) == 20


def test_a_trace_shorter_than_the_workload_is_replayed_after_itself(tmp_path):
    """num_requests (or a duration) beyond the file's rows plays the trace again, each pass one mean
    gap after the last, lengths row i mod n: a sweep's held window at a high rate keeps its span."""
    p = write_trace_csv(tmp_path / "t.csv", [0.0, 1.0, 2.0], [11, 22, 33], [1, 2, 3])
    w = make_workload(trace=str(p), num_requests=7)
    reqs = w.start()
    assert [r.arrival_time for r in reqs] == pytest.approx([0, 1, 2, 3, 4, 5, 6])
    assert [r.num_prompt_tokens for r in reqs] == [11, 22, 33, 11, 22, 33, 11] and w.num_passes == 3
    assert len(make_workload(trace=str(p), duration=7.5).start()) == 8  # arrivals 0..7
    single = make_workload(trace=str(p), num_requests=3)
    assert len(single.start()) == 3 and single.num_passes == 1
    assert "replayed 3 times over" in " ".join(outcome_notes(w))


def test_poisson_arrivals_with_trace_lengths(tmp_path):
    p = write_trace_csv(tmp_path / "t.csv", [0, 1, 2], [11, 22, 33], [1, 2, 3])
    reqs = make_workload(kind="poisson", rate=100.0, num_requests=7, trace=str(p)).start()
    assert [r.num_prompt_tokens for r in reqs] == [11, 22, 33, 11, 22, 33, 11]
    assert reqs[-1].arrival_time < 1.0


def test_max_model_len_clip_filter_keep():
    lengths = dict(prompt_len={"kind": "uniform", "low": 1, "high": 200}, output_len={"kind": "constant", "value": 50})
    base = make_workload(max_model_len=None, rate=10.0, num_requests=500, **lengths).start()
    too_long = sum(r.num_prompt_tokens + r.max_tokens > 150 for r in base)
    clip = make_workload(max_model_len=150, rate=10.0, num_requests=500, **lengths)
    reqs = clip.start()
    assert clip.num_clipped == too_long > 0 and len(reqs) == 500
    assert all(r.num_prompt_tokens + r.max_tokens <= 150 for r in reqs)
    filt = make_workload(max_model_len=150, rate=10.0, num_requests=500, too_long="filter", **lengths)
    assert len(filt.start()) == 500 - too_long and filt.num_filtered == too_long
    keep = make_workload(max_model_len=150, rate=10.0, num_requests=500, too_long="keep", **lengths)
    assert sum(r.num_prompt_tokens + r.max_tokens > 150 for r in keep.start()) == too_long


def test_clipping_a_shared_prefix_prompt_keeps_ids_consistent():
    w = make_workload(max_model_len=100, rate=1.0, num_requests=5, num_prefix_groups=1, prefix_len=96)
    for r in w.start():
        assert len(r.prompt_token_ids) == r.num_prompt_tokens == 99 and r.max_tokens == 1


def test_real_azure_conversation_with_poisson_arrivals(shared_data):
    path = shared_data / "traces/azure-llm-2023/data/AzureLLMInferenceTrace_conv.csv"
    w = make_workload(kind="poisson", rate=20.0, num_requests=10_000, trace=str(path))
    reqs = w.start()
    assert len(reqs) == 10_000 and all(r.num_prompt_tokens + r.max_tokens <= 4096 for r in reqs)
    assert reqs[-1].arrival_time == pytest.approx(500.0, rel=0.05)


@pytest.mark.parametrize("kw, match", [
    (dict(rate=-1.0), r"^workload\.rate"), (dict(kind="staged"), r"^workload\.stages"),
    (dict(kind="trace"), r"^workload\.trace: required"), (dict(trace="/no/such.csv"), r"^workload\.trace: no such file"),
    (dict(classes=[{"name": "a", "fraction": 0.5}]), r"^workload\.classes: fractions"),
    (dict(classes=[{"name": "a", "fraction": 0.5, "rate": 1.0}]), r"^workload\.classes\.a\.fraction"),
    (dict(num_prefix_groups=2), r"^workload\.prefix_len"), (dict(stages=[[1.0, -5]]), r"^workload\.stages\[0\]\.duration"),
    (dict(prompt_len={"kind": "constant", "value": 1, "mode": 3}), r"^workload\.prompt_len\.mode: unknown key"),
])
def test_config_errors_name_the_field(kw, match):
    with pytest.raises(ConfigError, match=match):
        WorkloadConfig(**kw)


@pytest.mark.parametrize("kw, match", [
    (dict(stages=5), r"^workload\.stages: expected a list of \[rate, duration\] pairs"),
    (dict(kind="staged", stages="ab"), r"^workload\.stages: expected a list"),
    (dict(classes="foo"), r"^workload\.classes: expected a list of tables, e\.g\. \[\{ name = "),
    (dict(classes={"name": "a"}), r"^workload\.classes: expected a list of tables"),  # a [workload.classes] table
    (dict(rate=None, classes="foo"), r"^workload\.classes: expected a list"),  # read before the rate's default
    (dict(rate=float("nan")), r"^workload\.rate: expected a number, got nan$"),
    (dict(think_time=float("nan")), r"^workload\.think_time: expected a number"),
    (dict(stages=[[float("inf"), 60]]), r"^workload\.stages\[0\]\.rate: expected a finite number"),
])
def test_config_errors_name_the_field_and_the_shape_expected(kw, match):
    """Iterating a number or a string here said "'int' object is not iterable" or "got 'f'"."""
    with pytest.raises(ConfigError, match=match):
        WorkloadConfig(**kw)


@pytest.mark.parametrize("kw, match", [
    (dict(num_requests=10**20), r"^workload\.num_requests: must be <= 100,000,000"),
    (dict(kind="closed_loop", num_users=10**12), r"^workload\.num_users: must be <= 100,000,000"),
    (dict(rate=1e300, duration=600.0), r"^workload\.duration: 600 s at 1e\+300 requests/s .*or set "
                                       r"workload\.num_requests$"),
    (dict(kind="staged", stages=[[1.0, 60], [1e9, 1000]], num_requests=10),
     r"^workload\.stages\[1\]: 1000 s at 1e\+09 requests/s"),  # stages are drawn whole, then cut
])
def test_a_workload_too_large_to_draw_is_refused_naming_the_field(kw, match):
    """Not numpy's "Maximum allowed dimension exceeded" (or an allocation that never ends)."""
    with pytest.raises(ConfigError, match=match):
        WorkloadConfig(**kw)


def test_malformed_trace_errors_at_build_with_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("arrival_time,prompt_tokens,output_tokens\n0,1,1\n0.5,1\n")
    with pytest.raises(ConfigError, match=r"^workload\.trace: .*bad\.csv:3"):
        make_workload(trace=str(p))


def test_closed_loop_start_is_repeatable_and_counts_reset():
    w = make_workload(max_model_len=300, kind="closed_loop", num_users=5, num_requests=50,
                      prompt_len={"kind": "uniform", "low": 100, "high": 400})
    first = [(r.num_prompt_tokens, r.max_tokens) for r in w.start()]
    clipped = w.num_clipped
    assert first == [(r.num_prompt_tokens, r.max_tokens) for r in w.start()]
    assert w.num_clipped == clipped > 0

"""`chunked` (Sarathi / vLLM v1): decode-first, budget-limited chunks, preemption on OOM."""
from __future__ import annotations

import pytest
from policy_factories import make_requests, make_scheduler, step

from policies import ConfigError, FinishReason, Request, RequestState, SchedulerConfig


def _warm_decodes(sched, n, prompt=16, max_tokens=200):
    """Bring `n` requests to steady decode (one token each step)."""
    for r in make_requests(n, prompt=prompt, max_tokens=max_tokens):
        sched.add_request(r, 0.0)
    now = 0.0
    while any(r.state is not RequestState.RUNNING_GEN for r in sched.running) or sched.num_waiting:
        step(sched, now)
        now += 0.01
    return now


def test_2048_prompt_under_512_budget_with_48_decodes_splits_464x4_then_192():
    sched = make_scheduler(max_num_batched_tokens=512, max_num_seqs=64, max_model_len=4096,
                           num_gpu_blocks=4096, block_size=16)
    now = _warm_decodes(sched, 48)
    big = Request("big", now, 2048, 4)
    sched.add_request(big, now)
    chunks = []
    while big.num_output_tokens == 0:
        plan, _ = step(sched, now)
        now += 0.01
        assert plan.num_decode_tokens == 48
        assert plan.num_tokens <= 512
        chunks.append(plan.num_scheduled_tokens["big"])
    assert chunks == [464, 464, 464, 464, 192]


def test_decodes_come_first_then_partial_prefills_then_new():
    sched = make_scheduler(max_num_batched_tokens=20, max_num_seqs=8, num_gpu_blocks=512)
    now = _warm_decodes(sched, 2, prompt=4)
    long1 = Request("long1", now, 40, 2)
    sched.add_request(long1, now)
    plan, _ = step(sched, now)  # 2 decodes + 18 of long1
    assert [s.num_tokens for s in plan.seqs] == [1, 1, 18]
    newer = Request("new", now, 10, 2)
    sched.add_request(newer, now)
    plan, _ = step(sched, now)
    ids = [s.req_id for s in plan.seqs]
    assert ids[:2] == [0, 1] and ids[2] == "long1"  # running decodes, then the partial prefill
    assert plan.num_scheduled_tokens["long1"] == 18 and "new" not in plan.num_scheduled_tokens
    plan, _ = step(sched, now)  # long1 needs 4 more; the new one gets the 14 left
    assert plan.num_scheduled_tokens == {0: 1, 1: 1, "long1": 4, "new": 10}


def test_long_prefill_token_threshold_clamps_each_chunk():
    sched = make_scheduler(max_num_batched_tokens=64, long_prefill_token_threshold=16, num_gpu_blocks=512)
    a, b = make_requests(2, prompt=40, max_tokens=2)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    plan, _ = step(sched)
    assert plan.num_scheduled_tokens == {0: 16, 1: 16}


def test_partial_chunks_do_not_sample_and_the_last_one_does():
    sched = make_scheduler(max_num_batched_tokens=16, num_gpu_blocks=512)
    (r,) = make_requests(1, prompt=40, max_tokens=3)
    sched.add_request(r, 0.0)
    samples = []
    now = 0.0
    while not r.is_finished:
        plan, _ = step(sched, now)
        now += 0.01
        samples.append((plan.seqs[0].num_computed_tokens, plan.seqs[0].num_tokens, plan.seqs[0].samples))
    assert samples == [(0, 16, False), (16, 16, False), (32, 8, True), (40, 1, True), (41, 1, True)]
    assert r.num_output_tokens == 3 and r.first_token_time is not None and r.finish_reason.value == "length"


def test_oom_preempts_the_newest_running_request_by_recompute():
    # 6 blocks of 4 tokens; three requests of 8-token prompts take 6 blocks; the first decode overflows
    sched = make_scheduler(num_gpu_blocks=6, max_num_batched_tokens=64, block_size=4)
    reqs = make_requests(3, prompt=8, max_tokens=4)
    for r in reqs:
        sched.add_request(r, 0.0)
    step(sched)  # all three prefilled: 6 blocks used
    assert sched.block_manager.num_free_gpu_blocks == 0
    plan, _ = step(sched, 0.01)
    assert plan.preempted == (2,)  # the newest
    assert reqs[2].num_preemptions == 1 and reqs[2].num_recomputes == 1 and reqs[2].num_computed_tokens == 0
    assert reqs[2].state is RequestState.WAITING and sched.num_waiting == 1
    assert set(plan.num_scheduled_tokens) == {0, 1}
    sched.block_manager.check_invariants()


def _stream(sched, long_req, steps=60, per_step=2, priority=0):
    """Feed `per_step` short requests every step while `long_req` competes; returns steps until it finished."""
    sched.add_request(long_req, 0.0)
    now, k = 0.0, 0
    for k in range(steps):
        for j in range(per_step):
            sched.add_request(Request(f"s{k}-{j}", now, 8, 6, priority=priority), now)
        step(sched, now)
        now += 0.01
        if long_req.is_finished:
            return k + 1
    return None


def test_fcfs_serves_a_long_request_despite_a_stream_of_short_ones():
    sched = make_scheduler(max_num_batched_tokens=64, max_num_seqs=8, num_gpu_blocks=1024, max_model_len=512)
    long_req = Request("long", 0.0, 200, 10)
    took = _stream(sched, long_req)
    # first in line: its chunks come first every step (ceil(200 / 64) steps), then one token per step
    assert took is not None and took <= -(-200 // 64) + 10


def test_priority_can_starve_a_low_priority_request_where_fcfs_does_not():
    sched = make_scheduler(queue="priority", max_num_batched_tokens=64, max_num_seqs=8, num_gpu_blocks=1024,
                           max_model_len=512)
    low = Request("low", 0.0, 200, 10, priority=5)
    sched.add_request(Request("hog", 0.0, 8, 6, priority=0), 0.0)
    assert _stream(sched, low, steps=40, per_step=3, priority=0) is None  # preempted/overtaken all along


def test_vllm_keeps_block_0_as_its_null_block():
    # vLLM v1's BlockPool (0.8.3 on) takes block 0 off its free queue as the null block: of 4 blocks of
    # 4 tokens, 3 hold KV. A request whose KV needs all 4 is rejected under 'vllm', served under 'chunked'
    for policy, served in (("vllm", False), ("chunked", True)):
        sched = make_scheduler(policy=policy, num_gpu_blocks=4, block_size=4, max_model_len=64)
        fits, too_big = Request("fits", 0.0, 11, 2), Request("too_big", 0.0, 15, 2)  # 12 and 16 KV tokens
        assert sched.add_request(fits, 0.0) and sched.add_request(too_big, 0.0) is served
        tables = []
        while sched.has_unfinished():
            step(sched)
            tables += [r.block_table[:] for r in sched.running]
            sched.block_manager.check_invariants()
        assert fits.finish_reason is FinishReason.LENGTH
        if policy == "vllm":
            assert tables and not any(0 in t for t in tables)


def test_vllm_without_chunked_prefill_runs_decodes_with_whole_prompts():
    # vLLM v1 with enable_chunked_prefill false (0.11.1 on): decodes first, whole prompts join them in
    # the same step (not v0's prefill-only steps); a prompt that does not fit the budget left waits,
    # and the scheduler stops there (0.12+'s `break`): a short prompt behind it waits too
    sched = make_scheduler(policy="vllm", enable_chunked_prefill=False, max_num_batched_tokens=64, max_model_len=64)
    a = Request("a", 0.0, 8, 20)
    sched.add_request(a, 0.0)
    step(sched)
    sched.add_request(Request("b", 0.0, 40, 2), 0.0)
    sched.add_request(Request("c", 0.0, 4, 2), 0.0)
    plan, _ = step(sched, 0.01)
    assert plan.num_scheduled_tokens == {"a": 1, "b": 40, "c": 4}
    sched.add_request(Request("d", 0.0, 63, 1), 0.02)
    sched.add_request(Request("e", 0.0, 2, 1), 0.02)
    plan, _ = step(sched, 0.02)
    assert plan.num_scheduled_tokens == {"a": 1, "b": 1, "c": 1}  # 61 left: d (63) waits, e behind it
    plan, _ = step(sched, 0.03)
    assert plan.num_scheduled_tokens == {"a": 1, "d": 63}
    with pytest.raises(ConfigError, match="^scheduler.max_num_batched_tokens: 32 is below max_model_len = 64"):
        SchedulerConfig(policy="vllm", enable_chunked_prefill=False, max_num_batched_tokens=32, max_num_seqs=8,
                        max_model_len=64)
    with pytest.raises(ConfigError, match="^scheduler.enable_chunked_prefill: only policy 'vllm'"):
        SchedulerConfig(policy="chunked", enable_chunked_prefill=False)

"""Property-based tests: random workloads under every policy x queue x preemption (x prefix cache).

A fake executor drives the one loop with small memory (to force preemption and swapping) and
checks after every step: the block manager's invariants, the token budget and `max_num_seqs`;
at the end: every request ended finished or rejected, every block came back, each finished
request got exactly its output tokens, and under FCFS nobody was overtaken at admission.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_factories import make_scheduler, run

from policies import FinishReason, Request, RequestState

COMBOS = [
    (policy, queue, preemption, prefix)
    for policy in ("static", "continuous", "chunked", "vllm")
    for queue in ("fcfs", "priority")
    for preemption in ("recompute", "swap", "hybrid")
    for prefix in (False, True)
    if not (policy == "vllm" and preemption != "recompute")
    and not (policy == "static" and prefix)  # static batching ignores the prefix cache
]
PREFIXES = [list(range(1, 25)), list(range(100, 112))]
# examples per combination; raise it for a soak run: SERVESIM_HYPOTHESIS_EXAMPLES=500 pytest ...
MAX_EXAMPLES = int(os.environ.get("SERVESIM_HYPOTHESIS_EXAMPLES", "25"))


@st.composite
def workloads(draw):
    """(scheduler overrides, requests, stop_at) with small memory and budgets."""
    block_size = draw(st.sampled_from([2, 4, 8]))
    overrides = dict(
        block_size=block_size,
        num_gpu_blocks=draw(st.integers(48 // block_size, 160 // block_size)),
        num_cpu_blocks=draw(st.integers(0, 24)),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        max_num_batched_tokens=draw(st.integers(8, 80)),
        max_num_seqs=draw(st.integers(1, 6)),
        max_model_len=64,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 8])),
        hybrid_swap_threshold=draw(st.integers(0, 6)),
    )
    n = draw(st.integers(1, 10))
    reqs, stop_at = [], {}
    for i in range(n):
        prompt = draw(st.integers(1, 40))
        max_tokens = draw(st.integers(1, 24))
        ids = None
        share = draw(st.sampled_from([None, 0, 1]))
        if share is not None:
            ids = (PREFIXES[share] + [1000 + 100 * i + j for j in range(prompt)])[:prompt]
        stop = draw(st.one_of(st.none(), st.integers(1, max_tokens)))
        reqs.append(Request(i, draw(st.integers(0, 8)) * 0.01, prompt, max_tokens,
                            priority=draw(st.integers(0, 3)), prompt_token_ids=ids, ignore_eos=stop is None))
        if stop is not None:
            stop_at[i] = stop
    return overrides, reqs, stop_at


def check_step(sched, plan, cfg) -> None:
    sched.block_manager.check_invariants()
    live = [s for s in plan.seqs if not s.is_padding]
    budget = cfg["max_num_batched_tokens"]
    if cfg["policy"] in ("continuous", "static"):  # whole prompts: the budget is at least max_model_len
        budget = max(budget, cfg["max_model_len"])
    assert plan.num_tokens <= budget, "token budget exceeded"
    assert len(live) <= cfg["max_num_seqs"] and sched.num_running <= cfg["max_num_seqs"], "max_num_seqs exceeded"
    ids = [s.req_id for s in live]
    assert len(ids) == len(set(ids)), "a request scheduled twice in one step"
    for s in live:
        assert s.num_tokens >= 1
        assert s.num_computed_tokens + s.num_tokens <= s.request.num_prompt_tokens + s.request.max_tokens
    for r in sched.running:
        assert r.state in (RequestState.RUNNING_CTX, RequestState.RUNNING_GEN)
        assert len(r.block_table) * cfg["block_size"] >= r.num_computed_tokens
    assert sched.num_swapped == sum(1 for _ in sched.swapped)
    for r in sched.swapped:
        assert r.is_swapped and r.block_table == [] and r.state is RequestState.WAITING
    for pairs in (plan.swap_out_blocks, plan.swap_in_blocks):
        dst = [d for _, d in pairs]
        assert len(dst) == len(set(dst)), "two copies into one block"
    if not cfg["enable_prefix_caching"]:  # (two victims sharing a cached prefix each copy it out)
        src = [g for g, _ in plan.swap_out_blocks]
        assert len(src) == len(set(src)), "a GPU block swapped out twice"


class KVShadow:
    """What each GPU / CPU block holds, tagged (req_id, block index): applies each plan's copies
    (swap-in, then swap-out) and the forward pass's writes, then checks every request's tables.
    With prefix caching a full block may hold another request's tag when both requests' tokens
    agree up to its end (a prefix hit); a hit on a block nobody wrote is caught either way."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.gpu: dict[int, tuple] = {}
        self.cpu: dict[int, tuple] = {}
        self.writers: dict[int, Request] = {}

    def apply(self, plan) -> None:
        for c, g in plan.swap_in_blocks:
            self.gpu[g] = self.cpu[c]
        for g, c in plan.swap_out_blocks:
            assert g in self.gpu, f"GPU block {g} swapped out before anyone wrote it"
            self.cpu[c] = self.gpu[g]
        bs = self.block_size
        for s in plan.seqs:
            if s.is_padding:
                continue
            self.writers[s.req_id] = s.request
            table = s.request.block_table
            for i in range(s.num_computed_tokens // bs, (s.num_computed_tokens + s.num_tokens - 1) // bs + 1):
                self.gpu[table[i]] = (s.req_id, i)

    def _holds(self, tag, r: Request, i: int) -> bool:
        """Does a block tagged `tag` hold block `i` of `r`'s KV?"""
        if tag == (r.req_id, i):
            return True
        if tag is None or tag[1] != i or r.prompt_token_ids is None:
            return False
        end = (i + 1) * self.block_size  # shared blocks are full ones
        other = self.writers[tag[0]]
        return r.num_computed_tokens >= end and other.token_ids(0, end) == r.token_ids(0, end)

    def check(self, sched) -> None:
        bs = self.block_size
        for r in sched.running:
            for i in range(-(-r.num_computed_tokens // bs)):
                assert self._holds(self.gpu.get(r.block_table[i]), r, i), f"GPU block {i} of {r.req_id} lost its KV"
        for r in sched.swapped:
            for i, c in enumerate(r.cpu_block_table):
                assert self._holds(self.cpu.get(c), r, i), f"CPU block {i} of {r.req_id} lost its KV"


@pytest.mark.parametrize("policy,queue,preemption,prefix", COMBOS)
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads())
def test_every_request_ends_and_every_block_comes_back(policy, queue, preemption, prefix, w):
    overrides, reqs, stop_at = w
    cfg = dict(overrides, policy=policy, queue=queue, preemption=preemption, enable_prefix_caching=prefix)
    sched = make_scheduler(**cfg)
    shadow = KVShadow(cfg["block_size"])

    def on_step(plan, now):
        check_step(sched, plan, cfg)
        shadow.check(sched)

    run(sched, reqs, stop_at=stop_at, max_steps=5000, on_step=on_step, on_plan=shadow.apply)

    bm = sched.block_manager
    assert not sched.has_unfinished() and sched.requests == {}
    assert bm.num_free_gpu_blocks == bm.num_gpu_blocks and bm.num_free_cpu_blocks == bm.num_cpu_blocks
    assert bm.holders == {} and bm.cpu_holders == {}
    bm.check_invariants()
    for r in reqs:
        assert r.state is RequestState.FINISHED, r
        assert r.block_table == [] and r.cpu_block_table == []
        if r.finish_reason is FinishReason.REJECTED:  # only ever at admission, never after running
            assert r.reject_reason and r.first_scheduled_time is None and r.num_output_tokens == 0
            continue
        want = stop_at.get(r.req_id, r.max_tokens)
        assert r.num_output_tokens == want, (r, want)
        stops_early = r.req_id in stop_at and want < r.max_tokens
        assert r.finish_reason is (FinishReason.STOP if stops_early else FinishReason.LENGTH)
        assert len(r.token_times) == want and r.token_times == sorted(r.token_times)
        assert r.first_token_time == r.token_times[0] and r.finish_time == r.token_times[-1]
        assert r.arrival_time <= r.first_scheduled_time < r.first_token_time
        assert r.num_preemptions == r.num_swaps + r.num_recomputes
        if preemption == "recompute":
            assert r.num_swaps == 0
    if queue == "fcfs":  # no overtaking at admission: first scheduled in arrival order
        served = sorted((r for r in reqs if r.first_scheduled_time is not None),
                        key=lambda r: (r.arrival_time, r.req_id))
        times = [r.first_scheduled_time for r in served]
        assert times == sorted(times), "a later arrival was admitted before an earlier one"

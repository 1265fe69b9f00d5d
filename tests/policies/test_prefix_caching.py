"""Prefix caching through the scheduler: hits skip the shared blocks' computation."""
from __future__ import annotations

import pytest
from policy_factories import make_requests, make_scheduler, run, step

from policies import Request

PREFIX = list(range(1, 33))  # 32 tokens = 8 blocks of 4


@pytest.mark.parametrize("policy", ["chunked", "vllm", "continuous"])
def test_hits_skip_the_shared_blocks(policy):
    sched = make_scheduler(policy=policy, enable_prefix_caching=True, max_num_batched_tokens=128, block_size=4)
    first, second = make_requests(2, prompt=[40, 45], max_tokens=3, prefix=PREFIX)
    sched.add_request(first, 0.0)
    run(sched, [])
    sched.add_request(second, 1.0)
    plan, _ = step(sched, 1.0)
    (seq,) = plan.seqs
    assert seq.num_computed_tokens == 32 and seq.num_tokens == 45 - 32
    assert second.num_cached_tokens == 32
    bm = sched.block_manager
    assert bm.num_prefix_hit_tokens == 32 and bm.num_prefix_queried_tokens == 40 + 45
    run(sched, [])
    assert second.num_output_tokens == 3


def test_no_hits_without_prefix_caching_or_token_ids():
    sched = make_scheduler(enable_prefix_caching=False, max_num_batched_tokens=128)
    a, b = make_requests(2, prompt=40, max_tokens=2, prefix=PREFIX)
    run(sched, [a])
    run(sched, [b])
    assert b.num_cached_tokens == 0
    on = make_scheduler(enable_prefix_caching=True, max_num_batched_tokens=128)
    run(on, [Request(0, 0.0, 40, 2)])
    run(on, [Request(1, 0.0, 40, 2)])  # no ids: content unknown, never shared
    assert on.block_manager.num_prefix_hit_tokens == 0


def test_concurrent_sharers_hold_one_copy_of_the_prefix():
    sched = make_scheduler(enable_prefix_caching=True, max_num_batched_tokens=64, block_size=4, max_num_seqs=8)
    reqs = make_requests(4, prompt=36, max_tokens=20, prefix=PREFIX)
    sched.add_request(reqs[0], 0.0)
    step(sched)  # the first request computes (and registers) the prefix
    for r in reqs[1:]:
        sched.add_request(r, 0.01)
    plan, _ = step(sched, 0.01)
    assert all(plan.num_scheduled_tokens[r.req_id] == 4 for r in reqs[1:])  # only the 4 unshared tokens
    shared = reqs[0].block_table[:8]
    assert all(r.block_table[:8] == shared for r in reqs)
    assert all(sched.block_manager.ref_counts[b] == 4 for b in shared)
    # 8 shared blocks + 1 own block each (36 tokens -> 9 blocks) + the first one's decode block (37 tokens)
    assert sched.block_manager.num_used_gpu_blocks == 8 + 4 + 1
    sched.block_manager.check_invariants()


def test_recompute_after_preemption_reuses_its_own_cached_blocks():
    sched = make_scheduler(enable_prefix_caching=True, num_gpu_blocks=24, block_size=4, max_num_batched_tokens=64)
    a, b = make_requests(2, prompt=40, max_tokens=20, prefix=list(range(1, 41)))  # identical 40-token prompts
    b.prompt_token_ids = list(range(500, 540))  # b shares nothing with a
    for r in (a, b):
        sched.add_request(r, 0.0)
    now = 0.0
    while b.num_preemptions == 0:
        step(sched, now)
        now += 0.01
    while True:
        plan, _ = step(sched, now)
        now += 0.01
        if 1 in plan.num_scheduled_tokens:
            break
    seq = next(s for s in plan.seqs if s.req_id == 1)
    assert seq.num_computed_tokens >= 40 - 4  # its prompt blocks were still cached: only the tail recomputes
    assert seq.num_computed_tokens % 4 == 0 and b.num_recomputes == 1


def test_a_chunk_preempted_before_it_ran_is_never_a_hit():
    """A running chunk's full blocks are registered when allocated; preempted in that same step
    (here by a higher-priority admission), nobody writes them, so a later lookup must miss them."""
    sched = make_scheduler(policy="chunked", queue="priority", enable_prefix_caching=True, block_size=4,
                           max_num_batched_tokens=12, max_num_seqs=1)
    a, c = make_requests(2, prompt=[16, 4], max_tokens=2, priority=[1, 0])
    a.prompt_token_ids = list(range(1, 17))
    sched.add_request(a, 0.0)
    step(sched, 0.0)  # a computes blocks 0-2
    sched.add_request(c, 0.01)
    plan, _ = step(sched, 0.01)  # a's last chunk registers block 3, then c takes its seat
    assert a.num_preemptions == 1 and a.req_id not in plan.num_scheduled_tokens
    again = Request(2, 0.02, 17, 1, prompt_token_ids=list(range(1, 18)))
    assert sched.block_manager.get_computed_blocks(again)[1] == 12  # blocks 0-2 only


def test_a_running_chunk_that_a_newcomer_shares_is_not_preempted_in_that_step():
    """A newcomer admitted after a running request's chunk may hit that chunk's blocks (their KV is
    written in the same forward pass); a higher-priority admission later in the step must then take
    another seat or wait, or the newcomer would read blocks nobody writes."""
    sched = make_scheduler(policy="chunked", queue="priority", enable_prefix_caching=True, block_size=4,
                           max_num_batched_tokens=12, max_num_seqs=2)
    a, b, c = make_requests(3, prompt=[16, 20, 4], max_tokens=2, priority=[2, 0, 1])
    a.prompt_token_ids = list(range(1, 17))
    b.prompt_token_ids = list(range(1, 17)) + [90, 91, 92, 93]
    sched.add_request(a, 0.0)
    step(sched, 0.0)  # a computes blocks 0-2
    sched.add_request(b, 0.01)
    sched.add_request(c, 0.01)
    plan, _ = step(sched, 0.01)  # a's last chunk registers block 3; b hits blocks 0-3; c finds no seat
    assert plan.num_scheduled_tokens == {a.req_id: 4, b.req_id: 4}
    assert b.num_cached_tokens == 16 and b.block_table[:4] == a.block_table[:4]
    assert a.num_preemptions == 0 and c.first_scheduled_time is None
    sched.block_manager.check_invariants()


def decisions(sched, requests) -> list:
    """What `sched` decides at each step as `run` drives it through `requests`: tokens per request and
    where each starts, preemptions, swaps and offload copies, blocks used, prefix-hit tokens so far."""
    out, bm = [], sched.block_manager

    def on_plan(plan):
        out.append((plan.num_scheduled_tokens, [s.num_computed_tokens for s in plan.seqs], plan.preempted,
                    plan.swapped_out, plan.swapped_in, len(plan.swap_out_blocks), len(plan.swap_in_blocks),
                    len(plan.offload_load_blocks), len(plan.offload_store_blocks), bm.num_used_gpu_blocks,
                    bm.num_prefix_hit_tokens))

    run(sched, requests, on_plan=on_plan)
    return out


@pytest.mark.parametrize("overrides", [dict(policy="vllm"), dict(policy="continuous", num_gpu_blocks=40),
                                       dict(policy="chunked", preemption="swap", num_cpu_blocks=64),
                                       dict(policy="vllm", num_offload_blocks=64)])
def test_a_count_only_request_decides_as_one_whose_tokens_no_other_shares(overrides):
    """A request without token ids (the simulator's) holds content no other request has. Under memory
    pressure it hits its own cached blocks when it comes back from a recompute, and its blocks fill
    the KV offload tier, as the engine's requests (whose ids nobody else shares) do: the same plans.
    Its blocks had been left out of the prefix cache, so a recompute redid all of it (and the engine
    did not: the first decision that differed in a lockstep replay of the two)."""
    def drive(with_ids: bool):
        reqs = make_requests(12, prompt=[20, 33, 9, 41, 17, 28, 12, 36, 25, 8, 30, 19],
                             max_tokens=[12, 5, 20, 9, 15, 7, 18, 4, 11, 16, 6, 13], spacing=0.01,
                             prefix=[] if with_ids else None)  # []: ids of each request's own
        sched = make_scheduler(**{**dict(enable_prefix_caching=True, num_gpu_blocks=20, block_size=4,
                                         max_num_batched_tokens=32, max_num_seqs=6), **overrides})
        return decisions(sched, reqs), reqs, sched.block_manager

    ours, reqs, bm = drive(with_ids=False)
    theirs, _, _ = drive(with_ids=True)
    assert ours == theirs
    assert sum(r.num_preemptions for r in reqs) > 0
    assert bm.num_prefix_hit_tokens > 0 or overrides.get("preemption") == "swap"  # self-hits after recomputes
    bm.check_invariants()

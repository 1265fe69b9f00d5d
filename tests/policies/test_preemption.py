"""Preemption: priority victims, swap and hybrid modes, swapped requests resuming first."""
from __future__ import annotations

import pytest
from policy_factories import make_requests, make_scheduler, run, step

from policies import Request, RequestState
from policies.block_manager import BlockManager
from policies.preemption import RECOMPUTE, SWAP, Preemptor


def _admit(sched, reqs, now=0.0):
    for r in reqs:
        sched.add_request(r, now)
    plan, _ = step(sched, now)
    return plan


@pytest.mark.parametrize("policy", ["chunked", "continuous"])
def test_priority_preempts_the_lowest_priority_newest(policy):
    sched = make_scheduler(policy=policy, queue="priority", max_num_seqs=3, max_num_batched_tokens=64)
    old_low, mid, new_low = (Request("old_low", 0.0, 4, 50, priority=2), Request("mid", 0.1, 4, 50, priority=1),
                             Request("new_low", 0.2, 4, 50, priority=2))
    _admit(sched, [old_low, mid, new_low])
    urgent = Request("urgent", 0.3, 4, 5, priority=0)
    sched.add_request(urgent, 0.3)
    plan, _ = step(sched, 0.3)
    assert plan.preempted == ("new_low",)
    assert "urgent" in plan.num_scheduled_tokens and new_low.state is RequestState.WAITING
    assert new_low.num_preemptions == 1 and old_low.num_preemptions == 0


def test_priority_does_not_preempt_equal_or_better_priorities():
    sched = make_scheduler(queue="priority", max_num_seqs=2)
    _admit(sched, [Request("a", 0.0, 4, 50, priority=1), Request("b", 0.1, 4, 50, priority=1)])
    sched.add_request(Request("c", 0.2, 4, 5, priority=1), 0.2)
    plan, _ = step(sched, 0.2)
    assert plan.preempted == () and "c" not in plan.num_scheduled_tokens


def test_vllm_policy_never_preempts_for_admission():
    sched = make_scheduler(policy="vllm", queue="priority", max_num_seqs=2)
    _admit(sched, [Request("a", 0.0, 4, 50, priority=5), Request("b", 0.1, 4, 50, priority=5)])
    sched.add_request(Request("c", 0.2, 4, 5, priority=0), 0.2)
    plan, _ = step(sched, 0.2)
    assert plan.preempted == () and "c" not in plan.num_scheduled_tokens


def test_priority_queue_orders_by_priority_then_arrival():
    sched = make_scheduler(queue="priority", max_num_seqs=1, max_num_batched_tokens=64)
    reqs = [Request("p2", 0.0, 4, 1, priority=2), Request("p0_late", 0.2, 4, 1, priority=0),
            Request("p0_early", 0.1, 4, 1, priority=0)]
    for r in reqs:
        sched.add_request(r, 0.3)
    order = []
    now = 0.3
    while sched.has_unfinished():
        plan, _ = step(sched, now)
        now += 0.01
        order += list(plan.num_scheduled_tokens)
    assert order == ["p0_early", "p0_late", "p2"]


@pytest.mark.parametrize("policy", ["vllm", "chunked", "continuous"])
def test_a_burst_at_one_priority_is_served_as_fcfs_serves_it(policy):
    # three requests at one instant, one priority level, memory for two: the preempted one goes back
    # ahead of the one that arrived after it (vLLM's arrival stamps never tie: the first submitted
    # sorts first), so the priority queue's steps are fcfs's, step for step
    def trace(queue):
        sched = make_scheduler(policy=policy, queue=queue, max_num_seqs=2, block_size=4, num_gpu_blocks=7,
                               enable_prefix_caching=False)
        plans = run(sched, make_requests(3, prompt=8, max_tokens=12))
        return [(dict(p.num_scheduled_tokens), p.preempted) for p in plans]

    fcfs = trace("fcfs")
    assert any(preempted for _, preempted in fcfs)  # the case needs a preemption
    assert trace("priority") == fcfs


def test_the_priority_victim_among_equal_keys_is_the_latest_arrival():
    # `first` came back from a preemption, so it runs after `second` although it arrived first
    sched = make_scheduler(queue="priority")
    first, second = Request("first", 0.0, 4, 4), Request("second", 0.0, 4, 4)
    for r in (first, second):
        sched.add_request(r, 0.0)
    assert Preemptor("recompute", "priority").pick_victim([second, first]) is second


def _oom_scheduler(preemption, threshold=64, cpu_blocks=16, policy="chunked"):
    """Two requests fill 4 blocks of 4 tokens; the first one to cross a block boundary overflows."""
    return make_scheduler(preemption=preemption, num_gpu_blocks=4, block_size=4, num_cpu_blocks=cpu_blocks,
                          hybrid_swap_threshold=threshold, max_num_batched_tokens=64, policy=policy)


def _run_until_preemption(sched, reqs):
    now = 0.0
    for r in reqs:
        sched.add_request(r, now)
    while True:
        plan, _ = step(sched, now)
        now += 0.01
        if plan.preempted or plan.swapped_out:
            return plan, now


def test_swap_moves_the_victims_blocks_and_it_resumes_before_new_admissions():
    # `continuous` (vLLM v0's _schedule_default) admits no prompt while anything is swapped
    sched = _oom_scheduler("swap", policy="continuous")
    a, b = make_requests(2, prompt=6, max_tokens=8)
    plan, now = _run_until_preemption(sched, [a, b])
    assert plan.swapped_out == (1,) and plan.preempted == ()
    assert len(plan.swap_out_blocks) == 2 and b.is_swapped and b.num_swaps == 1
    assert b.num_computed_tokens == b.num_tokens - 1  # its KV is kept (all but the last sampled token)
    assert sched.num_swapped == 1 and sched.block_manager.num_free_cpu_blocks == 14
    newcomer = Request("new", now, 2, 1)
    sched.add_request(newcomer, now)
    swapped_in_step = None
    while not b.is_finished:
        plan, _ = step(sched, now)
        now += 0.01
        if plan.swapped_in:
            swapped_in_step = now - 0.01
            assert plan.swapped_in == (1,) and len(plan.swap_in_blocks) == 2
            ids = [s.req_id for s in plan.seqs]
            assert "new" not in ids or ids.index(1) < ids.index("new")
    # swapped requests come back before any new admission
    assert swapped_in_step is not None and newcomer.first_scheduled_time >= swapped_in_step
    assert b.num_output_tokens == 8
    sched.block_manager.check_invariants()


@pytest.mark.parametrize("queue", ["fcfs", "priority"])
def test_a_swapped_request_that_cannot_return_does_not_hold_up_the_waiting_queue(queue):
    # vLLM v0's chunked-prefill scheduler admits new prefills whatever is left swapped: `urgent`
    # fits beside `a` at once, while `low` needs more blocks than are free until `a` ends
    sched = make_scheduler(queue=queue, preemption="swap", block_size=4, num_gpu_blocks=10, num_cpu_blocks=32)
    a, low = Request("a", 0.0, 8, 24, priority=0), Request("low", 0.0, 8, 24, priority=5)
    plan, now = _run_until_preemption(sched, [a, low])
    assert plan.swapped_out == ("low",)
    urgent = Request("urgent", now, 4, 2, priority=0)
    sched.add_request(urgent, now)
    plan, _ = step(sched, now)
    assert "urgent" in plan.num_scheduled_tokens
    assert low.is_swapped and not a.is_finished  # the case: `low` could not come back in this step


def test_swap_falls_back_to_recompute_without_cpu_space():
    sched = _oom_scheduler("swap", cpu_blocks=1)
    a, b = make_requests(2, prompt=6, max_tokens=8)
    plan, _ = _run_until_preemption(sched, [a, b])
    assert plan.preempted == (1,) and plan.swapped_out == () and b.num_recomputes == 1


@pytest.mark.parametrize("threshold,expect", [(0, "swap"), (3, "swap"), (4, "recompute"), (50, "recompute")])
def test_hybrid_picks_swap_or_recompute_by_the_threshold(threshold, expect):
    sched = _oom_scheduler("hybrid", threshold=threshold)
    a, b = make_requests(2, prompt=6, max_tokens=8)
    plan, _ = _run_until_preemption(sched, [a, b])
    assert b.num_output_tokens == 3  # its 9th KV token needs a 5th block: OOM after 3 outputs
    if expect == "swap":
        assert plan.swapped_out == (1,) and b.num_swaps == 1
    else:
        assert plan.preempted == (1,) and b.num_recomputes == 1


def test_preemptor_unit():
    bm = BlockManager(8, 4, num_cpu_blocks=8)
    fresh, longer = Request(0, 0.0, 8, 10), Request(1, 0.0, 8, 10)
    fresh.num_computed_tokens = longer.num_computed_tokens = 8
    longer.output_token_ids = [0] * 5
    hybrid = Preemptor("hybrid", "fcfs", hybrid_swap_threshold=3)
    assert hybrid.mode_for(fresh, bm) == RECOMPUTE and hybrid.mode_for(longer, bm) == SWAP
    assert Preemptor("recompute", "fcfs").mode_for(longer, bm) == RECOMPUTE
    nothing = Request(2, 0.0, 8, 10)
    assert Preemptor("swap", "fcfs").mode_for(nothing, bm) == RECOMPUTE  # no KV to save
    running = [Request("a", 0.0, 4, 4, priority=3), Request("b", 1.0, 4, 4, priority=1), Request("c", 2.0, 4, 4, priority=3)]
    assert Preemptor("recompute", "fcfs").pick_victim(running).req_id == "c"
    assert Preemptor("recompute", "priority").pick_victim(running).req_id == "c"
    running.append(Request("d", 3.0, 4, 4, priority=0))
    assert Preemptor("recompute", "fcfs").pick_victim(running).req_id == "d"
    assert Preemptor("recompute", "priority").pick_victim(running).req_id == "c"


@pytest.mark.parametrize("abort", [False, True])
def test_a_preemption_interval_spans_from_the_preempting_step_to_the_resuming_one(abort):
    # priority admission preempts `low` at 0.3; it runs again at the first step after `urgent` ends,
    # unless it is aborted while it waits (the interval then ends at the abort)
    sched = make_scheduler(queue="priority", max_num_seqs=1)
    low = Request("low", 0.0, 4, 50, priority=2)
    _admit(sched, [low])
    assert low.preemption_intervals == [] and low.preempted_at is None
    urgent = Request("urgent", 0.3, 4, 2, priority=0)
    sched.add_request(urgent, 0.3)
    step(sched, 0.3)
    assert low.preempted_at == 0.3 and low.preemption_intervals == []  # open while it waits
    if abort:
        sched.abort_request("low", 0.35)
        assert low.preemption_intervals == [(0.3, 0.35)] and low.preempted_at is None
        return
    now = 0.31
    while not urgent.is_finished:
        step(sched, now)
        now += 0.01
    plan, _ = step(sched, now)
    assert "low" in plan.num_scheduled_tokens
    assert low.preemption_intervals == [(0.3, now)] and low.num_preemptions == 1

"""`continuous` (Orca / vLLM v0 without chunking): whole prompts, prefill-only steps first."""
from __future__ import annotations

from policy_factories import make_requests, make_scheduler, run, step

from policies import Request


def test_whole_prompts_and_prefill_only_steps():
    sched = make_scheduler(policy="continuous", max_num_batched_tokens=64, max_num_seqs=8)
    first = make_requests(2, prompt=10, max_tokens=6)
    for r in first:
        sched.add_request(r, 0.0)
    plan, _ = step(sched, 0.0)
    assert plan.num_scheduled_tokens == {0: 10, 1: 10}
    plan, _ = step(sched, 0.01)
    assert plan.num_decode_tokens == 2 and plan.num_prefill_tokens == 0
    late = Request("late", 0.02, 30, 2)
    sched.add_request(late, 0.02)
    plan, _ = step(sched, 0.02)
    assert plan.num_scheduled_tokens == {"late": 30}  # the running decodes wait one step (vLLM v0)
    plan, _ = step(sched, 0.03)
    assert plan.num_scheduled_tokens == {0: 1, 1: 1, "late": 1}


def test_a_prompt_that_does_not_fit_the_remaining_budget_waits_for_the_next_step():
    sched = make_scheduler(policy="continuous", max_num_batched_tokens=16, max_model_len=32, max_num_seqs=8)
    reqs = make_requests(3, prompt=[20, 20, 5], max_tokens=2)
    for r in reqs:
        sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_scheduled_tokens == {0: 20}  # FCFS head-of-line: the 5-token one does not jump ahead
    plan, _ = step(sched, 0.01)
    assert plan.num_scheduled_tokens == {1: 20, 2: 5}


def test_each_finished_request_leaves_and_a_waiting_one_joins_at_once():
    sched = make_scheduler(policy="continuous", max_num_seqs=2, max_num_batched_tokens=64)
    reqs = make_requests(3, prompt=4, max_tokens=[2, 5, 3])
    plans = run(sched, reqs)
    joined = next(i for i, p in enumerate(plans) if 2 in p.num_scheduled_tokens)
    assert reqs[0].token_times[-1] == reqs[2].first_scheduled_time  # the seat is reused the next step
    assert joined == 2  # prefill, decode (req 0 finishes), then req 2's prefill

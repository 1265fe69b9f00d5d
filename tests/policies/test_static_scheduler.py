"""`static`: batches form only when idle, run to their longest member, and padding is explicit."""
from __future__ import annotations

import pytest
from policy_factories import make_requests, make_scheduler, run, step

from policies import Request


def test_static_admits_nothing_while_a_batch_runs():
    sched = make_scheduler(policy="static", max_num_seqs=4, max_num_batched_tokens=128)
    first = make_requests(2, prompt=8, max_tokens=[3, 6])
    for r in first:
        sched.add_request(r, 0.0)
    plan, _ = step(sched, 0.0)
    late = Request("late", 0.01, 4, 2)
    sched.add_request(late, 0.01)
    now = 0.01
    while not all(r.is_finished for r in first):
        plan, _ = step(sched, now)
        now += 0.01
        assert "late" not in plan.num_scheduled_tokens
        assert late.first_scheduled_time is None
    plan, _ = step(sched, now)  # idle now: the next batch forms
    assert plan.num_scheduled_tokens == {"late": 4}


@pytest.mark.parametrize("prompts,max_tokens", [([4, 10, 7], [2, 5, 1]), ([6, 6], [3, 3]), ([1, 20, 3, 9], [7, 2, 4, 1])])
def test_padding_matches_the_padded_batch_arithmetic(prompts, max_tokens):
    n = len(prompts)
    sched = make_scheduler(policy="static", max_num_seqs=n, max_num_batched_tokens=n * max(prompts))
    reqs = make_requests(n, prompt=prompts, max_tokens=max_tokens)
    plans = run(sched, reqs)
    longest, most = max(prompts), max(max_tokens)
    # prefill pads every prompt to the longest; each step after a member finishes pads its slot
    expect_padding = sum(longest - p for p in prompts) + sum(most - g for g in max_tokens)
    assert sum(p.num_padding_tokens for p in plans) == expect_padding
    assert len(plans) == most  # the batch runs until its longest member finishes
    assert all(len({s.req_id for s in p.seqs}) == n for p in plans)  # every slot is computed every step
    assert [r.num_output_tokens for r in reqs] == max_tokens
    pad = [s for s in plans[-1].seqs if s.is_padding]
    assert all(s.num_tokens == 1 and s.num_computed_tokens == longest + most - 2 for s in pad)


def test_batch_size_and_memory_limit_the_batch():
    sched = make_scheduler(policy="static", max_num_seqs=8, static_max_batch_size=3, max_num_batched_tokens=256)
    for r in make_requests(5, prompt=8, max_tokens=2):
        sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_seqs == 3
    # memory: 10 blocks of 4 tokens; each request needs ceil((8 + 8 - 1) / 4) = 4 blocks -> 2 fit
    sched = make_scheduler(policy="static", max_num_seqs=8, num_gpu_blocks=10, block_size=4)
    for r in make_requests(5, prompt=8, max_tokens=8):
        sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_seqs == 2


def test_padded_prefill_respects_the_token_budget():
    sched = make_scheduler(policy="static", max_num_seqs=8, max_num_batched_tokens=30, max_model_len=40)
    for r in make_requests(4, prompt=[10, 10, 20, 5], max_tokens=2):
        sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_tokens <= 40 and plan.num_seqs == 2  # a third member would pad to 3 x 20 = 60


def test_every_decode_of_a_static_batch_reads_the_padded_context():
    # prompts of 4 and 12 tokens: the batch's KV is 2 rows of 12 + k; at decode step k (1, 2, ...) both
    # members attend over 12 + k keys, the short one's 8 pads included (as the finished one's padding does)
    sched = make_scheduler(policy="static", max_num_seqs=4, max_num_batched_tokens=128)
    short, long = make_requests(2, prompt=[4, 12], max_tokens=[5, 3])
    for r in (short, long):
        sched.add_request(r, 0.0)
    step(sched)  # the padded prefill
    for k in range(1, 5):
        plan, _ = step(sched, 0.01 * k)
        assert plan.totals.decode_context == 2 * (12 + k)
        assert len(plan.num_scheduled_tokens) == (2 if k <= 2 else 1)  # `long` ends after step 2

"""`continuous` (Orca / vLLM v0 without chunking): whole prompts, prefill-only steps first."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
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


# --- padded prompt batches (max_paddings, vLLM 0.2.2-0.3) ------------------------------------------

def padded_scheduler(**overrides):
    kw = dict(policy="continuous", max_num_batched_tokens=1024, max_model_len=512, max_num_seqs=16,
              num_gpu_blocks=4096, max_paddings=256)
    return make_scheduler(**{**kw, **overrides})


def prefill_batches(plans) -> list[dict]:
    return [p.num_scheduled_tokens for p in plans if p.num_prefill_tokens]


def test_a_batch_whose_padding_would_exceed_the_cap_is_split():
    sched = padded_scheduler()
    for r in make_requests(2, prompt=[300, 40], max_tokens=2):  # padding 260 > 256
        sched.add_request(r, 0.0)
    assert prefill_batches(run(sched, [])) == [{0: 300}, {1: 40}]
    sched = padded_scheduler()
    reqs = make_requests(2, prompt=[300, 60], max_tokens=2)  # padding 240 <= 256: one batch
    for r in reqs:
        sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_scheduled_tokens == {0: 300, 1: 60}
    assert plan.num_padding_tokens == 300 - 60
    pad = [s for s in plan.seqs if s.is_padding]
    assert [(s.req_id, s.num_tokens, s.num_computed_tokens, s.samples) for s in pad] == [(1, 240, 60, False)]


def test_the_padded_size_counts_against_the_budget():
    """3 x 100 padded = 300 tokens > a 250-token budget although the prompts hold only 210."""
    reqs = make_requests(3, prompt=[100, 10, 100], max_tokens=2)
    sched = padded_scheduler(max_num_batched_tokens=250, max_model_len=250, max_paddings=1000)
    for r in reqs:
        sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_scheduled_tokens == {0: 100, 1: 10}
    unpadded = make_scheduler(policy="continuous", max_num_batched_tokens=250, max_model_len=250, max_num_seqs=16)
    for r in make_requests(3, prompt=[100, 10, 100], max_tokens=2):
        unpadded.add_request(r, 0.0)
    plan, _ = step(unpadded)
    assert plan.num_scheduled_tokens == {0: 100, 1: 10, 2: 100} and plan.num_padding_tokens == 0


@settings(max_examples=40, deadline=None)
@given(prompts=st.lists(st.integers(1, 400), min_size=1, max_size=12), cap=st.integers(0, 600),
       budget=st.integers(400, 1200), spacing=st.sampled_from([0.0, 0.004, 0.02]))
def test_every_prefill_step_obeys_the_padded_rules_and_nothing_is_lost(prompts, cap, budget, spacing):
    sched = padded_scheduler(max_num_batched_tokens=budget, max_model_len=400 + 8, max_paddings=max(cap, 1))
    reqs = make_requests(len(prompts), prompt=prompts, max_tokens=3, spacing=spacing)
    plans = run(sched, reqs)
    for plan in plans:
        lens = [s.num_tokens for s in plan.seqs if not s.is_padding and not s.is_decode]
        if not lens:
            assert plan.num_padding_tokens == 0
            continue
        longest = max(lens)
        assert len(lens) * longest <= max(budget, 408)
        assert plan.num_padding_tokens == sum(longest - n for n in lens) <= max(cap, 1)
        assert plan.num_decode_tokens == 0  # still prefill-only steps
    assert all(r.num_output_tokens == 3 for r in reqs)


def test_with_no_binding_cap_the_schedule_is_the_unpadded_one():
    """A cap and budget that never bind leave the v0 schedule as it was; only padding is added."""
    prompts = [37, 5, 120, 64, 64, 3, 200, 11]
    big = dict(policy="continuous", max_num_batched_tokens=100_000, max_model_len=256, max_num_seqs=16,
               num_gpu_blocks=4096)
    a = run(make_scheduler(**big), make_requests(8, prompt=prompts, max_tokens=4, spacing=0.004))
    b = run(make_scheduler(**big, max_paddings=10**6), make_requests(8, prompt=prompts, max_tokens=4, spacing=0.004))
    assert [p.num_scheduled_tokens for p in a] == [p.num_scheduled_tokens for p in b]
    assert sum(p.num_padding_tokens for p in b) > 0 == sum(p.num_padding_tokens for p in a)


def test_max_paddings_is_refused_by_other_policies():
    import pytest

    from policies import ConfigError, SchedulerConfig

    with pytest.raises(ConfigError, match="^scheduler.max_paddings"):
        SchedulerConfig(policy="chunked", max_paddings=256)


def test_a_decode_with_no_free_block_preempts_the_newest_request_as_vllm_v0_does():
    # vLLM v0's can_append_slot(s): one free block per decode, whether or not its token needs one.
    # 4 blocks of 4: a (5 tokens) and b (6) take them all. Both next tokens fit their last blocks,
    # yet a's decode finds no free block: b (the newest) is preempted and recomputed
    sched = make_scheduler(policy="continuous", max_model_len=64, block_size=4, num_gpu_blocks=4)
    a, b = Request("a", 0.0, 5, 3), Request("b", 0.0, 6, 2)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    plans = [plan for plan in run(sched, [])]
    assert [p.num_scheduled_tokens for p in plans] == [{"a": 5, "b": 6}, {"a": 1}, {"b": 7}, {"a": 1}]
    assert plans[1].preempted == ("b",) and b.num_preemptions == 1

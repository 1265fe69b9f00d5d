"""Shared scheduler mechanics: admission rejection, abort, stop tokens, lifecycle, make_scheduler."""
from __future__ import annotations

import pytest
from policy_factories import make_requests, make_scheduler, run, step

from policies import CacheConfig, ConfigError, FinishReason, Request, RequestState, SchedulerConfig, StepResult
from policies.schedulers import make_scheduler as real_make_scheduler


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked", "vllm"])
def test_too_long_requests_are_rejected_at_once_and_never_block(policy):
    sched = make_scheduler(policy=policy, max_model_len=64, num_gpu_blocks=8, block_size=4)
    too_long = Request("long", 0.0, 60, 8)  # 68 > max_model_len
    too_big = Request("big", 0.0, 30, 30)  # 59 KV tokens need 15 blocks > 8
    ok = Request("ok", 0.0, 8, 2)
    for r in (too_long, too_big, ok):
        sched.add_request(r, 0.0)
    assert too_long.finish_reason is FinishReason.REJECTED and "max_model_len" in too_long.reject_reason
    assert too_big.finish_reason is FinishReason.REJECTED and "KV blocks" in too_big.reject_reason
    assert sched.num_waiting == 1
    run(sched, [])
    assert ok.finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize("policy", ["continuous", "static"])
def test_whole_prompt_policies_run_any_admissible_prompt_in_one_step(policy):
    sched = make_scheduler(policy=policy, max_num_batched_tokens=32, max_model_len=256)
    assert sched.token_budget == 256  # vLLM v0 needs budget >= max_model_len without chunking
    r = Request(0, 0.0, 250, 6)
    assert sched.add_request(r, 0.0)
    plan, _ = step(sched)
    assert plan.num_scheduled_tokens == {0: 250}
    chunked = make_scheduler(policy="chunked", max_num_batched_tokens=32, max_model_len=256)
    assert chunked.token_budget == 32


def test_abort_frees_blocks_at_once():
    sched = make_scheduler()
    a, b = make_requests(2, prompt=20, max_tokens=50)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    step(sched)
    used = sched.block_manager.num_used_gpu_blocks
    assert sched.abort_request(0, 1.0) is a
    assert a.finish_reason is FinishReason.ABORTED and a.block_table == []
    assert sched.block_manager.num_used_gpu_blocks < used and sched.num_running == 1
    assert sched.abort_request("nope", 1.0) is None
    sched.block_manager.check_invariants()


def test_stop_token_finishes_unless_ignore_eos():
    sched = make_scheduler()
    stops = Request("s", 0.0, 8, 10, ignore_eos=False)
    ignores = Request("i", 0.0, 8, 3, ignore_eos=True)
    sched.add_request(stops, 0.0)
    sched.add_request(ignores, 0.0)
    plan = sched.schedule(0.0)
    finished = sched.update(plan, StepResult(0.1, {"s": 7, "i": 9}, frozenset({"s", "i"})), 0.1)
    assert finished == [stops] and stops.finish_reason is FinishReason.STOP and stops.output_token_ids == [7]
    assert ignores.state is RequestState.RUNNING_GEN and ignores.output_token_ids == [9]
    assert stops.first_token_time == pytest.approx(0.1) and stops.first_scheduled_time == 0.0


def test_illegal_transitions_raise():
    from policies import IllegalTransition

    r = Request(0, 0.0, 4, 2)
    r.transition(RequestState.RUNNING_CTX)
    with pytest.raises(IllegalTransition):
        r.transition(RequestState.WAITING)  # running -> waiting must go through PREEMPTED
    r2 = Request(1, 0.0, 4, 2)
    r2.finish(FinishReason.ABORTED, 0.0)
    with pytest.raises(IllegalTransition):
        r2.transition(RequestState.RUNNING_CTX)


def test_duplicate_req_id_raises():
    sched = make_scheduler()
    sched.add_request(Request(0, 0.0, 4, 2), 0.0)
    with pytest.raises(ValueError, match="req_id"):
        sched.add_request(Request(0, 0.0, 4, 2), 0.0)


def test_make_scheduler_and_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="^scheduler.policy"):
        SchedulerConfig(policy="nope")
    with pytest.raises(ConfigError, match="^scheduler.preemption"):
        SchedulerConfig(policy="vllm", preemption="swap")
    sched = real_make_scheduler(SchedulerConfig(policy="vllm"), CacheConfig(num_gpu_blocks=64))
    assert sched.block_manager.enable_prefix_caching  # vllm's default
    off = real_make_scheduler(SchedulerConfig(policy="vllm"), CacheConfig(num_gpu_blocks=64, enable_prefix_caching=False))
    assert not off.block_manager.enable_prefix_caching
    assert not real_make_scheduler(SchedulerConfig(policy="chunked"), CacheConfig()).block_manager.enable_prefix_caching


def test_abort_a_swapped_request_returns_its_cpu_blocks():
    sched = make_scheduler(preemption="swap", num_gpu_blocks=4, block_size=4, num_cpu_blocks=8)
    a, b = make_requests(2, prompt=6, max_tokens=8)
    for r in (a, b):
        sched.add_request(r, 0.0)
    now = 0.0
    while not b.is_swapped:
        step(sched, now)
        now += 0.01
    assert sched.block_manager.num_free_cpu_blocks < 8
    sched.abort_request(1, now)
    assert sched.num_swapped == 0 and sched.block_manager.num_free_cpu_blocks == 8
    assert b.finish_reason is FinishReason.ABORTED
    sched.block_manager.check_invariants()


def test_abort_between_schedule_and_update_records_nothing():
    sched = make_scheduler()
    (r,) = make_requests(1, prompt=4, max_tokens=3)
    sched.add_request(r, 0.0)
    plan = sched.schedule(0.0)
    sched.abort_request(0, 0.005)
    assert sched.update(plan, StepResult(0.01), 0.01) == []
    assert r.num_output_tokens == 0 and r.finish_reason is FinishReason.ABORTED and not sched.has_unfinished()


def test_finish_request_ends_a_live_request_wherever_it_is():
    sched = make_scheduler(max_num_seqs=1)
    a, b = make_requests(2, prompt=20, max_tokens=50)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    step(sched)  # a runs, b waits (one seat)
    free = sched.block_manager.num_free_gpu_blocks
    assert sched.finish_request(0, FinishReason.LENGTH, 1.0) is a
    assert a.finish_reason is FinishReason.LENGTH and a.finish_time == 1.0 and a.block_table == []
    assert sched.num_running == 0 and sched.block_manager.num_free_gpu_blocks > free
    assert sched.finish_request(1, FinishReason.ABORTED, 1.0) is b and sched.num_waiting == 0
    assert sched.finish_request(0, FinishReason.LENGTH, 2.0) is None  # no longer live
    assert not sched.has_unfinished()
    sched.block_manager.check_invariants()


def test_skipped_step_ids_are_not_reused():
    sched = make_scheduler()
    sched.add_request(make_requests(1, prompt=8, max_tokens=20)[0], 0.0)
    first, _ = step(sched)
    assert sched.skip_step_ids(3) == first.step_id + 1
    assert step(sched, 0.1)[0].step_id == first.step_id + 4


@pytest.mark.parametrize("seed", range(8))
def test_decode_horizon_promises_plain_decode_steps_only(seed):
    """Each of the `decode_horizon()` steps (no arrival in between) schedules exactly every running
    request for one sampled token, admits nobody, and only the last one finishes requests; a step
    may preempt only when the free blocks ran out, which ends the promise."""
    import random

    rnd = random.Random(seed)
    policy = rnd.choice(["chunked", "vllm", "continuous"])
    sched = make_scheduler(policy=policy, num_gpu_blocks=rnd.choice([30, 256]), max_num_seqs=rnd.choice([2, 4, 8]),
                           queue=rnd.choice(["fcfs", "priority"]),
                           preemption="recompute" if policy == "vllm" else rnd.choice(["recompute", "swap"]),
                           num_cpu_blocks=64, enable_prefix_caching=rnd.random() < 0.5)
    n = 30
    reqs = make_requests(n, prompt=[rnd.randint(1, 40) for _ in range(n)],
                         max_tokens=[rnd.randint(1, 30) for _ in range(n)], spacing=0.05,
                         priority=[rnd.randint(0, 1) for _ in range(n)],
                         prefix=[7] * 9 if rnd.random() < 0.5 else None)
    pending, now, promised, checked = list(reqs), 0.0, 0, 0
    for _ in range(20_000):
        while pending and pending[0].arrival_time <= now:
            sched.add_request(pending.pop(0), now)
            promised = 0  # the promise holds only while nothing arrives
        if not sched.has_unfinished():
            if not pending:
                break
            now = pending[0].arrival_time
            continue
        if not promised:
            promised = sched.decode_horizon()
        running = [r.req_id for r in sched.running]
        plan, finished = step(sched, now)
        now += 0.01
        if promised:
            if plan.preempted or plan.swapped_out:
                promised = 0
                continue
            assert [s.req_id for s in plan.seqs] == running
            assert all(s.num_tokens == 1 and s.samples and s.is_decode for s in plan.seqs)
            promised -= 1
            assert not finished or promised == 0, "a request finished before the last promised step"
            checked += 1
    assert not sched.has_unfinished() and checked >= 10  # 11-252 promised steps per seed

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


@pytest.mark.parametrize("reserve", [False, True])
def test_reserve_full_isl_admits_a_prompt_only_while_all_its_blocks_are_free(reserve):
    # vLLM 0.19's scheduler_reserve_full_isl. 5 blocks of 16 (+1: v1's null block): `a` (40 tokens) takes 3. `b` (48 tokens)
    # has 24 tokens of budget left: its chunk's 2 blocks fit, its prompt's 3 do not. Admitted on its
    # chunk, it runs the pool dry and is preempted (recomputed) in the next step
    sched = make_scheduler(policy="vllm", max_num_batched_tokens=64, block_size=16, num_gpu_blocks=5 + 1,
                           enable_prefix_caching=False, reserve_full_isl=reserve)
    a, b = Request("a", 0.0, 40, 20), Request("b", 0.0, 48, 4)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    first, _ = step(sched)
    second, _ = step(sched, 0.01)
    if reserve:
        assert first.num_scheduled_tokens == {"a": 40} and not second.preempted and b.num_preemptions == 0
    else:
        assert first.num_scheduled_tokens == {"a": 40, "b": 24} and second.preempted == ("b",)
    run(sched, [])
    assert b.finish_reason is FinishReason.LENGTH


def test_reserve_full_isl_counts_held_prefix_hits_as_held():
    # 9 blocks of 4 (+1: v1's null block); `a` holds a 16-token shared prefix (4 blocks) and 5 tokens of its own (2 blocks once
    # it decodes). `b` (28 tokens, 7 blocks) hits the 4 prefix blocks: 3 more fit the 3 free ones
    prefix = list(range(1, 17))
    sched = make_scheduler(policy="vllm", max_num_batched_tokens=64, block_size=4, num_gpu_blocks=9 + 1,
                           enable_prefix_caching=True, reserve_full_isl=True)
    a, b = make_requests(2, prompt=[20, 28], max_tokens=2, prefix=prefix)
    sched.add_request(a, 0.0)
    step(sched)
    sched.add_request(b, 0.01)
    plan, _ = step(sched, 0.01)
    assert plan.num_scheduled_tokens == {0: 1, 1: 12} and b.num_cached_tokens == 16


def test_reserve_full_isl_is_refused_by_whole_prompt_policies():
    for policy in ("continuous", "static"):
        with pytest.raises(ConfigError, match="^scheduler.reserve_full_isl"):
            SchedulerConfig(policy=policy, reserve_full_isl=True)

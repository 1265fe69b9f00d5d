"""What a replay of steps without their plans asks of a scheduler (`policies.stretches`): the decode
horizon's promise, and step ids taken by skipped passes."""
from __future__ import annotations

import random

import pytest
from policy_factories import make_requests, make_scheduler, step

from policies import RequestState


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


def test_admit_head_admits_as_a_pass_would_or_says_the_blocks_are_short():
    sched = make_scheduler(policy="chunked", num_gpu_blocks=10, block_size=4, watermark=0.0)
    first, second = make_requests(2, prompt=20, max_tokens=4)
    for req in (first, second):
        sched.add_request(req, 0.0)
    free = sched.block_manager.num_free_gpu_blocks
    assert sched.admit_head(12, 0.5) is first
    assert first.state is RequestState.RUNNING_CTX and sched.running == [first] and list(sched.waiting) == [second]
    assert len(first.block_table) == 3 and sched.block_manager.num_free_gpu_blocks == free - 3
    assert first.num_computed_tokens == 0  # the caller advances it, as a plan's end does
    with pytest.raises(RuntimeError, match="not enough free KV blocks"):
        sched.admit_head(40, 0.5)  # 10 blocks for the second request: 7 are free
    assert list(sched.waiting) == [second]
    sched.block_manager.check_invariants()

"""Scheduler hot-path speed: steps/s and seq-steps/s with 64-256 running decodes, and requests/s
through the fake-executor loop (schedule + update only; no latency model, no SimPy).

    .venv/bin/python benchmarks/policies_speed.py [--steps 2000] [--prefix-caching]

Prints figures; not a pass/fail test.
"""
from __future__ import annotations

import argparse
import time

from policies import CacheConfig, Request, SchedulerConfig, StepResult
from policies.schedulers import make_scheduler


def decode_speed(policy: str, num_seqs: int, steps: int, prefix_caching: bool) -> tuple[float, float]:
    """(steps/s, seq-steps/s) of pure decode steps with `num_seqs` running requests."""
    sched = make_scheduler(
        SchedulerConfig(policy=policy, max_num_seqs=num_seqs, max_num_batched_tokens=max(8192, num_seqs),
                        max_model_len=1 << 20, preemption="recompute"),
        CacheConfig(block_size=16, num_gpu_blocks=1 << 18, enable_prefix_caching=prefix_caching))
    for i in range(num_seqs):
        ids = list(range(i * 1000, i * 1000 + 512)) if prefix_caching else None
        sched.add_request(Request(i, 0.0, 512, steps + 1000, prompt_token_ids=ids), 0.0)
    result = StepResult(0.01)
    now = 0.0
    while sched.waiting or any(r.num_output_tokens == 0 for r in sched.running):  # prefill everyone
        plan = sched.schedule(now)
        sched.update(plan, result, now)
    start = time.perf_counter()
    for _ in range(steps):
        plan = sched.schedule(now)
        now += 0.01
        sched.update(plan, result, now)
    elapsed = time.perf_counter() - start
    return steps / elapsed, steps * num_seqs / elapsed


def requests_per_second(policy: str, n: int = 2000, prompt: int = 256, output: int = 128) -> float:
    """Whole requests (arrive at once, prefill, decode, finish) through the loop per wall second."""
    sched = make_scheduler(SchedulerConfig(policy=policy, max_num_seqs=256, max_num_batched_tokens=8192,
                                           max_model_len=4096),
                           CacheConfig(block_size=16, num_gpu_blocks=16384))
    for i in range(n):
        sched.add_request(Request(i, 0.0, prompt, output), 0.0)
    result = StepResult(0.01)
    now = 0.0
    start = time.perf_counter()
    while sched.has_unfinished():
        plan = sched.schedule(now)
        now += 0.01
        sched.update(plan, result, now)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--prefix-caching", action="store_true")
    args = parser.parse_args()
    for policy in ("chunked", "continuous"):
        for num_seqs in (64, 128, 256):
            steps_s, seq_steps_s = decode_speed(policy, num_seqs, args.steps, args.prefix_caching)
            print(f"{policy:10s} {num_seqs:4d} decodes: {steps_s:9.0f} steps/s  {seq_steps_s:11.0f} seq-steps/s")
    for policy in ("chunked", "continuous", "static"):
        print(f"{policy:10s} 2000 requests (256 in / 128 out): {requests_per_second(policy):8.0f} requests/s")


if __name__ == "__main__":
    main()

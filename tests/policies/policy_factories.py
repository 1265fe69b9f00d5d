"""Factory helpers for the policies tests: schedulers, requests and a fake executor loop."""
from __future__ import annotations

from dataclasses import fields

from policies import CacheConfig, Request, SchedulerConfig, StepResult
from policies.schedulers import make_scheduler as _make_scheduler

_SCHED_FIELDS = {f.name for f in fields(SchedulerConfig)}
_CACHE_FIELDS = {f.name for f in fields(CacheConfig)}
SCHED_DEFAULTS = dict(policy="chunked", max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256)
CACHE_DEFAULTS = dict(block_size=4, num_gpu_blocks=256, num_cpu_blocks=0)


def make_scheduler(**overrides):
    """A scheduler from small defaults; keyword overrides go to SchedulerConfig or CacheConfig by name."""
    unknown = set(overrides) - _SCHED_FIELDS - _CACHE_FIELDS
    if unknown:
        raise TypeError(f"unknown fields {unknown}")
    sched = {**SCHED_DEFAULTS, **{k: v for k, v in overrides.items() if k in _SCHED_FIELDS}}
    cache = {**CACHE_DEFAULTS, **{k: v for k, v in overrides.items() if k in _CACHE_FIELDS}}
    return _make_scheduler(SchedulerConfig(**sched), CacheConfig(**cache))


def make_requests(n: int, prompt: int | list[int] = 8, max_tokens: int | list[int] = 4, arrival: float = 0.0,
                  priority: int | list[int] = 0, prefix: list[int] | None = None, start_id: int = 0,
                  spacing: float = 0.0,
                  **kwargs) -> list[Request]:
    """`n` requests; list arguments give per-request values. `prefix` makes token-id prompts that
    start with `prefix` and continue with request-unique ids (so only the prefix is shared)."""
    def pick(v, i):
        return v[i] if isinstance(v, list) else v

    reqs = []
    for i in range(n):
        p = pick(prompt, i)
        ids = None
        if prefix is not None:
            tail = [10_000 + 1000 * (start_id + i) + j for j in range(max(p - len(prefix), 0))]
            ids = (list(prefix) + tail)[:p]
        reqs.append(Request(start_id + i, arrival + spacing * i, p, pick(max_tokens, i), priority=pick(priority, i),
                            prompt_token_ids=ids, **kwargs))
    return reqs


def step(sched, now: float = 0.0, duration: float = 0.01, stopped=frozenset()):
    """One schedule + fake execute + update; returns (plan, finished)."""
    plan = sched.schedule(now)
    finished = sched.update(plan, StepResult(duration, None, frozenset(stopped)), now + duration)
    return plan, finished


def run(sched, requests: list[Request], duration: float = 0.01, max_steps: int = 100_000, stop_at: dict | None = None,
        on_step=None, on_plan=None) -> list:
    """Drive `sched` until everything finished, adding each request at its arrival time.

    `stop_at` maps req_id -> output count at which the executor reports a stop token. `on_plan(plan)` is
    called between schedule and update (the executor's view), `on_step(plan, now)` after every update.
    Returns the plans.
    """
    pending = sorted(requests, key=lambda r: r.arrival_time)
    now, i, plans = 0.0, 0, []
    for _ in range(max_steps):
        while i < len(pending) and pending[i].arrival_time <= now:
            sched.add_request(pending[i], now)
            i += 1
        if not sched.has_unfinished():
            if i == len(pending):
                return plans
            now = pending[i].arrival_time
            continue
        plan = sched.schedule(now)
        if plan.is_empty:
            raise AssertionError(f"empty plan with work left at t={now}: waiting={sched.num_waiting} "
                                 f"running={sched.num_running} swapped={sched.num_swapped}")
        stopped = frozenset()
        if stop_at:
            stopped = frozenset(s.req_id for s in plan.seqs if s.samples and not s.is_padding
                                and stop_at.get(s.req_id) == s.request.num_output_tokens + 1)
        if on_plan is not None:
            on_plan(plan)
        now += duration
        sched.update(plan, StepResult(duration, None, stopped), now)
        plans.append(plan)
        if on_step is not None:
            on_step(plan, now)
    raise AssertionError("did not finish within max_steps")

"""Factory helpers for the sim tests: hand-driven requests, a constant-time latency model, configs."""
from __future__ import annotations

from policies import Request


class ConstantLatency:
    """A latency model whose every step takes `seconds` (+ `per_token` per computed token)."""

    def __init__(self, seconds: float, per_token: float = 0.0) -> None:
        self.seconds = seconds
        self.per_token = per_token
        self.calls: list[float] = []

    def step_time(self, plan) -> float:
        t = self.seconds + self.per_token * plan.num_tokens
        self.calls.append(t)
        return t


def make_sched(policy: str = "chunked", num_gpu_blocks: int = 4096, block_size: int = 16, num_cpu_blocks: int = 0,
               **overrides):
    """A real scheduler from `policies` with small defaults (`overrides` go to SchedulerConfig)."""
    from policies import CacheConfig, SchedulerConfig
    from policies.schedulers import make_scheduler

    overrides.setdefault("max_model_len", 1 << 16)
    return make_scheduler(SchedulerConfig(policy=policy, **overrides),
                          CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks,
                                      num_cpu_blocks=num_cpu_blocks))


def make_requests(n: int, arrivals=None, prompt=16, max_tokens=4, start_id: int = 0) -> list[Request]:
    """`n` requests; `arrivals`, `prompt` and `max_tokens` may be scalars or sequences."""
    def pick(x, i):
        return x[i] if hasattr(x, "__getitem__") else x

    arrivals = [0.0] * n if arrivals is None else arrivals
    return [Request(start_id + i, float(pick(arrivals, i)), int(pick(prompt, i)), int(pick(max_tokens, i)))
            for i in range(n)]


def run_requests(scheduler, latency, requests, env=None):
    """Feed `requests` to one Replica at their arrival times and run to the end; returns the recorder."""
    return run_replica(scheduler, latency, requests, env=env)[0]


def run_replica(scheduler, latency, requests, env=None, **replica_kwargs):
    """`run_requests` with Replica keyword arguments (`request_timeout_s`, `fast_decode`, ...);
    returns (recorder, replica)."""
    import simpy

    from sim.replica import Replica
    from records.results import Recorder

    env = env or simpy.Environment()
    recorder = Recorder()
    replica = Replica(env, scheduler, latency, recorder, **replica_kwargs)

    def feed():
        for r in sorted(requests, key=lambda r: r.arrival_time):
            if r.arrival_time > env.now:
                yield env.timeout(r.arrival_time - env.now)
            replica.submit(r)

    env.process(feed())
    env.run()
    return recorder, replica


class LinearLatency:
    """step = overhead + per_token x tokens computed (prefill dominates, as on a GPU; decode cheap)."""

    def __init__(self, overhead: float = 0.005, per_token: float = 5e-5) -> None:
        self.overhead = overhead
        self.per_token = per_token

    def step_time(self, plan) -> float:
        return self.overhead + self.per_token * plan.num_tokens


def check_preemption_intervals(requests) -> None:
    """Each request's (preempted_at, resumed_at) intervals: one per preemption, in order, inside
    [arrival, finish], not overlapping, and no output token strictly inside one."""
    for req in requests:
        intervals = req.preemption_intervals
        assert len(intervals) == req.num_preemptions, req
        bounds = [req.arrival_time] + [t for interval in intervals for t in interval] + [req.finish_time]
        assert bounds == sorted(bounds), (req, intervals)
        assert not any(a < t < b for a, b in intervals for t in req.token_times), (req, intervals)

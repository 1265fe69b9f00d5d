"""`Replica`: one serving instance as a SimPy process running the one loop.

    plan = scheduler.schedule(now)
    duration = latency_model.step_time(plan)
    yield env.timeout(duration)
    finished = scheduler.update(plan, StepResult(duration), env.now)

Arrivals come from outside (a runner, or a router for several replicas in one environment) through
`submit(request)` at the request's arrival time; an idle replica sleeps until the next submit.
Every step is recorded as a `StepRecord`; finished requests go to the `on_finish` hooks, which is
where closed-loop workloads and routers react.
"""
from __future__ import annotations

from typing import Callable

import simpy

from policies import Request, StepResult
from sim.results import Recorder, record_step

FinishHook = Callable[[Request, float], None]


class Replica:
    """A SimPy process driving one `Scheduler` with a latency model as its executor.

    `latency_model` is anything with `step_time(plan) -> seconds`. `recorder` collects requests
    and steps (several replicas may share one). `on_finish` hooks are called as `hook(request, now)`
    for every request that ends, including those rejected at submit time.
    """

    def __init__(self, env: simpy.Environment, scheduler, latency_model, recorder: Recorder | None = None,
                 name: str = "0", on_finish: FinishHook | None = None) -> None:
        self.env = env
        self.scheduler = scheduler
        self.latency_model = latency_model
        self.recorder = recorder if recorder is not None else Recorder()
        self.name = str(name)
        self.on_finish: list[FinishHook] = [on_finish] if on_finish is not None else []
        self.num_submitted = 0
        self.num_finished = 0
        self.busy_time = 0.0  # seconds spent in steps (utilization = busy_time / elapsed)
        self._wakeup: simpy.Event | None = None  # set while idle, triggered by submit()
        self._live: dict = {}  # req_id -> submitted request not yet seen to end
        self.process = env.process(self._loop())

    # --- for routers ----------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Hand a request to the scheduler now (call it at the request's arrival time)."""
        now = self.env.now
        self.num_submitted += 1
        self.recorder.add_request(request, self.name)
        self.scheduler.add_request(request, now)
        if request.is_finished:  # rejected at once (too long, can never fit)
            self._finished(request, now)
            return
        self._live[request.req_id] = request
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def abort(self, req_id) -> Request | None:
        """Cancel a live request now (a client gone); it ends ABORTED and reaches the finish hooks."""
        request = self.scheduler.abort_request(req_id, self.env.now)
        if request is not None:
            self._finished(request, self.env.now)
        return request

    @property
    def num_outstanding(self) -> int:
        """Requests submitted and not yet ended."""
        return self.num_submitted - self.num_finished

    def num_outstanding_tokens(self) -> int:
        """Tokens still owed by every live request here: prompt left to compute plus outputs left.

        A router's least-work signal; O(live requests).
        """
        total = 0
        for req in self._live.values():
            total += max(req.num_tokens - req.num_computed_tokens, 0) + req.max_tokens - req.num_output_tokens
        return total

    @property
    def is_idle(self) -> bool:
        return self._wakeup is not None and not self._wakeup.triggered

    # --- the loop -------------------------------------------------------------------------------
    def _finished(self, request: Request, now: float) -> None:
        self._live.pop(request.req_id, None)
        self.num_finished += 1
        for hook in self.on_finish:
            hook(request, now)

    def _sweep(self, now: float) -> None:
        """Report requests that ended outside `update` (say, aborted on the scheduler directly).

        The scheduler's live-request count tells cheaply whether any did, so the scan is rare.
        """
        live = getattr(self.scheduler, "requests", None)
        if live is not None and len(live) == len(self._live):
            return
        for request in [r for r in self._live.values() if r.is_finished]:
            self._finished(request, now)

    def _loop(self):
        env, scheduler, step_time = self.env, self.scheduler, self.latency_model.step_time
        recorder, name = self.recorder, self.name
        while True:
            now = env.now
            plan = scheduler.schedule(now)
            self._sweep(now)
            if plan.is_empty:
                # nothing can run: sleep until the next submit (a scheduler that holds waiting
                # requests it cannot place gets another chance then; the runner reports any leftovers)
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            duration = float(step_time(plan))
            if not duration > 0.0:
                raise ValueError(f"latency model: step_time must be > 0 seconds, got {duration!r}")
            record = record_step(plan, now, duration, scheduler, name)
            yield env.timeout(duration)
            self.busy_time += duration
            finished = scheduler.update(plan, StepResult(duration), env.now)
            recorder.add_step(record)
            for request in finished:
                self._finished(request, env.now)
            self._sweep(env.now)

"""`Replica`: one serving instance as a SimPy process running the one loop.

    plan = scheduler.schedule(now)
    duration = latency_model.step_time(plan)
    yield env.timeout(duration)
    finished = scheduler.update(plan, StepResult(duration), env.now)

Arrivals come from outside (a runner, or a router for several replicas in one environment) through
`submit(request)` at the request's arrival time; an idle replica sleeps until the next submit.
Every step is recorded as a `StepRecord`; finished requests go to the `on_finish` hooks, which is
where closed-loop workloads and routers react.

Decode runs (the fast path): when the scheduler says the next steps are certainly all-decode steps
(`Scheduler.decode_run_horizon`: every running request decodes, nothing can be admitted, only the
last step may finish requests), the replica replays as many of them as end strictly before the next
event of the SimPy environment (an arrival, another replica's step, the time limit), in one go:
step times from the latency model's `decode_step_times` (or `step_time` on the exact plans when the
model declares `pure_step_time`), one `StepRecord` each, the scheduler's state advanced by
`Scheduler.advance_decode_run`, and one timeout to the last step's end. Nothing else can happen in
between, so the tables are identical to the step-by-step loop's (tests/sim/test_fast_path.py).
`Replica(fast_decode=False)` or the environment variable `SERVESIM_FAST_DECODE=0` turns it off.
"""
from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from typing import Callable

import simpy

from policies import BatchPlan, Request, ScheduledSeq, StepResult
from records.results import Recorder, StepRecord, record_step

FinishHook = Callable[[Request, float], None]


class Replica:
    """A SimPy process driving one `Scheduler` with a latency model as its executor.

    `latency_model` is anything with `step_time(plan) -> seconds`. `recorder` collects requests
    and steps (several replicas may share one). `on_finish` hooks are called as `hook(request, now)`
    for every request that ends, including those rejected at submit time.
    """

    def __init__(self, env: simpy.Environment, scheduler, latency_model, recorder: Recorder | None = None,
                 name: str = "0", on_finish: FinishHook | None = None, fast_decode: bool | None = None) -> None:
        self.env = env
        self.scheduler = scheduler
        self.latency_model = latency_model
        self.recorder = recorder if recorder is not None else Recorder()
        self.name = str(name)
        self.on_finish: list[FinishHook] = [on_finish] if on_finish is not None else []
        self.num_submitted = 0
        self.num_finished = 0
        self.busy_time = 0.0  # seconds spent in steps (utilization = busy_time / elapsed)
        self._wakeup: simpy.Event | None = None  # set while idle, triggered by wake() (submit calls it)
        self._live: dict = {}  # req_id -> submitted request not yet seen to end
        if fast_decode is None:
            fast_decode = os.environ.get("SERVESIM_FAST_DECODE", "1") not in ("0", "false", "no", "off")
        self._decode_time = decode_time_function(latency_model) if fast_decode else None
        if fast_decode and _declared(latency_model, "grouped_decodes") and getattr(type(scheduler), "decode_runs", False):
            scheduler.group_decodes = True  # plans give leading decodes as a group (BatchPlan.decodes)
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
        self.wake()

    def wake(self) -> None:
        """End an idle sleep now, so the loop asks its scheduler for a plan again.

        `submit` calls it; call it too after changing what the scheduler can do without a submit
        (say, blocks freed on its block manager from outside its loop). A no-op while busy.
        """
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
        decode_runs = self._decode_time is not None and hasattr(scheduler, "decode_run_horizon")
        live, own = getattr(scheduler, "requests", None), self._live
        add_step, timeout = recorder.add_step, env.timeout
        # what the first step after an idle wait costs on top (a latency model's `after_idle_s`,
        # e.g. a calibrated profile's: the engine's caches went cold while it slept)
        after_idle, was_idle = float(getattr(self.latency_model, "after_idle_s", 0.0) or 0.0), False
        # the KV offload tier: the copy time synchronous backends add to a step, and when a load lands
        offload_seconds = getattr(scheduler, "offload_seconds", None) or (lambda plan: 0.0)
        next_wakeup = getattr(scheduler, "next_wakeup", None)
        while True:
            now = env.now
            if decode_runs:
                num_steps, context_sum = scheduler.decode_run_horizon()
                if num_steps and (yield from self._decode_run(now, num_steps, context_sum)):
                    continue
            plan = scheduler.schedule(now)
            if live is None or len(live) != len(own):  # _sweep's own test, without the call
                self._sweep(now)
            if plan.is_empty or not (plan.has_compute or offload_seconds(plan)):
                # nothing can run: sleep until the next submit (a scheduler that holds waiting
                # requests it cannot place gets another chance then; the runner reports any leftovers),
                # or until a KV load from the offload tier lands; a plan of asynchronous offload copies
                # alone is issued at once (recorded as a step of no duration: its copies run beside)
                if not plan.is_empty:
                    add_step(record_step(plan, now, 0.0, scheduler, name))
                    scheduler.update(plan, StepResult(0.0), now)
                wake_at = next_wakeup() if next_wakeup is not None else None
                if wake_at is not None and wake_at <= now:
                    continue
                self._wakeup = env.event()
                if wake_at is not None:
                    yield self._wakeup | env.timeout(wake_at - now)
                else:
                    yield self._wakeup
                self._wakeup = None
                was_idle = env.now > now
                continue
            duration = float(step_time(plan))
            if plan.offload_load_blocks or plan.offload_store_blocks:
                duration += offload_seconds(plan)
            if not duration > 0.0:
                raise ValueError(f"latency model: step_time must be > 0 seconds, got {duration!r}")
            if was_idle:
                duration += after_idle
                was_idle = False
            record = record_step(plan, now, duration, scheduler, name)
            yield timeout(duration)
            self.busy_time += duration
            now = env.now
            finished = scheduler.update(plan, StepResult(duration), now)
            add_step(record)
            for request in finished:
                self._finished(request, now)
            if live is None or len(live) != len(own):
                self._sweep(now)

    def _decode_run(self, now: float, max_steps: int, context_sum: int):
        """Replay up to `max_steps` all-decode steps that end before the next event (or, when the first
        one does not, that one step with its update after the event); False to fall back on schedule()."""
        env, scheduler = self.env, self.scheduler
        next_event = env.peek()  # nothing else happens before it, so nothing can interfere
        n = len(scheduler.running)
        decode_time = self._decode_time
        durations, end_times = [], []
        t = now
        first, chunk = 0, 4  # step times are asked for in growing chunks: most runs are short
        while first < max_steps:
            count = min(chunk, max_steps - first)
            for duration in decode_time(scheduler, n, context_sum, first, count):
                duration = float(duration)
                if not duration > 0.0:
                    raise ValueError(f"latency model: step_time must be > 0 seconds, got {duration!r}")
                end = t + duration  # as SimPy adds a timeout's delay to its clock
                if not end < next_event:
                    break
                durations.append(duration)
                end_times.append(end)
                t = end
            else:
                first += count
                chunk *= 4
                continue
            break
        step_id, num_waiting = scheduler.step_id, scheduler.num_waiting
        if not end_times:  # the first step spans the next event: its update comes after that event
            started = scheduler.start_decode_step()
            if started is None:
                return False
            requests, used = started
            record = StepRecord(step_id, now, duration, 0, n, 0, n, 0, 0, 0, used,
                                used / scheduler.block_manager.num_gpu_blocks, num_waiting, n, 0, self.name)
            yield env.timeout(duration)
            self.busy_time += duration
            now = env.now
            finished = scheduler.finish_decode_step(requests, now)
            self.recorder.add_step(record)
            for request in finished:
                self._finished(request, now)
            self._sweep(now)
            return True
        num_steps, used, finished = scheduler.advance_decode_run(end_times)
        if not num_steps:
            return False
        end = end_times[num_steps - 1]
        delay = end - now
        if now + delay == end:
            yield env.timeout(delay)
        else:  # rounding: one timeout per step lands on exactly the clock the steps would
            for duration in durations[:num_steps]:
                yield env.timeout(duration)
        num_gpu_blocks = scheduler.block_manager.num_gpu_blocks
        name, start, busy = self.name, now, self.busy_time
        records = []
        for j in range(num_steps):
            duration = durations[j]
            u = used[j]
            records.append(StepRecord(step_id + j, start, duration, 0, n, 0, n, 0, 0, 0, u, u / num_gpu_blocks,
                                      num_waiting, n, 0, name))
            busy += duration
            start = end_times[j]
        self.busy_time = busy
        self.recorder.add_steps(records)
        for request in finished:
            self._finished(request, end)
        self._sweep(end)
        return True


def decode_time_function(latency_model):
    """`f(scheduler, num_seqs, context_sum, first, count) -> [seconds, ...]`: the times of steps
    `first .. first + count - 1` of a decode run whose step 0 has contexts summing to `context_sum`;
    or None when the model cannot time runs.

    The model's `decode_step_times` when its class has one (and it belongs with the class's
    `step_time`: a subclass overriding `step_time` alone does not qualify); else, for a model whose
    class declares `pure_step_time`, `step_time` of the exact plans those steps would have. See
    `sim.latency.base.LatencyModel`.
    """
    if _declared(latency_model, "decode_step_times"):
        times = latency_model.decode_step_times
        return lambda scheduler, num_seqs, context_sum, first, count: \
            times(num_seqs, context_sum + first * num_seqs, count)
    if getattr(type(latency_model), "pure_step_time", False):
        step_time = latency_model.step_time

        def plan_times(scheduler, num_seqs, context_sum, first, count):
            new, running, step_id = tuple.__new__, scheduler.running, scheduler.step_id
            return [step_time(BatchPlan(step_id=step_id + j, seqs=tuple(
                        new(ScheduledSeq, (r, 1, r.num_computed_tokens + j, True, False)) for r in running)))
                    for j in range(first, first + count)]
        return plan_times
    return None


def _declared(latency_model, name: str) -> bool:
    """True if the model's class has `name` (set, truthy) and the `step_time` it was written for.

    Looked up on the class, so a wrapper forwarding attributes to an inner model does not inherit
    it; and a subclass that overrides `step_time` alone does not qualify.
    """
    cls = type(latency_model)
    if not getattr(cls, name, None):
        return False
    owner = next(c for c in cls.__mro__ if name in c.__dict__)
    return getattr(cls, "step_time", None) is getattr(owner, "step_time", None)


@contextmanager
def paused_gc():
    """Pause Python's cyclic garbage collector for a simulation (restored afterwards).

    A run builds millions of small objects that all live until it ends (token lists, step records,
    result rows); the collector's full passes would walk them again and again (about a sixth of
    a run's time) to find next to nothing: the loop makes almost no reference cycles, so memory
    does not grow for want of it. Reference counting still frees everything else at once. The
    objects the run made stay in the youngest generation, so the first collection after the run
    (at the caller's next few hundred allocations) walks them once and frees the cycles the run
    leaves (its SimPy processes and what they hold): runs in a row hold at most two runs' garbage.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

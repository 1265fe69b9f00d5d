"""`Replica`: one serving instance as a SimPy process running the one loop.

    plan = scheduler.schedule(now)
    duration = latency_model.step_time(plan)
    yield env.timeout(duration)
    finished = scheduler.update(plan, StepResult(duration), env.now)

Arrivals come from outside (a runner, or a router for several replicas in one environment) through
`submit(request)` at the request's arrival time; an idle replica sleeps until the next submit.
Every step is recorded as a `StepRecord`; finished requests go to the `on_finish` hooks, which is
where closed-loop workloads and routers react. Stretches of steps the scheduler can foretell are
replayed in one go by the fast paths (`Replica`'s `fast_decode`), with the step-by-step tables.
A client's request timeout (`request_timeout_s`) gives each request a deadline the replica honours.
"""
from __future__ import annotations

import dataclasses
import gc
import itertools
import math
from contextlib import contextmanager
from heapq import heappop, heappush
from typing import Callable

import simpy

from policies import FinishReason, Request, StepResult
from records.results import Recorder, record_step
from sim.decode_replay import DecodeReplay
from sim.latency.base import NO_PREFILL_YET, after_prefill_step, host_split
from sim.mixed_replay import MixedReplay
from sim.outstanding import OutstandingTokens

FinishHook = Callable[[Request, float], None]


class Replica:
    """A SimPy process driving one `Scheduler` with a latency model as its executor.

    `latency_model` is anything with `step_time(plan) -> seconds`. `recorder` collects requests
    and steps (several replicas may share one). `on_finish` hooks are called as `hook(request, now)`
    for every request that ends, including those rejected at submit time. `fast_decode` (on by
    default) lets a latency model that can time decode stretches skip their plans: the same
    results, faster. When the scheduler says the next steps are certainly all-decode steps
    (`Scheduler.decode_horizon`) and the latency model can time them without their plans, the
    replica replays those that end before the environment's next event in one go
    (`sim.decode_replay`); likewise the mixed (prefill + decode) steps of a chunked scheduler, with
    a latency model that times a step from its sums (`sim.mixed_replay`). `fast_decode=False` runs
    every step through schedule().

    `async_scheduling` (vLLM's `--async-scheduling`): the engine plans step n+1 while step n runs,
    so a request submitted during step n is first seen by the plan of step n+2 (at once when no step
    runs), and the host work of a step (the latency model's `HOST_PARTS`: scheduling, input
    preparation, output processing) runs while the GPU runs the one before: a step that follows
    another at once takes max(device, host), the first after an idle wait device + host, as in vLLM's
    `EngineCore.step_with_batch_queue`. The fast paths are off with it.

    `request_timeout_s` (the client's timeout, `workload.request_timeout_s`; None: it waits): a
    request not finished by arrival + timeout is given up by its client, which disconnects; the
    engine aborts it (its blocks freed) at its first step boundary at or after that deadline, as
    vLLM handles an abort between steps, and one that finishes in the step spanning its deadline
    is lost to the client too. Either way it ends TIMED_OUT with `finish_time` = its deadline (what
    the client records). An idle replica wakes at the next deadline; the fast paths end their
    stretches before it (`next_deadline`), so the tables are the step-by-step loop's.
    """

    def __init__(self, env: simpy.Environment, scheduler, latency_model, recorder: Recorder | None = None,
                 name: str = "0", on_finish: FinishHook | None = None, fast_decode: bool = True,
                 async_scheduling: bool = False, request_timeout_s: float | None = None) -> None:
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
        # the live requests' owed tokens, kept from the first time a router asks (None before: a run
        # nobody routes pays nothing for it)
        self._load: OutstandingTokens | None = None
        self.async_scheduling = bool(async_scheduling)
        self._step_index = 0  # steps started so far (async scheduling: which step a submit fell in)
        self._in_step = False
        self._stepping = None  # the record of the step running now (`end_step`)
        self._deferred: list[tuple[Request, int]] = []  # async: (request, step it arrived during)
        self.request_timeout_s = None if request_timeout_s is None else float(request_timeout_s)
        self._deadlines: list[tuple[float, int, Request]] = []  # heap: (deadline, order, request) of live ones
        self._deadline_order = itertools.count()  # ties on a deadline never compare two Requests
        # a model whose decode steps after a prefill cost more (`after_prefill_cost`): each step's
        # place in the sequence counts (the decode replay is told it; the mixed replay is not used)
        self._after_prefill = getattr(latency_model, "after_prefill_cost", None) \
            if getattr(latency_model, "has_after_prefill", False) else None
        fast_decode = fast_decode and not self.async_scheduling
        self._replay = DecodeReplay.build(env, scheduler, latency_model, self.recorder, self.name) \
            if fast_decode else None
        # the mixed replay times its steps from sums alone: with those costs, step by step
        self._mixed = MixedReplay.build(env, scheduler, latency_model, self.recorder, self.name) \
            if fast_decode and self._after_prefill is None else None
        if self.request_timeout_s is not None:  # their stretches end before the next deadline
            for replay in (self._replay, self._mixed):
                if replay is not None:
                    replay.deadline = self.next_deadline
        self.process = env.process(self._loop())

    # --- for routers ----------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Hand a request to the scheduler now (call it at the request's arrival time)."""
        now = self.env.now
        self.num_submitted += 1
        self.recorder.add_request(request, self.name)
        if self.async_scheduling and self._in_step:  # the next step is planned already
            self._deferred.append((request, self._step_index))
            return
        self._admit(request, now)

    def _admit(self, request: Request, now: float) -> None:
        self.scheduler.add_request(request, now)
        if request.is_finished:  # rejected at once (too long, can never fit)
            self.request_ended(request, now)
            return
        self._live[request.req_id] = request
        if self._load is not None:
            self._load.add(request)
        if self.request_timeout_s is not None:
            heappush(self._deadlines, (request.arrival_time + self.request_timeout_s, next(self._deadline_order),
                                       request))
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
            self.request_ended(request, self.env.now)
        return request

    def next_deadline(self) -> float:
        """The earliest deadline of a live request here (inf: none, or no client timeout)."""
        heap = self._deadlines
        while heap and heap[0][2].is_finished:  # ended otherwise since: forgotten lazily
            heappop(heap)
        return heap[0][0] if heap else math.inf

    def _time_out(self, now: float) -> None:
        """Abort every live request whose deadline is <= `now` (at a step boundary): TIMED_OUT."""
        heap, abort = self._deadlines, self.scheduler.abort_request
        while heap and heap[0][0] <= now:
            deadline, _, request = heappop(heap)
            if request.is_finished or abort(request.req_id, now) is None:
                continue
            self._mark_timed_out(request, deadline)
            self.request_ended(request, now)

    def end_step(self, now: float) -> None:
        """The row, cut at `now`, of a step still running when the run stops (`sim.max_sim_time_s`)
        whose plan preempted or swapped: the requests count those already, so the steps table must
        too. Any other step in flight is left out, as the fast paths leave theirs (they never run a
        step that preempts), so that both paths keep giving the same table."""
        record, self._stepping = self._stepping, None
        if record is not None and (record.num_preempted or record.num_swap_out_blocks or record.num_swap_in_blocks):
            self.recorder.add_step(dataclasses.replace(record, duration=now - record.start))

    def _timed_out(self, request: Request) -> None:
        """A request that ended after its deadline (finished in the step spanning it, or aborted
        later): its client had given up at the deadline, so it is TIMED_OUT then."""
        deadline = request.arrival_time + self.request_timeout_s
        if request.finish_time > deadline and request.finish_reason not in (FinishReason.REJECTED,
                                                                            FinishReason.TIMED_OUT):
            self._mark_timed_out(request, deadline)

    def _mark_timed_out(self, request: Request, deadline: float) -> None:
        request.finish_reason = FinishReason.TIMED_OUT
        request.finish_time = deadline
        # the request ends at its deadline for the client: so does a preemption still open at the abort
        # (each stays counted, as num_preemptions counts it)
        request.preemption_intervals = [(min(a, deadline), min(b, deadline)) for a, b in request.preemption_intervals]
        request.reject_reason = f"client timeout: not finished {self.request_timeout_s:g} s after it was sent"

    def run_alone(self, until: float | None = None) -> None:
        """Say that nothing else in the environment reads or changes this replica's running requests
        between its steps (only arrivals submit to it; the runners of one replica, of replicas each
        alone in an environment, and the replicas of a fleet whose router reads none of them), until
        `until` (the run's time limit, None for none): the fast path may then carry its stretches
        through those events (`MixedReplay.carry_through`)."""
        if self._mixed is not None:
            self._mixed.carry_through(until, self)

    @property
    def num_outstanding(self) -> int:
        """Requests submitted and not yet ended."""
        return self.num_submitted - self.num_finished

    def num_outstanding_tokens(self) -> int:
        """Tokens still owed by every live request here: prompt left to compute plus outputs left.

        A router's least-work signal, read at every routing decision for every replica: O(1) from a
        running count (`sim.outstanding`) that the loop and the fast paths keep from the first call
        on (that call counts the live requests once), less the tokens a carried stretch has computed
        and not yet written (`MixedReplay.pending`), as the loop would have written them by now.
        """
        if self._load is None:
            drafts = bool(getattr(self.scheduler, "num_spec_tokens", 0))
            self._load = OutstandingTokens(self._live.values(), drafts)
            for replay in (self._replay, self._mixed):  # they tell it what their stretches change
                if replay is not None:
                    replay.load = self._load
        mixed = self._mixed
        return self._load.total if mixed is None else self._load.total - mixed.pending

    @property
    def is_idle(self) -> bool:
        return self._wakeup is not None and not self._wakeup.triggered

    # --- the loop -------------------------------------------------------------------------------
    def request_ended(self, request: Request, now: float) -> None:
        """Count a request that ended at `now` and run the on_finish hooks (the loop and the fast
        paths call it once per request, at the end of the step it ended in)."""
        if self.request_timeout_s is not None:
            self._timed_out(request)
        if self._live.pop(request.req_id, None) is not None and self._load is not None:
            self._load.remove(request)
        self.num_finished += 1
        for hook in self.on_finish:
            hook(request, now)

    def _replayed(self, durations: list, finished: list, now: float, sweep: bool) -> float:
        """Account a fast path's stretch: its steps' busy time (added one by one, as the loop adds
        them), the requests it ended at `now`, and a sweep when asked; returns `now`."""
        busy = self.busy_time
        for duration in durations:
            busy += duration
        self.busy_time = busy
        for request in finished:
            self.request_ended(request, now)
        if sweep:
            self._sweep(now)
        return now

    def _sweep(self, now: float) -> None:
        """Report requests that ended outside `update` (say, aborted on the scheduler directly).

        The scheduler's live-request count tells cheaply whether any did, so the scan is rare.
        """
        live = getattr(self.scheduler, "requests", None)
        if live is not None and len(live) == len(self._live):
            return
        for request in [r for r in self._live.values() if r.is_finished]:
            self.request_ended(request, now)

    def _loop(self):
        env, scheduler, step_time = self.env, self.scheduler, self.latency_model.step_time
        recorder, name = self.recorder, self.name
        replay, mixed = self._replay, self._mixed
        live, own = getattr(scheduler, "requests", None), self._live
        add_step, timeout = recorder.add_step, env.timeout
        # what the first step after an idle wait costs on top (a latency model's `after_idle_s`,
        # e.g. a calibrated profile's: the engine's caches went cold while it slept)
        after_idle, was_idle = float(getattr(self.latency_model, "after_idle_s", 0.0) or 0.0), False
        # ... or, from a model that says so, the cost after that long a wait (longer waits, colder caches)
        idle_cost, idle_for = getattr(self.latency_model, "after_idle_cost", None), 0.0
        # the KV offload tier: the copy time synchronous backends add to a step, and when a load lands
        offload_seconds = getattr(scheduler, "offload_seconds", None) or (lambda plan: 0.0)
        next_wakeup = getattr(scheduler, "next_wakeup", None)
        deadlines = self._deadlines  # the client's timeouts, checked at every step boundary
        overlap, pipelined = self.async_scheduling, False  # async: the last step's host work hid this one's
        after_prefill, since_prefill = self._after_prefill, NO_PREFILL_YET  # decode steps since a prefill
        # only drafts make an update() change min(num_computed_tokens, num_tokens) (`sim.outstanding`);
        # the fast paths tell the count what they change themselves
        drafts = bool(getattr(scheduler, "num_spec_tokens", 0))
        while True:
            now = env.now
            if deadlines and deadlines[0][0] <= now:
                self._time_out(now)
            if mixed is not None and mixed.carry and not was_idle:  # it runs decode stretches too
                replayed = yield from mixed.run(now)
                if replayed is not None:
                    now = self._replayed(*replayed, sweep=live is None or len(live) != len(own))
                    continue
            if replay is not None:
                num_steps = scheduler.decode_horizon()
                if num_steps:
                    replayed = yield from replay.run(now, num_steps, since_prefill, after_prefill)
                    if replayed is not None:  # else the first step would preempt: schedule() runs it
                        since_prefill = (since_prefill[0] + len(replayed[0]), since_prefill[1])
                        now = self._replayed(*replayed, sweep=True)
                        continue
            if mixed is not None and not mixed.carry and not was_idle:
                replayed = yield from mixed.run(now)
                if replayed is not None:  # else the first step would preempt or span the next event
                    now = self._replayed(*replayed, sweep=live is None or len(live) != len(own))
                    continue
            plan = scheduler.schedule(now)
            if self._load is not None:  # routers read the step's computed tokens while it runs
                self._refresh_scheduled(plan)
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
                elif plan.preempted:  # it preempted to make room, then could place nothing: the
                    add_step(record_step(plan, now, 0.0, scheduler, name))  # requests count those
                pipelined = False  # nothing runs, so nothing hides the next step's host work
                if self._deferred:  # async scheduling, no step to run: nothing is planned ahead
                    self._release(None, now)
                    continue
                wake_at = next_wakeup() if next_wakeup is not None else None
                if deadlines:  # a waiting request's client may give up before anything can run
                    deadline = self.next_deadline()
                    if deadline < math.inf:
                        wake_at = deadline if wake_at is None else min(wake_at, deadline)
                if wake_at is not None and wake_at <= now:
                    continue
                self._wakeup = env.event()
                if wake_at is not None:
                    yield self._wakeup | env.timeout(wake_at - now)
                else:
                    yield self._wakeup
                self._wakeup = None
                idle_for = (idle_for if was_idle else 0.0) + (env.now - now)  # waits in a row add up
                was_idle = env.now > now
                continue
            if overlap:
                device, host = host_split(self.latency_model, plan)
                duration = max(device, host) if pipelined else device + host
                pipelined = True
            else:
                duration = float(step_time(plan))
            if plan.offload_load_blocks or plan.offload_store_blocks:
                duration += offload_seconds(plan)
            if not duration > 0.0:
                raise ValueError(f"latency model: step_time must be > 0 seconds, got {duration!r}")
            if after_prefill is not None:
                since_prefill, duration = after_prefill_step(plan, since_prefill, after_prefill, duration)
            if was_idle:
                duration += after_idle if idle_cost is None else float(idle_cost(idle_for))
                was_idle = False
            record = record_step(plan, now, duration, scheduler, name)
            self._step_index += 1
            self._in_step, self._stepping = True, record
            yield timeout(duration)
            self._in_step, self._stepping = False, None
            self.busy_time += duration
            now = env.now
            finished = scheduler.update(plan, StepResult(duration), now)
            if drafts and self._load is not None:  # rejected drafts uncompute tokens, accepted ones add
                self._load.refresh(scheduler.running)  # outputs; before the hooks, which may route
                self._load.refresh(finished)
            add_step(record)
            for request in finished:
                self.request_ended(request, now)
            if live is None or len(live) != len(own):
                self._sweep(now)
            if self._deferred:  # those that arrived before this step: the next plan sees them
                self._release(self._step_index, now)

    def _refresh_scheduled(self, plan) -> None:
        """Recount the requests a schedule() may have changed: the running ones (scheduled tokens,
        admissions with their prefix hits), those it preempted (recomputes start over) and those it
        holds for a native KV load (their hits count as computed)."""
        load, scheduler = self._load, self.scheduler
        load.refresh(scheduler.running)
        if plan.preempted:
            own = self._live
            load.refresh([own[rid] for rid in plan.preempted if rid in own])
        loading = getattr(scheduler, "loading", None)
        if loading:
            load.refresh([entry[0] for entry in loading.values()])

    def _release(self, before_step: int | None, now: float) -> None:
        """Hand the deferred requests that arrived during a step before `before_step` (None: all)."""
        keep, go = [], []
        for request, step in self._deferred:
            if before_step is None or step < before_step:
                go.append(request)
            else:
                keep.append((request, step))
        self._deferred = keep
        for request in go:
            self._admit(request, now)


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

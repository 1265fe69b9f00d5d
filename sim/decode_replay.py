"""The simulator's decode fast path: a stretch of all-decode steps replayed without planning each.

In a stretch of steps in which every running request decodes one token and nothing else can
happen, the steps differ only by each context growing by one. `Scheduler.decode_horizon()` says
how many of the next steps are certainly such steps; `DecodeReplay.run` replays those that end
strictly before the SimPy environment's next event (an arrival, another replica's step, the time
limit) in one go: their times from the latency model (`LatencyModel.decode_step_times`, or
`step_time` of the exact plans for a model that `is_pure()`), the blocks they cross into handed
out in schedule()'s order (`BlockManager.append_blocks`), one placeholder token per request per
step, the requests reaching max_tokens at the last step ended (`Scheduler.finish_request`), one
step row each and one timeout to the last step's end. A first step that spans the next event
runs alone, its update after that event. Nothing else can happen in between, so the tables are
the step-by-step loop's (tests/sim/test_fast_path.py). It changes the scheduler through public
methods only; the engine does not use it.
"""
from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter
from typing import Callable

import simpy

from policies import BatchPlan, FinishReason, Request, RequestState, ScheduledSeq
from records.results import Recorder, add_step_rows
from sim.latency.base import NO_PREFILL_YET, LatencyModel

_GEN = RequestState.RUNNING_GEN
_LENGTH = FinishReason.LENGTH
_num_prompt_tokens, _output_token_ids = attrgetter("num_prompt_tokens"), attrgetter("output_token_ids")

# f(running, step_id, num_seqs, context_sum, first, count) -> seconds of steps first..first+count-1
DecodeTimes = Callable[[list, int, int, int, int, int], list]


def decode_time_function(latency_model) -> DecodeTimes | None:
    """`f(running, step_id, num_seqs, context_sum, first, count) -> [seconds, ...]`: the times of steps
    `first .. first + count - 1` of a stretch whose step 0 (id `step_id`) decodes `running`, their
    contexts summing to `context_sum`; None when the model cannot time stretches.

    The model's `decode_step_times` formula when it has one, else `step_time` of the exact plans
    those steps would have when it `is_pure()`; only for a `LatencyModel` (see there).
    """
    if not isinstance(latency_model, LatencyModel):
        return None
    times = latency_model.decode_step_times
    if times(1, 1, 0) is not None:
        return lambda running, step_id, num_seqs, context_sum, first, count: \
            times(num_seqs, context_sum + first * num_seqs, count)
    if latency_model.is_pure():
        step_time = latency_model.step_time

        def plan_times(running, step_id, num_seqs, context_sum, first, count):
            new = tuple.__new__
            return [step_time(BatchPlan(step_id=step_id + j, seqs=tuple(
                        new(ScheduledSeq, (r, 1, r.num_computed_tokens + j, True, False)) for r in running)))
                    for j in range(first, first + count)]
        return plan_times
    return None


class DecodeReplay:
    """A replica's decode fast path: `run(now, num_steps)` replays a stretch (see the module docstring).

    `build` gives one for a latency model that can time stretches, else None (the replica then
    schedules every step). `deadline` (set by a replica whose client has a timeout): a callable
    giving the earliest deadline of a live request; a stretch's steps end before it, as before an event.
    """

    deadline: Callable[[], float] | None = None
    # set by a replica whose router reads its load (`sim.outstanding.OutstandingTokens`): told of the
    # requests a stretch advanced before anything else can read it (another event, the finish hooks)
    load = None

    def __init__(self, env: simpy.Environment, scheduler, decode_times: DecodeTimes, recorder: Recorder,
                 name: str) -> None:
        self.env = env
        self.scheduler = scheduler
        self.decode_times = decode_times
        self.recorder = recorder
        self.name = name

    @classmethod
    def build(cls, env: simpy.Environment, scheduler, latency_model, recorder: Recorder,
              name: str) -> "DecodeReplay | None":
        decode_times = decode_time_function(latency_model)
        return None if decode_times is None else cls(env, scheduler, decode_times, recorder, name)

    def run(self, now: float, num_steps: int, since_prefill: tuple[int, int] = NO_PREFILL_YET, after_prefill=None):
        """Replay up to `num_steps` (at most `decode_horizon()`) steps from `now` (a SimPy generator).

        Returns (the steps' durations, the requests that ended, the time they ended), or None when
        nothing was replayed (the first step would preempt: schedule() must run it).
        `after_prefill(k, prefill tokens, seconds)`, when given, is the cost of the k-th decode step
        after the last one that carried prefill tokens (`ProfiledLatencyModel.after_prefill_cost`),
        `since_prefill` (that count before the stretch, that step's prefill tokens): as the
        replica's loop charges them step by step.
        """
        env, scheduler = self.env, self.scheduler
        running = scheduler.running
        n = len(running)
        # every context (new token included) of the first step: num_tokens summed, in C loops
        context_sum = sum(map(_num_prompt_tokens, running)) + sum(map(len, map(_output_token_ids, running)))
        next_event = env.peek()  # nothing else happens before it, so nothing can interfere
        if self.deadline is not None:  # nor past a client's deadline: the replica aborts it then
            next_event = min(next_event, self.deadline())
        step_id, num_waiting = scheduler.step_id, scheduler.num_waiting
        decode_times = self.decode_times
        durations, end_times = [], []
        t = now
        first, chunk = 0, 4  # step times are asked for in growing chunks: most stretches are short
        while first < num_steps:
            count = min(chunk, num_steps - first)
            for duration in decode_times(running, step_id, n, context_sum, first, count):
                duration = float(duration)
                if after_prefill is not None:
                    duration = after_prefill(since_prefill[0] + len(durations) + 1, since_prefill[1], duration)
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
        num_gpu_blocks = scheduler.block_manager.num_gpu_blocks
        if not end_times:  # the first step spans the next event: its update comes after that event
            started = self.start_step()
            if started is None:
                return None
            requests, used = started
            if self.load is not None:
                self.load.refresh(requests)
            record = (step_id, now, duration, 0, n, n, used, used / num_gpu_blocks, num_waiting, n, self.name)
            yield env.timeout(duration)
            now = env.now
            finished = self.finish_step(requests, now)
            add_step_rows(self.recorder, [record])
            return [duration], finished, now
        k, used, finished = self.advance(end_times)
        if not k:
            return None
        if self.load is not None:
            self.load.refresh(scheduler.running)
            self.load.refresh(finished)
        end = end_times[k - 1]
        delay = end - now
        if now + delay == end:
            yield env.timeout(delay)
        else:  # rounding: one timeout per step lands on exactly the clock the steps would
            for duration in durations[:k]:
                yield env.timeout(duration)
        name, start = self.name, now
        records = []
        for j in range(k):
            u = used[j]
            records.append((step_id + j, start, durations[j], 0, n, n, u, u / num_gpu_blocks, num_waiting, n, name))
            start = end_times[j]
        add_step_rows(self.recorder, records)
        return durations[:k], finished, end

    def advance(self, end_times: list[float]) -> tuple[int, list[int], list[Request]]:
        """Apply up to `len(end_times)` steps (at most `decode_horizon()`) at once; step j ends at
        `end_times[j]`.

        What that many schedule()/update() rounds would do: `num_computed_tokens`, step ids, one
        placeholder token per request per step, the blocks crossed into (in schedule()'s order), and
        the requests reaching max_tokens at the last step ended (in running order). Fewer steps
        when the free blocks run out first (the step that would preempt is left to schedule()).
        Returns (steps applied, GPU blocks in use during each of them, the requests ended).
        """
        k, used = self._allocate(len(end_times))
        if not k:
            return 0, [], []
        scheduler = self.scheduler
        scheduler.skip_step_ids(k)
        times = end_times[:k] if k < len(end_times) else end_times
        zeros = [0] * k
        ended = []
        for req in scheduler.running:  # schedule()'s and update()'s per-token work, k tokens at a time
            req.num_computed_tokens += k
            out = req.output_token_ids
            out += zeros
            req.token_times += times
            if len(out) >= req.max_tokens:
                ended.append(req)
        end, finish = times[-1], scheduler.finish_request
        for req in ended:  # in running order, as update() frees them
            finish(req.req_id, _LENGTH, end)
        return k, used, ended

    def start_step(self) -> "tuple[list[Request], int] | None":
        """schedule()'s half of one step (`decode_horizon()` >= 1) whose update must wait for other
        events: (the requests it decodes, GPU blocks in use during it), or None when a block is
        short (schedule() must preempt). `finish_step` is its update()."""
        k, used = self._allocate(1)
        if not k:
            return None
        self.scheduler.skip_step_ids(1)
        requests = list(self.scheduler.running)
        for req in requests:
            req.num_computed_tokens += 1
        return requests, used[0]

    def finish_step(self, requests: list[Request], now: float) -> list[Request]:
        """update() of a step `start_step` began: one placeholder token each at `now`; returns the
        requests that reached max_tokens (ended)."""
        finish = self.scheduler.finish_request
        ended = []
        for req in requests:
            if req.state is not _GEN:
                continue  # aborted (or otherwise gone) since the step began
            out = req.output_token_ids
            out.append(0)
            req.token_times.append(now)
            if len(out) >= req.max_tokens:
                finish(req.req_id, _LENGTH, now)
                ended.append(req)
        return ended

    def _allocate(self, k: int) -> tuple[int, list[int]]:
        """Hand out the blocks the next `k` steps cross into, in the order schedule() would.

        Returns (the steps whose blocks all fit, at most k; GPU blocks in use during each of them).
        """
        scheduler = self.scheduler
        running = scheduler.running
        n = len(running)
        bm = scheduler.block_manager
        bs = bm.block_size
        num_free = bm.num_free_gpu_blocks
        # Scheduler.append_needs_free_block (vLLM v0): every decode needs a free block, used or not
        full = scheduler.append_needs_free_block
        if full and not num_free:
            return 0, []
        # each block boundary crossed, as step * n + position: the order schedule() allocates in
        events = []
        for i, req in enumerate(running):
            j = len(req.block_table) * bs - req.num_computed_tokens
            while j < k:
                events.append(j * n + i)
                j += bs
        num_used = bm.num_used_gpu_blocks
        if not events:
            return k, [num_used] * k
        events.sort()
        if full and len(events) >= num_free:  # the decode after the last free block is taken preempts
            k = min(k, (events[num_free - 1] + 1) // n)
            del events[bisect_left(events, k * n):]
        elif len(events) > num_free:  # the step of the first allocation that fails is schedule()'s to do
            k = events[num_free] // n
            del events[bisect_left(events, k * n):]
        bm.append_blocks([running[e % n] for e in events])
        return k, [num_used + bisect_left(events, j * n) for j in range(1, k + 1)]

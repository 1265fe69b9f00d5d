"""The simulator's prefill fast path: stretches of mixed (prefill + decode) steps without their plans.

A chunked scheduler's step while prompts are prefilled is: every running decode one token, the
partial prefills their chunks, then admissions while budget, seats and blocks last. Planning that
costs O(batch) Python per step; here the running decodes that open the batch (the cohort) are
carried in bulk, as `sim.decode_replay` carries an all-decode stretch (contexts summed, block
boundaries on a heap, tokens and times written once). Only the prefilling tail and the admissions
are scheduled one by one, by the scheduler's own rules (`admit_head`, `BlockManager.allocate_slots`),
and a step's time comes from its sums (`LatencyModel.totals_step_time`). A stretch ends before a
step that would preempt or would not end strictly before the environment's next event, and after
a finish or once all-decode -- unless the replica is alone with its arrivals (`carry_through`):
then it waits such events out and ends its finished requests itself. Nothing else can happen in
between, so the tables are the loop's (tests/sim/test_fast_path.py). Only for `Scheduler.mixed_runs`
policies, FCFS queues, no swap, KV offload or speculation, prefix caching only without prompt ids.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from operator import attrgetter
from typing import Callable

import simpy

from policies import FinishReason, RequestState
from policies.batch_plan import PlanTotals
from policies.chunked_scheduler import ChunkedScheduler
from policies.waiting_queue import FCFSQueue
from records.results import Recorder, add_step_rows
from sim.latency.base import LatencyModel

_GEN = RequestState.RUNNING_GEN
_CTX = RequestState.RUNNING_CTX
_LENGTH = FinishReason.LENGTH
_num_computed = attrgetter("num_computed_tokens")
_new = tuple.__new__
# the scheduler methods whose behaviour the replay reproduces: a subclass changing one is not replayed
REPRODUCED = ("schedule", "_schedule_pass", "_schedule_running", "_schedule_swapped", "_schedule_waiting",
               "_chunk", "update", "_record_tokens", "_admitted", "_on_finished", "admit_head")


def totals_time_function(latency_model) -> Callable[[PlanTotals], float] | None:
    """`latency_model.totals_step_time` when the class that defines its `step_time` defines it too and
    it gives a time; else None (the replica then plans every mixed step)."""
    if not isinstance(latency_model, LatencyModel):
        return None
    owner = _owner(latency_model)
    if owner is None or "totals_step_time" not in owner.__dict__:
        return None
    probe = _new(PlanTotals, (1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0))
    if latency_model.totals_step_time(probe) is None:
        return None
    closure = owner.__dict__.get("totals_time_closure")  # the same function, its constants bound
    return closure(latency_model) if closure is not None else latency_model.totals_step_time


def _owner(latency_model) -> type | None:
    """The class that defines the model's `step_time` (the one whose shortcuts may be trusted)."""
    return next((c for c in type(latency_model).__mro__ if "step_time" in c.__dict__), None)


def replayable(scheduler) -> bool:
    """Whether the scheduler's steps are those this replay reproduces (see the module docstring)."""
    # a policy declares `mixed_runs` only where its pass is ChunkedScheduler's (tests/sim/test_fast_path.py
    # checks every policy that declares it); a user's subclass that overrides a part of it is not replayed
    if not scheduler.mixed_runs or not isinstance(scheduler, ChunkedScheduler):
        return False
    if any(getattr(type(scheduler), name) is not getattr(ChunkedScheduler, name) for name in REPRODUCED):
        return False
    return (type(scheduler.waiting) is FCFSQueue and not scheduler.whole_prompts and not scheduler.max_paddings
            and scheduler.block_manager.offload is None and not scheduler.num_spec_tokens)


class MixedReplay:
    """A replica's prefill fast path: `run(now)` replays a stretch of mixed steps (module docstring).

    `build` gives one for a scheduler and latency model it can replay, else None.
    """

    def __init__(self, env: simpy.Environment, scheduler, step_time: Callable[[PlanTotals], float],
                 recorder: Recorder, name: str, decode_times: Callable[[int, int, int], list] | None = None) -> None:
        self.env = env
        self.scheduler = scheduler
        self.step_time = step_time
        self.recorder = recorder
        self.name = name
        # all-decode steps timed together (`LatencyModel.decode_step_times`), where the model has it
        self.decode_times = decode_times

    @classmethod
    def build(cls, env: simpy.Environment, scheduler, latency_model, recorder: Recorder,
              name: str) -> "MixedReplay | None":
        if not replayable(scheduler):
            return None
        step_time = totals_time_function(latency_model)
        if step_time is None:
            return None
        decode_times = latency_model.decode_step_times
        if decode_times(1, 1, 0) is None or "decode_step_times" not in _owner(latency_model).__dict__:
            decode_times = None
        return cls(env, scheduler, step_time, recorder, name, decode_times)

    def carry_through(self, until: float | None, replica) -> None:
        """Let stretches run through the environment's other events before `until` (None: all).

        Only for an environment whose other events never read or change this replica's running
        requests (its arrivals' submits, follow-ups scheduled by finish hooks, which see only the
        request that ended): the runners of one replica, of replicas each alone in an environment
        (`sim.cluster.independent`), and `sim.cluster.colocated`'s replicas behind a router that
        reads none of them, say so. A stretch then waits out such an event inside a step, as the
        step-by-step loop does, with the cohort still carried, and ends its finished requests itself
        (`replica.request_ended`, at their step's end, as the loop would). The rows of the steps
        before one that spans an event are added before it is waited out, so that in an environment
        shared with other replicas the steps table stays in step-end order.
        """
        self.carry, self.until = True, (float("inf") if until is None else float(until))
        self.replica = replica

    carry, until, replica = False, float("inf"), None
    # set by a replica whose router reads its load (`sim.outstanding.OutstandingTokens`): told of the
    # requests a stretch changed once their tokens are written, before anything else can read it
    load = None
    # set by a replica whose client has a timeout: the earliest deadline of a live request (a
    # stretch's steps end before it; requests submitted during a stretch's waits are seen after them)
    deadline: Callable[[], float] | None = None
    # while a carried stretch waits out other events: the tokens its cohort has computed that are not
    # written on its requests yet (one a member a step since it joined); the replica's outstanding
    # count subtracts them (`Replica.num_outstanding_tokens`)
    pending = 0

    def _publish(self, pending: int, touched: dict) -> None:
        """Before the environment's events (or the finish hooks) run inside a carried stretch, where a
        router may read the replica's load: the cohort's unwritten tokens (`pending`), and the count
        (`load`) told of the other requests whose tokens the stretch wrote since the last look
        (`touched`, by id, emptied)."""
        self.pending = pending
        if touched:
            if self.load is not None:
                self.load.refresh(list(touched.values()))
            touched.clear()

    def _horizon(self, until: float) -> tuple[float, float]:
        """(the environment's next event, `until`), both no later than a client's next deadline
        (`deadline`): no step of a stretch may end at or past it."""
        next_event = self.env.peek()
        if self.deadline is not None:
            until = min(until, self.deadline())
            next_event = min(next_event, until)
        return next_event, until

    def run(self, now: float):
        """Replay the mixed steps from `now` (a SimPy generator).

        Returns (the durations of the steps not yet counted in the replica's busy time, the requests
        that ended and are not yet reported, the time the last step ended), or None when not even
        the first step could be replayed (schedule() must run it).
        """
        sch = self.scheduler
        if sch.swapped or sch.loading:
            return None
        running, waiting = sch.running, sch.waiting
        bm = sch.block_manager
        caching = bm.enable_prefix_caching
        if caching and any(r.prompt_token_ids is not None for r in running):
            return None
        # the cohort: the running decodes that open the batch (one token each, all sampling)
        num_cohort = 0
        for req in running:
            if req.state is not _GEN or req.num_prompt_tokens + len(req.output_token_ids) - req.num_computed_tokens != 1:
                break
            num_cohort += 1
        max_seqs = sch.max_num_seqs
        carry = self.carry
        if num_cohort == len(running) and (not waiting or num_cohort >= max_seqs) and (not carry or not running):
            return None  # all-decode (the decode replay's), or nothing to run
        env = self.env
        bs, wm, num_gpu = bm.block_size, bm.watermark_blocks, bm.num_gpu_blocks
        # Scheduler._chunk of a policy that splits prompts (replayable() checked): inlined below
        token_budget, limit, time_of = sch.token_budget, sch.long_prefill_token_threshold, self.step_time
        full_isl = sch.reserve_full_isl
        cohort = running[:num_cohort]  # members stay at their place; those that end are marked gone
        joined = [0] * num_cohort  # the stretch step from which each cohort member is carried
        # carried: what a router reading the load mid-stretch must see (`_publish`): the sum of `joined`
        # over the members still carried, and the others whose tokens changed since the last look
        joined_sum, touched = 0, {}  # touched: req_id -> request (a refresh must see each once)
        gone = [False] * num_cohort
        n = num_cohort  # members still carried
        context = sum(map(_num_computed, cohort))  # the carried members' contexts before the current step
        due = [(len(r.block_table) * bs - r.num_computed_tokens, i) for i, r in enumerate(cohort)]
        heapify(due)  # (the step a member crosses into a new block, its place): schedule()'s order
        ending = [(r.max_tokens - len(r.output_token_ids) - 1, i) for i, r in enumerate(cohort)]
        heapify(ending)  # (the step at which a member reaches max_tokens, its place)
        tail = running[num_cohort:]  # the other running requests, scheduled one by one
        free = bm.num_free_gpu_blocks
        next_event, until = self._horizon(self.until)
        step_id, name, recorder, replica = sch.step_id, self.name, self.recorder, self.replica
        durations, ends, records, tail_finished = [], [], [], []
        t, j, last = now, 0, False
        clock, since = now, 0  # the environment's time, and the first step not yet waited out
        decode_times = self.decode_times if carry else None
        while not last:
            if n > token_budget:
                break
            if decode_times is not None and n and not tail and (not waiting or n >= max_seqs):
                # all-decode steps (nothing else to schedule, nobody admissible): timed together, in
                # growing batches, up to the next finish, the next event or the step whose blocks run
                # out; that step takes the general path below
                stop = ending[0][0] if ending else 1 << 62
                num_waiting, num_running, batch = len(waiting), len(running), 4  # most runs are short
                while j < stop:
                    count = min(stop - j, batch)
                    batch = min(4 * batch, 4096)
                    done, waits = 0, False
                    for duration in decode_times(n, context + n, count):
                        duration = float(duration)
                        if not duration > 0.0:
                            raise ValueError(f"latency model: step_time must be > 0 seconds, got {duration!r}")
                        end = t + duration
                        if not end < next_event:
                            if not end < until:
                                break
                            waits = True  # it spans the next event: waited out below
                        crossing = []
                        while due and due[0][0] == j:
                            i = heappop(due)[1]
                            if not gone[i]:
                                crossing.append(i)
                        if crossing:
                            if len(crossing) > free:
                                for i in crossing:
                                    heappush(due, (j, i))
                                waits = False
                                break
                            bm.append_blocks([cohort[i] for i in crossing])
                            for i in crossing:
                                heappush(due, (j + bs, i))
                            free -= len(crossing)
                        used = num_gpu - free
                        records.append((step_id + j, t, duration, 0, n, n, used, used / num_gpu,
                                        num_waiting, num_running, name))
                        durations.append(duration)
                        ends.append(end)
                        context += n
                        j += 1
                        t = end
                        done += 1
                        if waits:
                            break
                    if waits:  # the events up to this step's end happen; then the next step is planned
                        records = _add_before_span(recorder, records)
                        self._publish(n * j - joined_sum, touched)
                        yield from _wait(env, clock, end, durations, since)
                        clock, since = end, len(durations)
                        add_step_rows(recorder, records)
                        records = []
                        next_event, until = self._horizon(until)  # the wait's submits have deadlines too
                        break
                    if done < count:
                        break
            crossing = []
            while due and due[0][0] == j:
                i = heappop(due)[1]
                if not gone[i]:
                    crossing.append(i)
            f = free - len(crossing)
            if f < 0:
                break  # a decode cannot grow: schedule() preempts
            budget = token_budget - n
            entries = []  # (request, tokens this step, computed before it)
            blocked = False
            for req in tail:
                if budget <= 0:
                    break
                c = req.num_computed_tokens
                m = req.num_prompt_tokens + len(req.output_token_ids) - c
                if 0 < limit < m:
                    m = limit
                if m > budget:
                    m = budget
                if m <= 0:
                    continue
                needed = -(-(c + m) // bs) - len(req.block_table)
                if needed > 0:
                    if needed > f:
                        blocked = True  # schedule() preempts
                        break
                    f -= needed
                budget -= m
                entries.append((req, m, c))
            if blocked:
                break
            admitted = 0
            if budget > 0 and waiting:
                seats = n + len(tail)
                for req in waiting:  # _schedule_waiting, FCFS: a prefix of the queue
                    if budget <= 0 or seats >= max_seqs:
                        break
                    # a prefix lookup (ids, or a count-only request's own blocks after a recompute)
                    # or a landed load: schedule()'s to do
                    if req.num_computed_tokens or (caching and (req.prompt_token_ids is not None or req.block_hashes)):
                        blocked = True
                        break
                    m = req.num_prompt_tokens + len(req.output_token_ids)
                    if full_isl and -(-m // bs) - len(req.block_table) > f - wm:
                        break  # Scheduler.reserve_full_isl: the whole sequence's blocks must be free
                    if 0 < limit < m:
                        m = limit
                    if m > budget:
                        m = budget
                    if m <= 0:
                        break
                    needed = -(-m // bs) - len(req.block_table)
                    if needed > f - wm:
                        break
                    f -= needed
                    budget -= m
                    seats += 1
                    admitted += 1
                    entries.append((req, m, 0))
                if blocked:
                    break
            # the step's sums (policies.batch_plan.plan_totals of its plan)
            num_tokens = num_seqs = num_decode = num_outputs = n
            dec_ctx = context + n
            num_prefill = pf_tokens = pf_pairs = pf_ctx = 0
            for req, m, c in entries:
                num_tokens += m
                num_seqs += 1
                if c + m == req.num_prompt_tokens + len(req.output_token_ids):
                    num_outputs += 1
                if m == 1 and c > 0:
                    dec_ctx += c + 1
                    num_decode += 1
                else:
                    pf_tokens += m
                    pf_pairs += m * c + m * (m + 1) // 2
                    pf_ctx += c + m
                    num_prefill += m
            if not num_seqs:
                break
            duration = float(time_of(_new(PlanTotals, (num_tokens, num_seqs, num_prefill, num_decode, 0, 0,
                                                       num_outputs, dec_ctx, pf_tokens, pf_pairs, pf_ctx, 0))))
            if not duration > 0.0:
                raise ValueError(f"latency model: step_time must be > 0 seconds, got {duration!r}")
            end = t + duration  # as SimPy adds a timeout's delay to its clock
            spans = not end < next_event
            if spans and not (carry and end < until):
                break  # its update would come after the next event: schedule() runs it
            # --- the step happens: schedule()'s half ----------------------------------------------
            if crossing:
                bm.append_blocks([cohort[i] for i in crossing])
                for i in crossing:
                    heappush(due, (j + bs, i))
            k = len(entries) - admitted
            for req, m, _ in entries[:k]:
                if not bm.allocate_slots(req, m):
                    raise RuntimeError(f"request {req.req_id}: mixed replay: blocks counted wrong")
            for req, m, _ in entries[k:]:
                sch.admit_head(m, t)
                tail.append(req)
            free = f
            used = num_gpu - f
            records.append((step_id + j, t, duration, num_prefill, num_decode, num_seqs,
                            used, used / num_gpu, len(waiting), len(running), name))
            durations.append(duration)
            ends.append(end)
            # --- StepBuilder.finish, then update()'s half: the cohort's tokens wait; the others' now -
            if carry:
                for req, _, _ in entries:
                    touched[req.req_id] = req
            for req, m, c in entries:
                req.num_computed_tokens = c + m
                if req.first_scheduled_time is None:
                    req.first_scheduled_time = t
                out = req.output_token_ids
                if c + m == req.num_prompt_tokens + len(out):
                    out.append(0)
                    req.token_times.append(end)
                    if req.state is _CTX:
                        req.transition(_GEN)
                        if req.first_token_time is None:
                            req.first_token_time = end
                    if len(out) >= req.max_tokens:
                        tail_finished.append(req)
            context += n
            j += 1
            t = end
            ended = bool(ending and ending[0][0] == j - 1) or bool(tail_finished)
            if spans or (ended and carry):  # the environment's events up to this step's end happen
                if spans:
                    records = _add_before_span(recorder, records)
                self._publish(n * j - joined_sum, touched)
                yield from _wait(env, clock, end, durations, since)
                clock, since = end, len(durations)
                add_step_rows(recorder, records)
                records = []
            if ended:
                if not carry:
                    break  # the loop reports them
                # update()'s order: the plan's (the cohort first); then the loop's hooks, in that order
                finished = []
                while ending and ending[0][0] == j - 1:
                    finished.append(heappop(ending)[1])
                finished.sort()
                for i in finished:
                    req = cohort[i]
                    first = joined[i]
                    m = j - first
                    context -= req.num_computed_tokens + m
                    req.num_computed_tokens += m
                    req.output_token_ids += [0] * m
                    req.token_times += ends[first:]
                    gone[i] = True
                    joined_sum -= first
                    touched[req.req_id] = req  # live until its hook: counted as written from here
                n -= len(finished)
                finished = [cohort[i] for i in finished]
                for req in tail_finished:
                    tail.remove(req)
                finished += tail_finished
                tail_finished = []
                finish = sch.finish_request
                for req in finished:
                    finish(req.req_id, _LENGTH, end)
                free = bm.num_free_gpu_blocks  # their blocks are back
                busy = replica.busy_time
                for d in durations:
                    busy += d
                replica.busy_time = busy
                durations = []
                since = 0
                self._publish(n * j - joined_sum, touched)  # the hooks may route
                for req in finished:
                    replica.request_ended(req, end)
                if j > len(ends) // 2 + 64:  # keep `ends` short: restart the stretch's step count
                    break
            if spans or (ended and carry):
                # the hooks may have scheduled follow-ups, and the wait's submits have deadlines too
                next_event, until = self._horizon(until)
            # tail requests now decoding join the cohort, from the front (keeping running order)
            joins = 0
            for req in tail:
                if req.state is not _GEN or req.num_prompt_tokens + len(req.output_token_ids) - req.num_computed_tokens != 1:
                    break
                i = len(cohort)
                cohort.append(req)
                joined.append(j)
                gone.append(False)
                c = req.num_computed_tokens
                context += c
                n += 1
                heappush(due, (j + len(req.block_table) * bs - c, i))
                heappush(ending, (j + req.max_tokens - len(req.output_token_ids) - 1, i))
                joins += 1
            if joins:
                del tail[:joins]
                joined_sum += j * joins
            if not carry and not tail and (not waiting or len(running) >= max_seqs):
                last = True  # all-decode from here: the decode replay's
        if not j:
            return None
        # --- the carried members' tokens and times, written once ------------------------------------
        for i, req in enumerate(cohort):
            first = joined[i]
            if first >= j or gone[i]:
                continue
            req.num_computed_tokens += j - first
            if first:
                req.output_token_ids += [0] * (j - first)
                req.token_times += ends[first:]
            else:
                req.output_token_ids += [0] * j
                req.token_times += ends
        self.pending = 0
        end = ends[-1]
        finished = []
        if (ending and ending[0][0] == j - 1) or tail_finished:  # update()'s order: the plan's (cohort first)
            finished = [r for i, r in enumerate(cohort) if not gone[i] and len(r.output_token_ids) >= r.max_tokens]
            finished += tail_finished
            finish = sch.finish_request
            for req in finished:
                finish(req.req_id, _LENGTH, end)
        sch.skip_step_ids(j)
        sch.now = ends[-2] if j > 1 else now
        if self.load is not None:
            self.load.refresh(sch.running)
            self.load.refresh(finished)
        if since < len(durations):
            yield from _wait(env, clock, end, durations, since)
        if records:
            add_step_rows(recorder, records)
        return durations, finished, end


def _add_before_span(recorder: Recorder, records: list) -> list:
    """Add the rows of the steps before the last of `records` (the one spanning the next event) now,
    and return the last one's, to add once it has been waited out: the loop adds a step's row at its
    end, and the earlier ones ended before the next event, so before any row another replica adds
    then (the rows stay in step-end order in a shared environment)."""
    if len(records) > 1:
        add_step_rows(recorder, records[:-1])
        return records[-1:]
    return records


def _wait(env: simpy.Environment, clock: float, end: float, durations: list, since: int):
    """Wait from `clock` to `end`, the end of the steps of `durations[since:]`: one timeout when it
    lands on exactly that clock, else one per step (as the step-by-step loop adds each delay)."""
    delay = end - clock
    if clock + delay == end:
        yield env.timeout(delay)
    else:
        for duration in durations[since:]:
            yield env.timeout(duration)

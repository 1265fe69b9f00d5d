"""`DisaggregatedCluster`: a prefill pool and a decode pool joined by a KV link.

Each user-visible `Request` is driven by hand from two halves: a prefill half (`max_tokens = 1`)
on a prefill replica, whose KV stays held until it has moved, then a decode half on a decode
replica that has reserved its blocks, after `link.transfer_time` of the prompt's KV bytes. Under
vLLM's P/D proxy (`first_token = "after_transfer"`) the decode half is the whole request: it
recomputes the last prompt position and samples the first token itself, as vLLM's scheduler does
with received KV (the prefill side's token is thrown away); under DistServe's (`"prefill"`) it
starts from the prefill side's token. A decode side that preempts pulls nothing new
(back-pressure), so an overloaded decode pool fills the prefill pool's memory and TTFT grows, as in
DistServe. The steps are on `DisaggregatedCluster`.

Steps of both pools go to the shared recorder (replica names `p0..`, `d0..`). A step counts only
the positions it computed: the transferred KV is neither prefill nor decode, so `num_prefill_tokens`
over the prefill pool adds up to the computed prompts, and the decode side's admitting step counts
its one new position (the last prompt position, or the first token) as a decode, which is what
`PreloadedKVLatency` charges. The `requests` table gets one row per user request, with
`kv_transfer_s` and `prefill_replica` columns (the transfers' sizes).
"""
from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

import simpy

from policies import FinishReason, Request, RequestState, ScheduledSeq
from records.metrics import stats
from records.results import Recorder, count_tokens
from sim.build import build_replica, resolve_latency_model
from sim.cluster.layout import disagg_section, pool_configs
from sim.cluster.link import Link
from sim.cluster.router import make_router
from specs import kv_bytes_per_token

BOOKKEEPING_S = 1e-6  # a decode-side step that only registers received KV (no forward pass)
COMPLETED = (FinishReason.LENGTH, FinishReason.STOP)


class PreloadedKVLatency:
    """A decode replica's latency model: positions whose KV came over the link are free.

    `preloaded[req_id]` = number of leading positions already in the cache when the decode half
    was submitted. Once the request's scheduled chunk passes them (or it is preempted, which drops
    its KV) the entry is removed and the request costs what any request costs.
    """

    def __init__(self, inner, preloaded: dict, on_step=None) -> None:
        self.inner = inner
        self.preloaded = preloaded
        self.on_step = on_step  # called at each step, right after the scheduler admitted what it could
        # step_id -> (prefill, decode, padding) tokens computed, for steps that skipped received KV
        self.computed_tokens: dict[int, tuple[int, int, int]] = {}

    def __getattr__(self, name: str):  # anything else (e.g. swap bandwidth) is the inner model's
        return getattr(self.inner, name)

    def step_time(self, plan) -> float:
        if self.on_step is not None:
            self.on_step()
        pre = self.preloaded
        if not pre:
            return self.inner.step_time(plan)
        seqs, changed = [], False
        for s in plan.seqs:
            n = pre.get(s.req_id)
            if n is not None and not s.is_padding:
                if s.request.num_preemptions > 0:  # its received KV was dropped: a normal request now
                    del pre[s.req_id]
                elif s.num_computed_tokens < n:
                    changed = True
                    end = s.num_computed_tokens + s.num_tokens
                    if end >= n:
                        del pre[s.req_id]
                    if end <= n:
                        continue  # this chunk is all received KV
                    s = ScheduledSeq(s.request, end - n, n, s.samples, s.is_padding)
            seqs.append(s)
        if not changed:
            return self.inner.step_time(plan)
        self.computed_tokens[plan.step_id] = count_tokens(seqs)
        if not seqs and not plan.swap_in_blocks and not plan.swap_out_blocks:
            return BOOKKEEPING_S
        return self.inner.step_time(dataclasses.replace(plan, seqs=tuple(seqs)))


class _ComputedSteps(Recorder):
    """A decode replica's recorder: its steps count the tokens it computed, not the received KV.

    The replica records the plan it scheduled (the received positions as a prefill chunk); its
    `PreloadedKVLatency` has the counts of what was computed, keyed by step id.
    """

    def __init__(self, steps: list, latency: PreloadedKVLatency) -> None:
        super().__init__()
        self.steps = steps  # the run's shared step list
        self.latency = latency

    def add_step(self, record) -> None:
        counts = self.latency.computed_tokens.pop(record.step_id, None)
        if counts is not None:
            record.num_prefill_tokens, record.num_decode_tokens, record.num_padding_tokens = counts
        self.steps.append(record)


class _LoadView:
    """A decode replica as its router sees it: its own outstanding tokens plus those on their way."""

    def __init__(self, replica) -> None:
        self.replica = replica
        self.incoming_tokens = 0

    def num_outstanding_tokens(self) -> int:
        return self.replica.num_outstanding_tokens() + self.incoming_tokens


@dataclasses.dataclass
class _Transfer:
    """A request between its prefill and its decode: where its KV is held and where it goes."""

    request: Request  # the user-visible request
    prefill: int  # prefill replica index
    decode: int  # decode replica index
    prefill_hold: Request | None  # placeholder holding the KV blocks on the prefill side
    tokens: int  # decode-side load this transfer brings (for the router)
    ready_time: float = 0.0  # when the prefill half ended


def _hold(block_manager, req_id: str, now: float, num_tokens: int) -> Request | None:
    """Allocate `num_tokens` worth of blocks to a placeholder request; None if they do not fit."""
    holder = Request(req_id, now, num_tokens, 1)
    return holder if block_manager.allocate_slots(holder, num_tokens) else None


class DisaggregatedCluster:
    """Prefill replicas `p0..`, decode replicas `d0..`, routers for each pool, and the KV link.

    A request's life:

    1. Arrival: a prefill half (same prompt, `max_tokens = 1`) goes to a prefill replica (router
       `disaggregation.prefill_router`). Under DistServe (`first_token = "prefill"`) its one sampled
       token is the request's first token, sent at once (a one-token request ends here). vLLM's P/D
       proxy (`"after_transfer"`) drops it and streams every token from the decode instance.
    2. The prefill half ends and its scheduler frees its blocks; the cluster at once re-takes as many
       blocks on the prefill replica (a placeholder holder), so the KV stays held until it has moved.
    3. The request waits (FIFO per decode replica) until the chosen decode replica has no request of
       its own waiting for blocks (back-pressure: a decode side that preempts pulls nothing new), under
       vLLM has fewer than `max_num_seqs` running (its scheduler allocates for received KV only in the
       loop that admits waiting requests, which stops there), and can
       allocate the blocks of what the decode half starts with (the prompt, plus the first token under
       DistServe); those are reserved there (held on both sides now).
       Meanwhile the prefill side keeps holding the KV, so an overloaded decode pool fills the prefill
       pool's memory and TTFT grows, as in DistServe.
    4. The transfer takes `link.transfer_time(prompt tokens x KV bytes per token)`; then both holds
       are released and a decode half is submitted to the decode replica, whose scheduler admits it
       when its blocks fit: vLLM, the request itself (prompt, `max_tokens`), its KV there but for the
       last prompt position (vLLM's scheduler recomputes it to get logits to sample from); DistServe,
       prompt + first token as its "prompt", `max_tokens - 1`, all of its KV there.
    5. On the decode side, the transferred positions cost no compute: `PreloadedKVLatency` charges
       the admitting step only for the one new position (a decode at context = prompt length, or
       prompt length - 1 under vLLM, whose step yields the first token: TTFT includes it).
    """

    def __init__(self, env: simpy.Environment, config: Any, recorder, latency_model=None,
                 fast_decode: bool = True) -> None:
        self.env = env
        self.recorder = recorder  # user-visible requests and every step
        halves = Recorder()  # the prefill halves: kept out of the results (decode replicas: _ComputedSteps)
        halves.steps = recorder.steps
        d = disagg_section(config)
        prefill_cfgs, decode_cfgs = pool_configs(config)
        self.prefill = [build_replica(env, c, halves, name, latency_model, fast_decode) for name, c in prefill_cfgs]
        self.preloaded: dict = {}
        self.decode = []
        for j, (name, c) in enumerate(decode_cfgs):
            if "max_num_batched_tokens" not in d.decode.scheduler:
                # received KV is not computed: let a whole prompt be admitted in one step, as vLLM's
                # P/D connectors count only new tokens against the decode side's budget
                s = c.scheduler
                c = dataclasses.replace(c, scheduler=dataclasses.replace(
                    s, max_num_batched_tokens=max(s.max_num_batched_tokens, s.max_model_len + s.max_num_seqs)))
            inner = resolve_latency_model(latency_model, c)
            # each step start is a chance to pull more KV: the scheduler has just admitted its waiting
            pull = lambda j=j: self._start_transfers(j, env.now)
            latency = PreloadedKVLatency(inner, self.preloaded, pull)
            self.decode.append(build_replica(env, c, _ComputedSteps(recorder.steps, latency), name, latency,
                                             fast_decode))
        for i, r in enumerate(self.prefill):
            r.on_finish.append(lambda req, now, i=i: self._prefill_done(req, now, i))
        for j, r in enumerate(self.decode):
            r.on_finish.append(lambda req, now, j=j: self._decode_done(req, now, j))
        self.views = [_LoadView(r) for r in self.decode]
        bs = config.cache.block_size
        self.prefill_router = make_router(d.prefill_router, block_size=bs,
                                          capacity_blocks=[r.scheduler.block_manager.num_gpu_blocks for r in self.prefill])
        self.decode_router = make_router(d.decode_router, block_size=bs,
                                         capacity_blocks=[r.scheduler.block_manager.num_gpu_blocks for r in self.decode])
        tp_p, tp_d = prefill_cfgs[0][1].hardware.tp, decode_cfgs[0][1].hardware.tp
        self.link = Link.preset(d.link, d.link_bandwidth_gbps, d.link_latency_s, num_parallel=min(tp_p, tp_d))
        # the whole model's K and V of one token (each GPU sends its shard on its own lane)
        self.kv_bytes_per_token = kv_bytes_per_token(config.model.spec(), 1)
        self.pending: list[deque[_Transfer]] = [deque() for _ in self.decode]
        self.moving: dict[str, tuple[_Transfer, Request]] = {}  # transfers on the link: (transfer, decode-side hold)
        self.originals: dict = {}
        self.transfer_times: list[float] = []
        self.hooks: list = []
        self.first_token_at_prefill = d.first_token == "prefill"

    # --- wiring ---------------------------------------------------------------------------------
    def add_finish_hook(self, hook) -> None:
        self.hooks.append(hook)

    def transfer_time(self, num_prompt_tokens: int) -> float:
        return self.link.transfer_time(num_prompt_tokens * self.kv_bytes_per_token)

    def submit(self, request: Request) -> None:
        """An arrival: its prefill half goes to a prefill replica."""
        half = Request(request.req_id, request.arrival_time, request.num_prompt_tokens, 1,
                       priority=request.priority, prompt_token_ids=request.prompt_token_ids, tags=request.tags)
        i = self.prefill_router.choose(half, self.prefill)
        self.originals[request.req_id] = request
        self.recorder.add_request(request, self.prefill[i].name)
        request.tags["prefill_replica"] = self.prefill[i].name
        self.prefill[i].submit(half)

    def _end(self, request: Request, reason: FinishReason, now: float, why: str | None = None) -> None:
        request.finish(reason, now, why)
        for hook in self.hooks:
            hook(request, now)

    # --- prefill side ---------------------------------------------------------------------------
    def _prefill_done(self, half: Request, now: float, i: int) -> None:
        request = self.originals[half.req_id]
        request.first_scheduled_time = half.first_scheduled_time
        request.num_cached_tokens = half.num_cached_tokens
        request.num_preemptions += half.num_preemptions
        request.preemption_intervals.extend(half.preemption_intervals)
        request.num_swaps += half.num_swaps
        request.num_recomputes += half.num_recomputes
        if half.finish_reason not in COMPLETED or not half.token_times:
            self._end(request, half.finish_reason or FinishReason.ABORTED, now, half.reject_reason)
            return
        request.transition(RequestState.RUNNING_CTX)
        request.transition(RequestState.RUNNING_GEN)
        if self.first_token_at_prefill:
            request.record_token(0, half.token_times[0])
            if request.max_tokens == 1:  # DistServe: done on the prefill instance, nothing migrates
                self._end(request, FinishReason.LENGTH, now)
                return
        hold = _hold(self.prefill[i].scheduler.block_manager, f"{request.req_id}/kv-out", now,
                     request.num_prompt_tokens)
        tokens = request.num_prompt_tokens + request.max_tokens
        j = self.decode_router.choose(request, self.views)
        self.views[j].incoming_tokens += tokens
        self.pending[j].append(_Transfer(request, i, j, hold, tokens, now))
        self._start_transfers(j, now)

    # --- the link -------------------------------------------------------------------------------
    def _start_transfers(self, j: int, now: float) -> None:
        """Start every transfer at the head of decode replica j's queue whose blocks fit there."""
        scheduler = self.decode[j].scheduler
        bm = scheduler.block_manager
        queue = self.pending[j]
        while queue:
            t = queue[0]
            n = self._decode_prompt_len(t.request)
            if not bm.can_ever_fit(n):
                queue.popleft()
                self._release(t)
                self._end(t.request, FinishReason.REJECTED, now,
                          f"decode replica {self.decode[j].name} can never hold {n} tokens of KV")
                continue
            if scheduler.num_waiting:
                break  # back-pressure: the decode side pulls no new KV while its own requests wait for blocks
            if not self.first_token_at_prefill and scheduler.num_running >= scheduler.max_num_seqs:
                # vLLM allocates for received KV in its waiting loop, which stops at max_num_seqs
                # running: the KV stays on the prefill side until a slot frees (DistServe's decode
                # side pulls by memory alone)
                break
            reservation = _hold(bm, f"{t.request.req_id}/kv-in", now, n)
            if reservation is None:
                break  # first come, first served: wait for blocks to free up
            queue.popleft()
            self.moving[t.request.req_id] = (t, reservation)
            self.env.process(self._transfer(t, reservation))

    def _decode_prompt_len(self, request: Request) -> int:
        """Tokens of KV the decode half starts with: the prompt, plus the first token under DistServe."""
        return request.num_prompt_tokens + (1 if self.first_token_at_prefill else 0)

    def _release(self, t: _Transfer) -> None:
        if t.prefill_hold is not None:
            replica = self.prefill[t.prefill]
            replica.scheduler.block_manager.free(t.prefill_hold)
            replica.wake()  # a released hold is no submit: it may sleep with prefills waiting for these blocks
        self.views[t.decode].incoming_tokens -= t.tokens

    def _transfer(self, t: _Transfer, reservation: Request):
        request = t.request
        duration = self.transfer_time(request.num_prompt_tokens)
        yield self.env.timeout(duration)
        del self.moving[request.req_id]
        self._release(t)
        replica = self.decode[t.decode]
        replica.scheduler.block_manager.free(reservation)
        self.transfer_times.append(duration)
        request.tags["kv_transfer_s"] = duration
        if self.first_token_at_prefill:  # DistServe: the decode side starts from the prefill's token
            half = Request(request.req_id, request.arrival_time, request.num_prompt_tokens + 1,
                           request.max_tokens - 1, priority=request.priority, tags=request.tags)
            self.preloaded[request.req_id] = request.num_prompt_tokens
        else:
            # vLLM: the whole request, its prompt's KV received but the last position, which the
            # decode side recomputes to sample the first token (the prefill side's is thrown away)
            half = Request(request.req_id, request.arrival_time, request.num_prompt_tokens, request.max_tokens,
                           priority=request.priority, tags=request.tags)
            self.preloaded[request.req_id] = request.num_prompt_tokens - 1
        self.recorder.replica_of[request.req_id] = replica.name
        replica.submit(half)

    # --- decode side ----------------------------------------------------------------------------
    def _take_decode_half(self, half: Request) -> Request:
        """The user request of a decode half that ended: it gets the half's tokens and preemptions."""
        request = self.originals.pop(half.req_id)
        self.preloaded.pop(half.req_id, None)
        for t in half.token_times:
            request.record_token(0, t)
        request.num_preemptions += half.num_preemptions
        request.preemption_intervals.extend(half.preemption_intervals)
        request.num_swaps += half.num_swaps
        request.num_recomputes += half.num_recomputes
        return request

    def _decode_done(self, half: Request, now: float, j: int) -> None:
        request = self._take_decode_half(half)
        self._end(request, half.finish_reason or FinishReason.ABORTED, now,
                  half.reject_reason if half.finish_reason is FinishReason.REJECTED else None)
        self._start_transfers(j, now)

    # --- the end --------------------------------------------------------------------------------
    def end_unfinished(self, now: float, why: str) -> None:
        """Abort every live half, free the KV of transfers waiting for or on the link (their holds on
        both sides), then end every user request still open (none goes missing, no block stays held)."""
        for replica in self.prefill + self.decode:
            s = replica.scheduler
            for req_id in list(s.requests):  # the scheduler's live halves, whatever their queue
                half = s.abort_request(req_id, now)
                if replica in self.decode:  # the tokens it streamed before the cut reach the user request
                    self._take_decode_half(half)
        for queue in self.pending:
            while queue:
                self._release(queue.popleft())
        for t, reservation in self.moving.values():
            self._release(t)
            self.decode[t.decode].scheduler.block_manager.free(reservation)
        self.moving.clear()
        for request in self.recorder.requests:
            if not request.is_finished:
                request.finish(FinishReason.ABORTED, now, why)

    def transfer_stats(self) -> dict:
        out = {"count": len(self.transfer_times)}
        out.update(stats(self.transfer_times) or {})
        return out

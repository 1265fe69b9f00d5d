"""The scheduler: the mechanisms every policy shares, and `make_scheduler` to pick a policy by name.

Every policy speaks the one loop of DESIGN.md::

    plan = scheduler.schedule(now)
    result = executor.execute(plan)
    finished = scheduler.update(plan, result, now + result.duration)

Token accounting is vLLM v1's: each step hands out tokens so that a request's `num_computed_tokens`
catches up with `num_tokens` (prompt + generated); `num_computed_tokens` advances at schedule time.
Policies differ only in the *order* in which they run the shared mechanisms (`_schedule_running`,
`_schedule_swapped`, `_schedule_waiting`) and in whether a prompt may be split (`whole_prompts`);
static batching adds its batch bookkeeping. Admission, the KV offload tier, speculative decoding
and the whole-prompt step budget are described on `Scheduler`.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from policies.batch_plan import ScheduledSeq
from policies.block_manager import BlockManager
from policies.offload_transfers import OffloadTransfers
from policies.config import ConfigError
from policies.preemption import SWAP, Preemptor
from policies.request import FinishReason, RequestState
from policies.speculative import placeholder_proposer
from policies.step_builder import StepBuilder
from policies.stretches import Stretches
from policies.waiting_queue import make_queue

if TYPE_CHECKING:
    from policies.batch_plan import BatchPlan, StepResult
    from policies.config import CacheConfig, SchedulerConfig, SpeculativeConfig
    from policies.request import Request

_CTX = RequestState.RUNNING_CTX
_GEN = RequestState.RUNNING_GEN
_FINISHED = RequestState.FINISHED


class Scheduler(Stretches):
    """Shared state and mechanisms: queues, block manager, admission, preemption, update.

    Subclasses implement `schedule(now)` by running the shared steps in their policy's order. What
    a simulator replaying steps without their plans asks of it is `policies.stretches.Stretches`.

    Admission (`add_request`) rejects at once, with a reason, a request that could never be served:
    - prompt + max_tokens > max_model_len (what vLLM's OpenAI server answers with a 400; this also
      covers vLLM's "prompt >= max_model_len");
    - its KV at full length (prompt + max_tokens - 1 tokens; the last sampled token needs no KV;
      plus the lookahead slots of an MTP or draft-model proposer, up to max_model_len) needs more
      blocks than the GPU has, minus the watermark.
    A request that passes is never rejected later: a lone request can always grow to its full length.
    With `reserve_full_isl` (vLLM 0.19+) a waiting request is admitted only while the blocks of its
    whole known sequence are free, not just those of its first chunk (its prefix hits count as held).

    With a KV offload tier (`policies.kv_offload`), admission looks a prompt up in the GPU prefix
    cache, then in the CPU tier for the blocks after the GPU hit. The "native" backend holds the
    request apart (`loading`, counted as waiting) with its GPU blocks allocated until its load has
    landed, then puts it back at the head of the waiting queue with the loaded tokens computed;
    "lmcache" loads in the step that admits it. Every step's newly full blocks are stored to the
    tier (`offload_store_blocks`).

    Speculative decoding (`speculative`, a `SpeculativeConfig`; `chunked` and `vllm` only, as in
    vLLM v1): after each sampled token the `proposer` gives up to k drafts (never past max_tokens);
    a decode then schedules 1 + drafts tokens (the drafts trimmed to the budget left, as vLLM does)
    and KV slots for all, plus k lookahead slots where the proposer writes KV (MTP, draft model:
    `SpeculativeConfig.num_lookahead_tokens`, vLLM's); `update` keeps the accepted drafts
    (`StepResult.num_accepted`, or the simulator's `acceptance` sampler) and the sampled token and
    moves `num_computed_tokens` back by the rejected ones; the request keeps the blocks past them,
    as vLLM v1 does (its block tables only grow until the request is freed). See
    `policies.speculative`.

    Whole-prompt policies (`continuous`, `static`) use a step budget of at least `max_model_len`:
    vLLM v0 without chunked prefill requires max_num_batched_tokens >= max_model_len (and defaults
    to max(max_model_len, 2048)). Rather than refuse a smaller setting we raise the floor, so every
    admissible prompt, and every recompute of prompt + generated tokens, fits in one step.
    """

    whole_prompts = False  # True: a prompt (or recompute) is scheduled in one piece, never chunked
    priority_admission_preemption = True  # priority queue: a waiting request may preempt lower ones
    default_prefix_caching = False  # used when CacheConfig.enable_prefix_caching is None
    supports_speculative = False  # True where decodes may verify draft tokens (vLLM v1's scheduler)
    # True: a running request is scheduled only while a GPU block is free, whether or not its tokens
    # need one (vLLM v0's BlockSpaceManager.can_append_slots); False: only when its allocation fails
    append_needs_free_block = False
    null_block = False  # True: block 0 is vLLM v1's null block, never holding KV (BlockManager)

    def __init__(self, config: "SchedulerConfig", cache: "CacheConfig",
                 speculative: "SpeculativeConfig | None" = None) -> None:
        self.config = config
        self.cache_config = cache
        prefix = cache.enable_prefix_caching
        self.block_manager = BlockManager.from_config(
            cache, self.default_prefix_caching if prefix is None else prefix, self.null_block)
        self.waiting = make_queue(config.queue)
        self.swapped = make_queue(config.queue)
        self.running: list[Request] = []
        self.preemptor = Preemptor(config.preemption, config.queue, config.hybrid_swap_threshold)
        self.requests: dict = {}  # req_id -> live (unfinished) request
        self._arrivals = itertools.count()  # each added request's `arrival_order`
        self.step_id = 0
        self.now = 0.0  # the clock of the schedule() call in progress (stamps preemption intervals)
        self.token_budget = config.max_num_batched_tokens
        if not config.enable_chunked_prefill:  # vLLM v1 without chunking ('vllm' only): whole prompts
            self.whole_prompts = True
        if self.whole_prompts:  # see the class docstring: a whole prompt must always fit one step
            self.token_budget = max(self.token_budget, config.max_model_len)
        self.max_num_seqs = config.max_num_seqs
        self.long_prefill_token_threshold = config.long_prefill_token_threshold
        self.max_paddings = config.max_paddings  # 0 = unpadded prompt batches (see `_padded_fits`)
        self.reserve_full_isl = config.reserve_full_isl  # admission needs the whole sequence's blocks
        # the KV offload tier's copies in flight; `loading` (requests held for a native load) is its dict
        self.transfers = OffloadTransfers(self.block_manager)
        self.loading = self.transfers.loading
        # speculative decoding: k drafts per step at most; `proposer(request)` gives a request's next
        # drafts (placeholders unless the executor sets a real one); `acceptance(num_drafts)` draws how
        # many a verify accepts when the executor reports none (the simulator sets it)
        self.speculative = speculative
        self.num_spec_tokens = speculative.k if speculative is not None else 0
        # KV slots a running request reserves past its scheduled tokens (MTP, draft model; vLLM caps
        # them at max_model_len)
        self.num_lookahead_tokens = speculative.num_lookahead_tokens if speculative is not None else 0
        if self.num_spec_tokens and not self.supports_speculative:
            raise ConfigError(f"speculative.method: speculative decoding runs with policy chunked or vllm "
                              f"(vLLM v1's scheduler); policy is {config.policy!r}")
        self.proposer = placeholder_proposer(self.num_spec_tokens) if self.num_spec_tokens else None
        self.acceptance = None

    # --- queue sizes ------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        """Waiting requests, those waiting for a KV load from the offload tier included (as vLLM counts)."""
        return len(self.waiting) + len(self.loading)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_swapped(self) -> int:
        return len(self.swapped)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped or self.loading)

    # --- admission --------------------------------------------------------------------------------
    def reject_reason(self, req: "Request") -> str | None:
        """Why `req` can never be served here, or None."""
        p, m = req.num_prompt_tokens, req.max_tokens
        limit = self.config.max_model_len
        if p + m > limit:
            return f"prompt ({p} tokens) + max_tokens ({m}) = {p + m} exceeds max_model_len ({limit})"
        bm = self.block_manager
        kv = min(p + m - 1 + self.num_lookahead_tokens, limit)  # a proposer's lookahead slots too
        if not bm.can_ever_fit(kv):
            return (f"needs {bm.blocks_for(kv)} KV blocks for {kv} tokens but the GPU has "
                    f"{bm.num_gpu_blocks} ({bm.watermark_blocks} kept free by the watermark)")
        return None

    def add_request(self, req: "Request", now: float | None = None) -> bool:
        """Queue `req`, or reject it at once (FINISHED / REJECTED with `reject_reason`). True if queued."""
        if req.req_id in self.requests:
            raise ValueError(f"req_id: {req.req_id!r} is already in the scheduler")
        why = self.reject_reason(req)
        if why is not None:
            req.finish(FinishReason.REJECTED, req.arrival_time if now is None else now, why)
            return False
        self.requests[req.req_id] = req
        req.arrival_order = next(self._arrivals)
        self.waiting.push(req)
        return True

    def abort_request(self, req_id, now: float) -> "Request | None":
        """Cancel a live request: its blocks are freed at once; it ends FINISHED / ABORTED."""
        return self.finish_request(req_id, FinishReason.ABORTED, now)

    def finish_request(self, req_id, reason: FinishReason, now: float) -> "Request | None":
        """End a live request now for `reason`: off its queue, its blocks freed, FINISHED (None if
        `req_id` is not live here).

        For requests that end outside `update`: a client gone (`abort_request`), or the simulator's
        replayed decode steps (`sim.decode_replay`), whose requests reach max_tokens (LENGTH).
        """
        req = self.requests.get(req_id)
        if req is None:
            return None
        if req.state in (_CTX, _GEN):
            self.running.remove(req)
        elif req.is_swapped:
            self.swapped.remove(req)
        elif not self.transfers.release(req_id):  # else held for a load (released)
            self.waiting.remove(req)
        self._finish(req, reason, now)
        return req

    def _finish(self, req: "Request", reason: FinishReason, now: float, why: str | None = None) -> None:
        self.block_manager.free(req, finished=True)
        self.transfers.release_stores(req, now)  # its copies in the CPU tier can be found from now on
        # its cached blocks are found by hash from now on: a finished request (which results keep)
        # need not carry a hash per block
        req.block_hashes = []
        req.is_swapped = False
        req.finish(reason, now, why)
        self.requests.pop(req.req_id, None)

    # --- the policy hook --------------------------------------------------------------------------
    def schedule(self, now: float) -> "BatchPlan":
        """The next step's plan (empty only when nothing can run).

        A pass that did nothing but preempt (e.g. the only candidate preempted itself) changed the
        state, so it is followed by another pass rather than returned as an empty plan, which a
        caller would read as "idle until the next arrival".
        """
        self.now = now
        if self.loading:
            for req in self.transfers.land(now):
                self.waiting.prepend(req)
        step = StepBuilder(self.token_budget)
        self._schedule_pass(step, now)
        while step.is_idle and step.preempted and self.has_unfinished():
            step.restart()
            self._schedule_pass(step, now)
        plan = step.finish(self.step_id, now)
        if self.block_manager.offload is not None:
            plan = self.transfers.attach(plan)
        if not plan.is_empty:
            self.step_id += 1
        return plan

    def _schedule_pass(self, step: StepBuilder, now: float) -> None:
        """Fill `step` by running the shared mechanisms in the policy's order."""
        raise NotImplementedError

    # --- shared mechanisms ------------------------------------------------------------------------
    def _chunk(self, num_remaining: int, budget: int) -> int:
        """How many of `num_remaining` owed tokens to schedule with `budget` left (0 = none)."""
        if self.whole_prompts:
            return num_remaining if num_remaining <= budget else 0
        t = self.long_prefill_token_threshold
        if 0 < t < num_remaining:
            num_remaining = t
        return num_remaining if num_remaining <= budget else budget

    def _schedule_running(self, step: StepBuilder) -> None:
        """Running requests in order (decodes: 1 token; partial prefills: a chunk); preempt on OOM."""
        running = self.running
        bm = self.block_manager
        allocate = bm.allocate_slots
        bs, caching, scheduled = bm.block_size, bm.enable_prefix_caching, step.scheduled
        spec = self.num_spec_tokens  # with drafts a decode takes the general path below
        look = self.num_lookahead_tokens
        # vLLM v0 (`append_needs_free_block`): with no free block every decode preempts, so none is hot
        full, free = self.append_needs_free_block, bm.free_queue
        i = 0
        if not scheduled and not spec and (free or not full):
            # the first stretch of hot decodes opens the plan: kept as one slice of `running`
            # (StepBuilder.leading), not entered request by request in `scheduled`
            budget, num_running = step.budget, len(running)
            while i < num_running and i < budget:
                req = running[i]
                c = req.num_computed_tokens
                if (req.num_prompt_tokens + len(req.output_token_ids) - c != 1 or c >= len(req.block_table) * bs
                        or (caching and (c + 1) % bs == 0)):
                    break
                i += 1
            if i:
                step.leading = running[:i]  # running decodes: c > 0 and first_scheduled_time set
                step.budget = budget - i
        while i < len(running) and step.budget > 0:
            # hot path: a stretch of decodes whose token fits the last block and completes no block
            # to cache (one token each; the budget kept in a local until the stretch ends)
            budget, num_running = step.budget, len(running)
            hot = free or not full  # nothing in the stretch allocates: fixed for its length
            while hot and i < num_running and budget > 0:
                req = running[i]
                c = req.num_computed_tokens
                if (req.num_prompt_tokens + len(req.output_token_ids) - c != 1 or c + look >= len(req.block_table) * bs
                        or (caching and (c + 1) % bs == 0) or (spec and req.spec_token_ids)):
                    break
                scheduled[req.req_id] = (req, 1)
                budget -= 1
                i += 1
            step.budget = budget
            if i >= num_running or budget <= 0:
                break
            req = running[i]
            remaining = req.num_prompt_tokens + len(req.output_token_ids) - req.num_computed_tokens
            drafts = req.spec_token_ids if spec else None
            if drafts:
                remaining += len(drafts)
            n = self._chunk(remaining, step.budget)
            if n <= 0:
                i += 1
                continue
            if drafts and n < remaining:  # vLLM: the drafts that do not fit the budget are dropped
                del drafts[max(n - (remaining - len(drafts)), 0):]
            ahead = min(look, self.config.max_model_len - req.num_computed_tokens - n) if look else 0
            while (full and not free) or not allocate(req, n, num_lookahead_tokens=ahead):
                victim = self.preemptor.pick_victim(running)
                vi = running.index(victim)
                self._preempt(victim, step)
                if victim is req:
                    break
                if vi < i:
                    i -= 1
            else:
                step.add(req, n)
                if drafts:
                    step.spec[req.req_id] = tuple(drafts)
                i += 1
                continue
            break  # the request itself was preempted: stop here, as vLLM v1 does

    def _schedule_swapped(self, step: StepBuilder) -> None:
        """Swap requests back in (before any new admission), in queue order, while they fit."""
        bm = self.block_manager
        while self.swapped and step.budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.swapped.peek()
            n = self._chunk(req.num_tokens - req.num_computed_tokens, step.budget)
            if n <= 0 or not bm.can_swap_in(req, n):
                break
            self.swapped.pop()
            step.swap_in_blocks.extend(bm.swap_in(req))
            bm.allocate(req, n)
            req.is_swapped = False
            step.swapped_in.append(req.req_id)
            step.resumed.add(req.req_id)
            req.mark_resumed(self.now)
            req.transition(_GEN if req.num_output_tokens and req.num_remaining_tokens == 1 else _CTX)
            self.running.append(req)
            step.add(req, n)

    def _schedule_waiting(self, step: StepBuilder) -> None:
        """Admit waiting requests in queue order while budget, seats and blocks (with watermark; with
        `reserve_full_isl`, the whole sequence's) allow."""
        bm = self.block_manager
        waiting = self.waiting
        offload = bm.offload
        deferred = []  # requests whose CPU-tier hits another request is loading: skipped this step
        while waiting and step.budget > 0:
            req = waiting.peek()
            if len(self.running) >= self.max_num_seqs:
                if self._preempt_for(req, step):
                    continue
                break
            # a request back from a native CPU-tier load holds its blocks and its loaded tokens
            loaded = req.num_computed_tokens
            cpu = 0
            if loaded:
                blocks, hit = [], 0
            else:
                blocks, hit = bm.get_computed_blocks(req)
                if offload is not None:
                    cpu = bm.offload_lookup(req, len(blocks), self.now) * bm.block_size
            if self.reserve_full_isl and not bm.can_allocate(req, req.num_tokens - loaded - hit, blocks,
                                                              use_watermark=True):
                if self._preempt_for(req, step):  # vLLM 0.19+: the whole known sequence must fit now
                    continue
                break
            if cpu and not offload.synchronous:  # native: allocate for the hits, compute once loaded
                first = len(blocks)
                if offload.is_busy(req.block_hashes[first:first + cpu // bm.block_size]):
                    # another request is loading these blocks: they will be GPU hits soon. vLLM's
                    # connector answers "not yet" (None) and its scheduler skips the request for this
                    # step, still admitting the ones behind it; the skipped one keeps its place
                    deferred.append(waiting.pop())
                    continue
                # a load holds its blocks, unpreemptible, until it lands: admitted only into the
                # blocks the prompts already in flight do not still need (vLLM's reserved_blocks),
                # else loads could share out the last blocks and none of them could go on
                if not bm.allocate_slots(req, cpu, blocks, use_watermark=True, delay_cache=True,
                                         reserved_blocks=self._inflight_prefill_blocks()):
                    if self._preempt_for(req, step):
                        continue
                    break
                waiting.pop()
                self._admitted(req, hit, cpu)
                self.transfers.start_load(req, len(blocks), cpu, self.now)
                continue
            n = self._chunk(req.num_tokens - loaded - hit - cpu, step.budget)
            if n <= 0 or (self.max_paddings and not self._padded_fits(step, n)):
                break
            # vLLM reserves the lookahead for a request with tokens computed before (a landed load)
            ahead = min(self.num_lookahead_tokens, self.config.max_model_len - loaded - n) if loaded else 0
            if not bm.allocate_slots(req, cpu + n, blocks, use_watermark=True, num_lookahead_tokens=ahead):
                if self._preempt_for(req, step):
                    continue
                break
            waiting.pop()
            if not loaded:
                self._admitted(req, hit, cpu)
                if cpu:  # lmcache: loaded in this step, before its forward pass
                    self.transfers.start_load(req, len(blocks), cpu, self.now)
            req.transition(_CTX)
            if req.preempted_at is not None:  # back after a recompute preemption
                req.mark_resumed(self.now)
            self.running.append(req)
            step.resumed.add(req.req_id)
            step.add(req, n)
        for req in reversed(deferred):
            waiting.prepend(req)
        if self.max_paddings:
            self._pad_prompts(step)

    def _inflight_prefill_blocks(self) -> int:
        """Blocks the requests part-way through their known tokens (prompt, or prompt and outputs
        after a recompute) still need to hold them all: running prefills, native loads in flight and
        landed loads not yet running (vLLM's `_inflight_prefill_reserved_blocks`, with its cap at
        max_model_len). Decodes are not counted; they grow a block at a time and can be preempted."""
        bm = self.block_manager
        limit = self.config.max_model_len
        owed = 0
        for req in bm.holders.values():
            if req.state is _GEN:
                continue
            n = bm.blocks_for(min(req.num_tokens, limit)) - len(req.block_table)
            if n > 0:
                owed += n
        return owed

    def _admitted(self, req: "Request", hit: int, cpu: int) -> None:
        """Count an admission's prefix hits (GPU `hit` and CPU-tier `cpu` tokens), now computed."""
        bm = self.block_manager
        if bm.enable_prefix_caching:
            bm.record_prefix_lookup(req.num_tokens, hit)
        if req.first_scheduled_time is None:
            req.num_cached_tokens = hit
            req.num_cpu_cached_tokens = cpu
        req.num_computed_tokens = hit + cpu

    # --- the KV offload tier ------------------------------------------------------------------------
    def next_wakeup(self) -> float | None:
        """When the earliest native load in flight lands (None when none is): an idle replica sleeps
        until then or the next arrival."""
        return self.transfers.next_wakeup()

    def offload_seconds(self, plan: "BatchPlan") -> float:
        """Seconds the plan's offload copies add to its step (lmcache's synchronous copies; 0 for native)."""
        tier = self.block_manager.offload
        if tier is None:
            return 0.0
        return tier.step_seconds(len(plan.offload_load_blocks), len(plan.offload_store_blocks))

    def _padded_fits(self, step: StepBuilder, n: int) -> bool:
        """Padded prompt batches (`max_paddings`, `continuous` only, where a step's admissions are all
        of its prompts): may an `n`-token prompt join? The batch padded to its longest prompt must fit
        the budget, (prompts) x (longest), and its padding, sum(longest - len_i), `max_paddings`."""
        lens = [k for _, k in step.scheduled.values()]
        count, longest, total = len(lens) + 1, max(lens + [n]), sum(lens) + n
        return count * longest <= self.token_budget and count * longest - total <= self.max_paddings

    def _pad_prompts(self, step: StepBuilder) -> None:
        """Each prompt shorter than the step's longest gets a padding entry of the missing tokens
        (after its own positions, as `static` writes them), so latency models charge the padded batch."""
        prompts = list(step.scheduled.values())
        longest = max((n for _, n in prompts), default=0)
        for req, n in prompts:
            if n < longest:
                step.padding.append(ScheduledSeq(req, longest - n, req.num_computed_tokens + n, False, is_padding=True))

    def _preempt_for(self, req: "Request", step: StepBuilder) -> bool:
        """Priority queue: preempt the lowest-priority, newest running request below `req`'s priority."""
        if self.config.queue != "priority" or not self.priority_admission_preemption:
            return False
        exclude = step.resumed
        bm = self.block_manager
        if bm.cached:  # a request admitted in this step may share blocks a running one computes in it
            exclude = exclude | {r.req_id for r in self.running if bm.lends_uncomputed(r)}
        victim = self.preemptor.pick_priority_victim(self.running, req, exclude)
        if victim is None:
            return False
        self._preempt(victim, step)
        return True

    def _preempt(self, victim: "Request", step: StepBuilder) -> None:
        """Take `victim` off the GPU by swap or recompute; it waits again (swapped requests resume first)."""
        bm = self.block_manager
        self.running.remove(victim)
        step.undo(victim)
        victim.spec_token_ids = []  # vLLM: a preempted request's drafts are dropped
        victim.num_preemptions += 1
        victim.transition(RequestState.PREEMPTED)
        victim.mark_preempted(self.now)
        self.transfers.release_stores(victim, self.now)  # vLLM completes a preempted request's stores
        if self.preemptor.mode_for(victim, bm) == SWAP:
            step.swap_out_blocks.extend(bm.swap_out(victim))
            step.swapped_out.append(victim.req_id)
            victim.is_swapped = True
            victim.num_swaps += 1
            victim.transition(RequestState.WAITING)
            self.swapped.prepend(victim)
        else:
            bm.free(victim)
            victim.num_computed_tokens = 0
            victim.num_recomputes += 1
            step.preempted.append(victim.req_id)
            victim.transition(RequestState.WAITING)
            self.waiting.insert(self._num_landed_ahead(), victim)

    def _num_landed_ahead(self) -> int:
        """How many requests at the head of the waiting queue are native loads that have landed
        (they hold their loaded blocks). A request preempted for recompute goes back behind them, not
        in front: vLLM keeps them in its `skipped_waiting` queue, scheduled before `waiting` under
        fcfs; in front, a victim too big for the free blocks would stop the scan while they hold the
        blocks it needs, and nothing would run again."""
        if self.block_manager.offload is None:
            return 0
        n = 0
        for req in self.waiting:
            if not req.block_table:
                break
            n += 1
        return n

    # --- after the step ---------------------------------------------------------------------------
    def update(self, plan: "BatchPlan", result: "StepResult", now: float) -> list["Request"]:
        """Record one token per sampling sequence at `now`; finish and free the finished ones."""
        finished = []
        if self.transfers.has_unsettled:
            self.transfers.settle(plan, now)
        if plan.seqs:
            if self.num_spec_tokens:
                self._record_spec_tokens(plan, result, now, finished)
            else:
                self._record_tokens(plan.sampling_requests(), result, now, finished)
        if finished:
            self.running = [r for r in self.running if r.state is not _FINISHED]
            self._on_finished(finished)
        return finished

    def _record_tokens(self, requests, result: "StepResult", now: float, finished: list) -> None:
        """One sampled token for each of `requests` (in order) at `now`; the finished ones are freed."""
        sampled = result.sampled_token_ids
        stopped = result.stopped
        if sampled is None and not stopped:  # the simulator: placeholder tokens, no stop tokens
            for req in requests:
                if req.state is not _GEN:
                    break  # the general loop below takes over from this request
                out = req.output_token_ids
                out.append(0)
                req.token_times.append(now)
                if len(out) >= req.max_tokens:
                    self._finish(req, FinishReason.LENGTH, now)
                    finished.append(req)
            else:
                return
            requests = requests[requests.index(req):]
        for req in requests:
            state = req.state
            if state is not _GEN and state is not _CTX:
                continue  # aborted (or otherwise gone) since the plan was made
            out = req.output_token_ids  # inlined Request.record_token (hot path)
            out.append(0 if sampled is None else sampled.get(req.req_id, 0))
            req.token_times.append(now)
            if state is _CTX:
                req.transition(_GEN)
                if req.first_token_time is None:
                    req.first_token_time = now
            if len(out) >= req.max_tokens:
                reason = FinishReason.LENGTH
            elif stopped and req.req_id in stopped and not req.ignore_eos:
                reason = FinishReason.STOP
            else:
                continue
            self._finish(req, reason, now)
            finished.append(req)

    def _record_spec_tokens(self, plan: "BatchPlan", result: "StepResult", now: float, finished: list) -> None:
        """`_record_tokens` with speculative decoding: a verify sequence keeps its accepted drafts
        and then the sampled token (all at `now`); its rejected drafts leave its computed tokens (the
        blocks that held them stay its own); every request that goes on gets its next drafts."""
        sampled, stopped, accepted_of = result.sampled_token_ids, result.stopped, result.num_accepted
        drafts_of = plan.spec_token_ids
        for req in plan.sampling_requests():
            state = req.state
            if state is not _GEN and state is not _CTX:
                continue  # aborted (or otherwise gone) since the plan was made
            out = req.output_token_ids
            drafts = drafts_of.get(req.req_id) if drafts_of else None
            if drafts:
                d = len(drafts)
                if accepted_of is not None:
                    a = accepted_of.get(req.req_id, 0)
                elif self.acceptance is not None:
                    a = self.acceptance(d)
                else:
                    raise RuntimeError("speculative decoding: the executor reported no accepted drafts "
                                       "(StepResult.num_accepted) and the scheduler has no acceptance sampler")
                if not 0 <= a <= d:
                    raise ValueError(f"request {req.req_id}: {a} drafts accepted of {d}")
                req.num_drafts += 1
                req.num_draft_tokens += d
                req.num_accepted_tokens += a
                req.num_computed_tokens -= d - a
                if a:
                    out.extend(drafts[:a])
                    req.token_times.extend([now] * a)
            out.append(0 if sampled is None else sampled.get(req.req_id, 0))
            req.token_times.append(now)
            if state is _CTX:
                req.transition(_GEN)
                if req.first_token_time is None:
                    req.first_token_time = now
            if len(out) >= req.max_tokens:
                reason = FinishReason.LENGTH
            elif stopped and req.req_id in stopped and not req.ignore_eos:
                reason = FinishReason.STOP
            else:
                # the blocks past its computed tokens stay with it (vLLM v1's block tables only grow):
                # the next steps write their tokens there
                left = req.max_tokens - len(out) - 1  # the verify's own token needs no draft
                if left > 0:
                    proposed = self.proposer(req)
                    req.spec_token_ids = list(proposed[:min(self.num_spec_tokens, left)])
                else:
                    req.spec_token_ids = []
                continue
            req.spec_token_ids = []
            self._finish(req, reason, now)
            finished.append(req)

    def _on_finished(self, finished: list["Request"]) -> None:
        """Hook for policies that track finished requests (static batching)."""

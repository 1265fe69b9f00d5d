"""`static`: the static-batching baseline (request-level batching, as before Orca).

A batch forms only when the engine is idle: up to `static_max_batch_size` (default `max_num_seqs`)
waiting requests in queue order, while the padded prefill (batch size x longest prompt) fits in
the step budget (`max_num_batched_tokens`, at least `max_model_len`) and every member's worst-case KV (prompt + max_tokens - 1 tokens) fits in
the free GPU blocks (minus the watermark), so a batch never needs preemption. The batch then runs
until its longest member finishes; nothing joins meanwhile.

Padding is explicit in the plan, so a latency model charges it and metrics can report the wasted
fraction: in the prefill step each member shorter than the longest prompt gets a
`ScheduledSeq(is_padding=True)` of the missing tokens; in every later step each finished member gets
a 1-token padding entry whose context is the padded length, and each live member shorter than the
longest prompt reads the padded context too (`BatchPlan.padding_context`: the padded keys/values
beyond its own): a static engine's KV is one rectangle, batch x (longest prompt + steps), and every
decode attends over its whole row, pads masked but read (HF `generate` left-pads a batch of
prompts to the longest; FasterTransformer's decoder attention runs each step over the padded
length). Padding entries point at their member's
Request (possibly finished, holding no blocks); an engine may skip them. Finished members free their
blocks at once (the KV accounting tracks only live tokens). Static batching ignores the prefix cache.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from policies.batch_plan import ScheduledSeq
from policies.request import RequestState
from policies.scheduler import Scheduler
from policies.step_builder import StepBuilder

if TYPE_CHECKING:
    from policies.config import CacheConfig, SchedulerConfig
    from policies.request import Request


class StaticScheduler(Scheduler):
    """Form a padded batch when idle; run it to completion."""

    whole_prompts = True

    def __init__(self, config: "SchedulerConfig", cache: "CacheConfig", speculative=None) -> None:
        super().__init__(config, cache, speculative)
        self.block_manager.enable_prefix_caching = False  # padded batches recompute everything
        self.block_manager.offload = None  # nor do they load prefixes from a CPU tier
        size = config.static_max_batch_size or config.max_num_seqs
        self.batch_size = min(size, config.max_num_seqs)
        self.batch: list[Request] = []  # every member of the current batch, finished ones included
        self.batch_prompt_len = 0  # the longest prompt: every member is padded to it
        self.num_batch_steps = 0  # steps the current batch has run

    def _schedule_pass(self, step: StepBuilder, now: float) -> None:
        if self.running:
            self._decode_batch(step)
        else:  # idle: the previous batch is done
            self._form_batch(step)

    def _form_batch(self, step: StepBuilder) -> None:
        bm = self.block_manager
        free = bm.num_free_gpu_blocks - bm.watermark_blocks
        members: list[Request] = []
        longest = reserved = 0
        while self.waiting and len(members) < self.batch_size:
            req = self.waiting.peek()
            padded = max(longest, req.num_prompt_tokens)
            if (len(members) + 1) * padded > self.token_budget:
                break
            need = bm.blocks_for(req.num_prompt_tokens + req.max_tokens - 1)
            if reserved + need > free:
                break
            self.waiting.pop()
            members.append(req)
            longest, reserved = padded, reserved + need
        for req in members:
            p = req.num_prompt_tokens
            bm.allocate(req, p)
            req.transition(RequestState.RUNNING_CTX)
            self.running.append(req)
            step.add(req, p)
            if longest > p:
                step.padding.append(ScheduledSeq(req, longest - p, p, False, is_padding=True))
        self.batch = members
        self.batch_prompt_len = longest
        self.num_batch_steps = 0

    def _decode_batch(self, step: StepBuilder) -> None:
        self.num_batch_steps += 1
        padded_context = self.batch_prompt_len + self.num_batch_steps - 1
        bm = self.block_manager
        for req in self.batch:
            if req.state is RequestState.FINISHED:
                step.padding.append(ScheduledSeq(req, 1, padded_context, False, is_padding=True))
            else:
                n = req.num_tokens - req.num_computed_tokens
                bm.allocate(req, n)  # reserved at batch formation: cannot fail
                step.add(req, n)
                step.padding_context += self.batch_prompt_len - req.num_prompt_tokens  # its row's pads

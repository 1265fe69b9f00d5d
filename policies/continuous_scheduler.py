"""`continuous`: iteration-level batching as in Orca / vLLM v0 without chunked prefill.

Finished requests leave and waiting ones join at every step, but a prompt is always prefilled
whole (so the step budget is at least `max_model_len`, as vLLM v0 requires without chunking). We follow vLLM v0's `_schedule_default`: if nothing is swapped out, admit whole prompts
first; a step that admitted any prefill is prefill-only (the running decodes wait one step);
otherwise run the decodes (preempting on OOM) and, if nobody was preempted, swap requests back in.

A decode goes ahead only while at least one GPU block is free, whether or not its token needs a new
block: v0's `BlockSpaceManager.can_append_slot(s)` asks for one free block per running sequence
(0.2-0.5's v1 block manager: "Simple heuristic"; 0.6's v2 manager counts the blocks an append
touches, 1 for one token). With none free, the newest running request is preempted, so v0 preempts
as soon as the pool is full rather than at the next block boundary.

Padded prompt batches (`SchedulerConfig.max_paddings` > 0; vLLM 0.2.2-0.3, whose prefill kernels
took a rectangular batch): a prompt joins the step's batch only while the batch padded to its
longest prompt, (number of prompts) x (longest), fits `max_num_batched_tokens` and its padding,
sum(longest - len_i), stays within `max_paddings` (`Scheduler._padded_fits`). The padding is
explicit in the plan, as the `static` policy writes it: each shorter prompt gets a
`ScheduledSeq(is_padding=True)` of the missing tokens, so a latency model charges the padded batch.
0 (the default) keeps the unpadded budget of later v0 releases (a run of a release that was not
recorded may show no cap at all: its limits come from the run, not from this policy).
"""
from __future__ import annotations

from policies.scheduler import Scheduler
from policies.step_builder import StepBuilder


class ContinuousScheduler(Scheduler):
    """Prefill-first iteration-level batching with whole prompts (optionally padded batches)."""

    decode_runs = True  # an all-decode state with nothing admissible schedules every decode (Scheduler docs)

    whole_prompts = True
    append_needs_free_block = True  # v0's can_append_slot(s): see the module docstring

    def _schedule_pass(self, step: StepBuilder, now: float) -> None:
        if not self.swapped:
            self._schedule_waiting(step)
        if not step.scheduled:
            self._schedule_running(step)
            if not step.num_preempted:
                self._schedule_swapped(step)

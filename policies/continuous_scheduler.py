"""`continuous`: iteration-level batching as in Orca / vLLM v0 without chunked prefill.

Finished requests leave and waiting ones join at every step, but a prompt is always prefilled
whole (so the step budget is at least `max_model_len`, as vLLM v0 requires without chunking). We follow vLLM v0's `_schedule_default`: if nothing is swapped out, admit whole prompts
first; a step that admitted any prefill is prefill-only (the running decodes wait one step);
otherwise run the decodes (preempting on OOM) and, if nobody was preempted, swap requests back in.
"""
from __future__ import annotations

from policies.scheduler import Scheduler
from policies.step_builder import StepBuilder


class ContinuousScheduler(Scheduler):
    """Prefill-first iteration-level batching with whole prompts."""

    decode_runs = True  # an all-decode state with nothing admissible schedules every decode (Scheduler docs)

    whole_prompts = True

    def _schedule_pass(self, step: StepBuilder, now: float) -> None:
        if not self.swapped:
            self._schedule_waiting(step)
        if not step.scheduled:
            self._schedule_running(step)
            if not step.num_preempted:
                self._schedule_swapped(step)

"""`chunked` (Sarathi-Serve / vLLM v1) and the `vllm` preset policy.

Each step: running requests first, in order (decodes 1 token each, partial prefills a chunk), then,
if nobody was preempted, swapped requests back in, then new requests from the waiting queue, all
within `max_num_batched_tokens` and `max_num_seqs`. A prompt is split across steps by whatever budget
is left (clamped to `long_prefill_token_threshold` if set). Mixed prefill + decode steps are the norm.

A swapped request that cannot come back yet does not hold up the waiting queue: swapping is vLLM
v0's, and v0's chunked-prefill scheduler (`_schedule_chunked_prefill`, 0.4-0.8) admits new prefills
whatever is left swapped (only its prefill-first `_schedule_default`, our `continuous`, waits for
the swapped queue to empty). Otherwise a swapped low-priority request would keep a waiting
high-priority one out while the GPU has room for it.
"""
from __future__ import annotations

from policies.scheduler import Scheduler
from policies.step_builder import StepBuilder


class ChunkedScheduler(Scheduler):
    """Decode-first chunked prefill (stall-free batching)."""

    decode_runs = True  # an all-decode state with nothing admissible schedules every decode (Scheduler docs)
    supports_speculative = True
    mixed_runs = True  # running first, then swapped, then waiting, prompts split (sim.mixed_replay)

    def _schedule_pass(self, step: StepBuilder, now: float) -> None:
        self._schedule_running(step)
        if not step.num_preempted:  # vLLM v1: no admissions in a step that had to preempt
            self._schedule_swapped(step)
            self._schedule_waiting(step)  # even with requests left swapped (module docstring)


class VllmScheduler(ChunkedScheduler):
    """vLLM v1's scheduler: chunked, prefix caching on unless turned off, recompute-only preemption
    (enforced by `SchedulerConfig`), and new admissions never preempt (head-of-line blocking, even
    with the priority queue; priority only picks the victim when a running request cannot grow).
    Block 0 of the pool is v1's null block (`BlockManager`), so `cache.num_gpu_blocks` counts it.
    With `enable_chunked_prefill` false, prompts are whole (`whole_prompts`): decodes still come
    first and whole prompts join them in the same step; the first prompt that does not fit the
    budget left stops admission for the step (vLLM 0.12+'s `break`), unlike `continuous`, vLLM v0's
    prefill-first steps.
    """

    priority_admission_preemption = False
    default_prefix_caching = True
    # v1's BlockPool keeps one block as its null block (every release from 0.8.3; the v1 presets
    # start at 0.11): of the blocks vLLM reports, one fewer hold KV
    null_block = True

"""What one step computes: the immutable `BatchPlan` and the executor's `StepResult`.

The scheduler produces a plan; the executor (the simulator's latency model or the real engine)
turns it into a duration and sampled tokens; the scheduler's `update` consumes both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, NamedTuple

if TYPE_CHECKING:
    from policies.request import Request


class ScheduledSeq(NamedTuple):
    """One sequence's share of a step.

    The step computes positions [num_computed_tokens, num_computed_tokens + num_tokens) of the
    request's prompt + output tokens. `num_computed_tokens` is the context already in the KV cache
    *before* this step (the scheduler advances the request itself at schedule time, as vLLM v1 does).
    `samples` is True when the chunk reaches the end of the known tokens, so the step yields an
    output token for this request. Padding sequences (the `static` baseline's finished slots) cost
    compute but belong to no live work.

    A NamedTuple (immutable, and cheap to build: the scheduler makes one per sequence per step).
    """

    request: "Request"
    num_tokens: int
    num_computed_tokens: int
    samples: bool
    is_padding: bool = False

    @property
    def req_id(self) -> int | str:
        return self.request.req_id

    @property
    def is_decode(self) -> bool:
        """A single new token after a non-empty context: the memory-bound decode shape."""
        return self.num_tokens == 1 and self.num_computed_tokens > 0

    @property
    def context_len(self) -> int:
        """Keys/values this sequence attends to by the end of the step."""
        return self.num_computed_tokens + self.num_tokens


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """One step's work: who computes how many tokens, and which KV blocks move.

    `seqs` is in the order the engine packs them (vLLM v1 order: running first, then new). Block
    moves are `(src_block, dst_block)` pairs: swap-in copies CPU->GPU, swap-out copies GPU->CPU.
    Apply them in that order (swap-in first, as vLLM v0's worker does: a CPU block a swap-in frees
    may be the destination of a swap-out in the same step), both before the step's forward pass.
    `preempted` lists requests preempted by recompute this step (their blocks were simply freed).
    Padding entries (`is_padding=True`, static batching) point at their batch member's Request,
    which may be finished and hold no blocks: an engine may skip them; a latency model charges them.

    `offload_load_blocks` are (cpu_block, gpu_block) copies from the KV offload tier into GPU blocks,
    applied before the forward pass; `offload_store_blocks` are (gpu_block, cpu_block) copies of the
    blocks this step fills, applied after it (the data is this step's). See `policies.kv_offload`.

    `decodes` (the simulator's grouped form, only when the scheduler's `group_decodes` is set:
    never for an engine) stands for leading sequences, before `seqs`, each a one-token decode that
    samples: the request's `num_computed_tokens` already counts the token, and `decode_context_sum`
    is the sum of their context lengths (new token included). The properties below count them; a
    consumer reading `seqs` itself must handle them (the simulator enables the grouped form only
    with latency models that declare `grouped_decodes`).
    """

    step_id: int
    seqs: tuple[ScheduledSeq, ...] = ()
    preempted: tuple[int | str, ...] = ()
    swapped_out: tuple[int | str, ...] = ()
    swapped_in: tuple[int | str, ...] = ()
    swap_out_blocks: tuple[tuple[int, int], ...] = ()
    swap_in_blocks: tuple[tuple[int, int], ...] = ()
    blocks_to_copy: tuple[tuple[int, int], ...] = ()  # copy-on-write (unused by v1-style prefix caching)
    decodes: tuple["Request", ...] = ()  # grouped leading one-token decodes (see the class docstring)
    decode_context_sum: int = 0
    offload_load_blocks: tuple[tuple[int, int], ...] = ()  # (cpu, gpu) from the KV offload tier
    offload_store_blocks: tuple[tuple[int, int], ...] = ()  # (gpu, cpu) to the KV offload tier

    @property
    def is_empty(self) -> bool:
        return (not self.seqs and not self.decodes and not self.swap_out_blocks and not self.swap_in_blocks
                and not self.offload_load_blocks and not self.offload_store_blocks)

    @property
    def has_compute(self) -> bool:
        """True when the step runs a forward pass or a swap (not only offload copies)."""
        return bool(self.seqs or self.decodes or self.swap_out_blocks or self.swap_in_blocks)

    @property
    def all_seqs(self) -> tuple[ScheduledSeq, ...]:
        """`seqs` with the grouped decodes written out as `ScheduledSeq`s (in plan order)."""
        if not self.decodes:
            return self.seqs
        return tuple(ScheduledSeq(r, 1, r.num_computed_tokens - 1, True) for r in self.decodes) + self.seqs

    @property
    def num_scheduled_tokens(self) -> dict[int | str, int]:
        """`{req_id: num_tokens}` for the live (non-padding) sequences."""
        return {s.request.req_id: s.num_tokens for s in self.all_seqs if not s.is_padding}

    @property
    def num_tokens(self) -> int:
        """All tokens the forward pass computes, padding included."""
        return sum(s.num_tokens for s in self.seqs) + len(self.decodes)

    @property
    def num_live_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs if not s.is_padding) + len(self.decodes)

    @property
    def num_padding_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs if s.is_padding)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs if not s.is_decode and not s.is_padding)

    @property
    def num_decode_tokens(self) -> int:
        return sum(1 for s in self.seqs if s.is_decode and not s.is_padding) + len(self.decodes)

    @property
    def num_seqs(self) -> int:
        return len(self.seqs) + len(self.decodes)

    def swap_bytes(self, bytes_per_block: int) -> tuple[int, int]:
        """(bytes out to CPU, bytes in to GPU) this step, for a KV block of `bytes_per_block`."""
        return len(self.swap_out_blocks) * bytes_per_block, len(self.swap_in_blocks) * bytes_per_block


@dataclass(frozen=True, slots=True)
class StepResult:
    """What the executor reports back after running a plan.

    `duration` is seconds of (simulated or measured) time. `sampled_token_ids` maps req_id -> the
    token sampled for each sequence whose `samples` was True; the simulator passes None and the
    scheduler records placeholder tokens. `stopped` names requests whose sampled token was a stop
    token (EOS), which finish with reason STOP.
    """

    duration: float
    sampled_token_ids: Mapping[int | str, int] | None = None
    stopped: frozenset = frozenset()

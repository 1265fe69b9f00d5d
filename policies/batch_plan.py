"""What one step computes: the immutable `BatchPlan` and the executor's `StepResult`.

The scheduler produces a plan; the executor (the simulator's latency model or the real engine)
turns it into a duration and sampled tokens; the scheduler's `update` consumes both. A plan's
sequences are one list (`seqs`) that every executor reads alike, with its sums (`totals`) beside
it; the scheduler keeps a step's opening decodes compact in it (`ScheduledSeqs`), since a
simulated step of many decodes would otherwise spend most of its time building their entries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Sequence

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


class PlanTotals(NamedTuple):
    """A plan's sums, read by the step records and latency models (`BatchPlan.totals`).

    Counts of live work (`num_prefill_tokens`, `num_decode_tokens`: one per decode, `num_outputs`:
    live sequences that sample) leave padding out; the attention sums count work by its shape as
    the device computes it, padding included: `decode_context` (keys/values read by the one-token
    decodes after some context), `prefill_tokens`, `prefill_pairs` (causal query-key pairs,
    n x c + n (n + 1) / 2 for a chunk of n after c) and `prefill_context` (keys/values the other
    chunks read). `num_spec_tokens` counts the draft tokens the step verifies (speculative
    decoding); a verify sequence (1 + drafts query tokens after its context) counts in the decode
    tokens, and in the attention sums as the multi-query chunk it is.
    """

    num_tokens: int
    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_padding_tokens: int
    num_padding_seqs: int
    num_outputs: int
    decode_context: int
    prefill_tokens: int
    prefill_pairs: int
    prefill_context: int
    num_spec_tokens: int = 0


class ScheduledSeqs:
    """A step's sequences in pack order, as the scheduler builds them: one list of `ScheduledSeq`.

    The running decodes that open a step (each computes one token after `contexts[i]` cached ones
    and samples: the most common entries of a step) are held as their requests and contexts, and
    the other entries as `ScheduledSeq`s. Iterating, indexing and len() see one list of
    `ScheduledSeq` (the leading ones built on first use), equal to the tuple of the same entries;
    `BatchPlan.totals` and `BatchPlan.sampling_requests` count the compact ones without building
    them, which is what keeps a simulated step of many decodes cheap. (A plain class rather than a
    `collections.abc.Sequence`: the plan's readers test its type once per step.)
    """

    __slots__ = ("decodes", "contexts", "rest", "_entries")

    def __init__(self, decodes: list, contexts: list, rest: tuple[ScheduledSeq, ...]) -> None:
        self.decodes = decodes  # requests, each decoding one token that samples
        self.contexts = contexts  # their num_computed_tokens before the step
        self.rest = rest
        self._entries: tuple[ScheduledSeq, ...] | None = None

    def entries(self) -> tuple[ScheduledSeq, ...]:
        """Every sequence as a tuple of `ScheduledSeq`."""
        if self._entries is None:
            new = tuple.__new__
            self._entries = tuple(new(ScheduledSeq, (r, 1, c, True, False))
                                  for r, c in zip(self.decodes, self.contexts)) + self.rest
        return self._entries

    def __len__(self) -> int:
        return len(self.decodes) + len(self.rest)

    def __getitem__(self, index):
        return self.entries()[index]

    def __iter__(self):
        return iter(self.entries())

    def __eq__(self, other) -> bool:
        if isinstance(other, ScheduledSeqs):
            other = other.entries()
        return isinstance(other, tuple) and self.entries() == other

    def __hash__(self) -> int:
        return hash(self.entries())

    def __repr__(self) -> str:
        return repr(self.entries())


def plan_totals(seqs: "Sequence[ScheduledSeq]") -> PlanTotals:
    """The `PlanTotals` of a step's sequences (a `ScheduledSeqs` or any sequence of entries)."""
    num_tokens = num_seqs = num_prefill = num_decode = num_padding = padding_seqs = num_outputs = 0
    dec_ctx = pf_tokens = pf_pairs = pf_ctx = 0
    if type(seqs) is ScheduledSeqs:  # the leading decodes, counted without their entries
        m = len(seqs.decodes)
        num_tokens = num_seqs = num_decode = num_outputs = m
        dec_ctx = sum(seqs.contexts) + m
        seqs = seqs.rest
    for _, n, c, samples, padding in seqs:  # (request, num_tokens, num_computed, samples, is_padding)
        num_tokens += n
        num_seqs += 1
        if padding:
            num_padding += n
            padding_seqs += 1
        elif samples:
            num_outputs += 1
        if n == 1 and c > 0:  # decode: one query over the context
            dec_ctx += c + 1
            if not padding:
                num_decode += 1
        else:
            pf_tokens += n
            pf_pairs += n * c + n * (n + 1) // 2
            pf_ctx += c + n
            if not padding:
                num_prefill += n
    return tuple.__new__(PlanTotals, (num_tokens, num_seqs, num_prefill, num_decode, num_padding, padding_seqs,
                                      num_outputs, dec_ctx, pf_tokens, pf_pairs, pf_ctx, 0))


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """One step's work: who computes how many tokens, and which KV blocks move.

    `seqs` is in the order the engine packs them (vLLM v1 order: running first, then new): one
    list of `ScheduledSeq`, decodes included, which every executor (the engine, the simulator's
    latency models and its step records) reads the same way: the scheduler builds it as a
    `ScheduledSeqs` when running decodes open the step, a tuple otherwise (so may a hand-made
    plan); `totals` has its sums. Block
    moves are `(src_block, dst_block)` pairs: swap-in copies CPU->GPU, swap-out copies GPU->CPU.
    Apply them in that order (swap-in first, as vLLM v0's worker does: a CPU block a swap-in frees
    may be the destination of a swap-out in the same step), both before the step's forward pass.
    `preempted` lists requests preempted by recompute this step (their blocks were simply freed).
    Padding entries (`is_padding=True`, static batching) point at their batch member's Request,
    which may be finished and hold no blocks: an engine may skip them; a latency model charges them,
    and `padding_context`, the padded keys/values its live decodes read beyond their own contexts.

    `offload_load_blocks` are (cpu_block, gpu_block) copies from the KV offload tier into GPU blocks,
    applied before the forward pass; `offload_store_blocks` are (gpu_block, cpu_block) copies of the
    blocks this step fills, applied after it (the data is this step's). See `policies.kv_offload`.

    `spec_token_ids` (speculative decoding; vLLM's `scheduled_spec_decode_tokens`): req_id -> the
    draft tokens its sequence verifies this step, after its last known token (the sequence's
    `num_tokens` is 1 + drafts; it samples). See `policies.speculative`.
    """

    step_id: int
    seqs: "Sequence[ScheduledSeq]" = ()
    preempted: tuple[int | str, ...] = ()
    swapped_out: tuple[int | str, ...] = ()
    swapped_in: tuple[int | str, ...] = ()
    swap_out_blocks: tuple[tuple[int, int], ...] = ()
    swap_in_blocks: tuple[tuple[int, int], ...] = ()
    blocks_to_copy: tuple[tuple[int, int], ...] = ()  # copy-on-write (unused by v1-style prefix caching)
    offload_load_blocks: tuple[tuple[int, int], ...] = ()  # (cpu, gpu) from the KV offload tier
    offload_store_blocks: tuple[tuple[int, int], ...] = ()  # (gpu, cpu) to the KV offload tier
    spec_token_ids: Mapping[int | str, tuple[int, ...]] | None = None  # req_id -> drafts verified this step
    # keys/values the live decodes read over padding, past their own contexts (static batching: each
    # member attends over the batch's padded prompt); no tokens, no sequences: only `decode_context`
    padding_context: int = 0
    _totals: PlanTotals | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def totals(self) -> PlanTotals:
        """`plan_totals(seqs)`, computed once."""
        t = self._totals
        if t is None:
            t = plan_totals(self.seqs)
            spec = self.spec_token_ids
            if spec:  # verify sequences are decodes of 1 + drafts tokens (see PlanTotals)
                verify = sum(s[1] for s in self.seqs if not s[4] and s[0].req_id in spec)
                t = t._replace(num_prefill_tokens=t.num_prefill_tokens - verify,
                               num_decode_tokens=t.num_decode_tokens + verify,
                               num_spec_tokens=sum(map(len, spec.values())))
            if self.padding_context:
                t = t._replace(decode_context=t.decode_context + self.padding_context)
            object.__setattr__(self, "_totals", t)
        return t

    def sampling_requests(self) -> list["Request"]:
        """The requests of the sequences that sample, in plan order (a list not to be changed)."""
        seqs = self.seqs
        if type(seqs) is ScheduledSeqs:
            rest = seqs.rest
            return seqs.decodes + [s[0] for s in rest if s[3]] if rest else seqs.decodes
        return [s[0] for s in seqs if s[3]]

    @property
    def is_empty(self) -> bool:
        return (not self.seqs and not self.swap_out_blocks and not self.swap_in_blocks
                and not self.offload_load_blocks and not self.offload_store_blocks)

    @property
    def has_compute(self) -> bool:
        """True when the step runs a forward pass or a swap (not only offload copies)."""
        return bool(self.seqs or self.swap_out_blocks or self.swap_in_blocks)

    @property
    def num_scheduled_tokens(self) -> dict[int | str, int]:
        """`{req_id: num_tokens}` for the live (non-padding) sequences."""
        return {s.request.req_id: s.num_tokens for s in self.seqs if not s.is_padding}

    @property
    def num_tokens(self) -> int:
        """All tokens the forward pass computes, padding included."""
        return self.totals.num_tokens

    @property
    def num_live_tokens(self) -> int:
        t = self.totals
        return t.num_tokens - t.num_padding_tokens

    @property
    def num_padding_tokens(self) -> int:
        return self.totals.num_padding_tokens

    @property
    def num_prefill_tokens(self) -> int:
        return self.totals.num_prefill_tokens

    @property
    def num_decode_tokens(self) -> int:
        return self.totals.num_decode_tokens

    @property
    def num_seqs(self) -> int:
        return len(self.seqs)

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

    Speculative decoding: `num_accepted` maps req_id -> how many of its plan's draft tokens
    (`BatchPlan.spec_token_ids`) the verify accepted, a prefix; the sampled token follows them (a
    stop token among the accepted drafts ends the prefix there: that draft is then the sampled
    token). None: the executor does not verify (the simulator; the scheduler draws acceptances).
    """

    duration: float
    sampled_token_ids: Mapping[int | str, int] | None = None
    stopped: frozenset = frozenset()
    num_accepted: Mapping[int | str, int] | None = None

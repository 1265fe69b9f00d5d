"""The request and its five-state lifecycle.

A `Request` is the unit both worlds schedule. It is plain data plus a guarded state machine::

    WAITING -> RUNNING_CTX -> RUNNING_GEN -> FINISHED
                    |              |
                    +--> PREEMPTED <+      (then back to the waiting queue)

RUNNING_CTX means the prompt (or, after a recompute preemption, prompt + generated tokens) is still
being prefilled, possibly over several chunks; RUNNING_GEN means every known token is in the KV
cache and each step produces one new token. Progress is `num_computed_tokens`, as in vLLM v1:
the scheduler hands out tokens so that it catches up with `num_tokens`.

A request that can never be served ends FINISHED with `finish_reason == REJECTED` and a
human-readable `reject_reason`; it never blocks the queue.
"""
from __future__ import annotations

from collections.abc import Sequence
from enum import Enum


class RequestState(Enum):
    """The five states of DESIGN.md."""

    WAITING = "waiting"
    RUNNING_CTX = "running_ctx"
    RUNNING_GEN = "running_gen"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(str, Enum):
    """Why a request ended (the strings go into the `requests` table)."""

    LENGTH = "length"  # produced max_tokens
    STOP = "stop"  # the executor saw an EOS / stop token
    REJECTED = "rejected"  # can never be served (see reject_reason)
    ABORTED = "aborted"  # cancelled by its client
    TIMED_OUT = "timed_out"  # its client gave up waiting (the client's request timeout) and disconnected


class IllegalTransition(RuntimeError):
    """A request was asked to move between two states the lifecycle does not connect."""


_ALLOWED: dict[RequestState, frozenset[RequestState]] = {
    RequestState.WAITING: frozenset({RequestState.RUNNING_CTX, RequestState.RUNNING_GEN, RequestState.FINISHED}),
    RequestState.RUNNING_CTX: frozenset(
        {RequestState.RUNNING_CTX, RequestState.RUNNING_GEN, RequestState.PREEMPTED, RequestState.FINISHED}
    ),
    RequestState.RUNNING_GEN: frozenset({RequestState.PREEMPTED, RequestState.FINISHED}),
    RequestState.PREEMPTED: frozenset({RequestState.WAITING, RequestState.FINISHED}),
    RequestState.FINISHED: frozenset(),
}


class Request:
    """One inference request, as both the simulator and the engine see it.

    Token ids are optional: the simulator usually knows only counts. `prompt_token_ids` may be any
    sequence supporting `len` and slicing (a list, a tuple, or a lazy synthetic sequence such as
    `sim`'s shared-prefix prompts); when it is None the prompt shares no content with any other
    request, so the prefix cache never hits on it.
    """

    __slots__ = (
        "req_id", "arrival_time", "arrival_order", "num_prompt_tokens", "max_tokens", "priority",
        "prompt_token_ids", "ignore_eos", "sampling", "tags",
        "state", "num_computed_tokens", "num_cached_tokens", "output_token_ids", "block_table",
        "first_scheduled_time", "first_token_time", "token_times", "finish_time",
        "num_preemptions", "num_swaps", "num_recomputes", "finish_reason", "reject_reason", "is_swapped",
        "block_hashes", "num_registered_blocks", "cpu_block_table", "preemption_intervals", "preempted_at",
        "num_cpu_cached_tokens", "num_offloaded_blocks",
        "spec_token_ids", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
    )

    def __init__(
        self,
        req_id: int | str,
        arrival_time: float,
        num_prompt_tokens: int,
        max_tokens: int,
        priority: int = 0,
        prompt_token_ids: Sequence[int] | None = None,
        ignore_eos: bool = True,
        sampling: object | None = None,
        tags: dict | None = None,
    ) -> None:
        if prompt_token_ids is not None and len(prompt_token_ids) != num_prompt_tokens:
            raise ValueError(
                f"request {req_id}: num_prompt_tokens={num_prompt_tokens} but prompt_token_ids has "
                f"{len(prompt_token_ids)} tokens"
            )
        if num_prompt_tokens < 1:
            raise ValueError(f"request {req_id}: num_prompt_tokens must be >= 1, got {num_prompt_tokens}")
        if max_tokens < 1:
            raise ValueError(f"request {req_id}: max_tokens must be >= 1, got {max_tokens}")
        self.req_id = req_id
        self.arrival_time = float(arrival_time)
        # the order it reached its scheduler (`Scheduler.add_request`): breaks ties of arrival_time, as
        # vLLM's wall-clock arrival stamps, never equal, order requests submitted at one instant
        self.arrival_order = 0
        self.num_prompt_tokens = int(num_prompt_tokens)
        self.max_tokens = int(max_tokens)
        self.priority = int(priority)  # lower value = more important (vLLM convention)
        self.prompt_token_ids = prompt_token_ids
        self.ignore_eos = ignore_eos
        self.sampling = sampling  # executor-specific sampling params (the engine's SamplingParams)
        self.tags = tags if tags is not None else {}  # workload labels (class, group, turn...) for metrics

        self.state = RequestState.WAITING
        self.num_computed_tokens = 0  # tokens whose KV is in the cache (or scheduled this step)
        self.num_cached_tokens = 0  # of those, how many came from prefix-cache hits
        self.output_token_ids: list[int] = []
        self.block_table: list[int] = []  # GPU block ids, in token order (owned by the BlockManager)
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.token_times: list[float] = []  # one timestamp per output token
        self.finish_time: float | None = None
        self.num_preemptions = 0
        # (preempted_at, resumed_at) of each preemption, on the scheduler's clock (simulated or wall
        # time): from the step that took it off the GPU to the step that ran it again (or its end)
        self.preemption_intervals: list[tuple[float, float]] = []
        self.preempted_at: float | None = None  # the open interval's start while preempted
        self.num_swaps = 0
        self.num_recomputes = 0
        self.finish_reason: FinishReason | None = None
        self.reject_reason: str | None = None
        self.is_swapped = False  # True while its KV lives in CPU swap space
        # BlockManager bookkeeping (see policies/block_manager.py):
        self.block_hashes: list[int] = []  # chained hashes of this request's full blocks (content only)
        self.num_registered_blocks = 0  # leading blocks of block_table already offered to the prefix cache
        self.cpu_block_table: list[int] = []  # CPU block ids while swapped out
        # the KV offload tier (policies/kv_offload.py): tokens first admitted from it, and how many of
        # this request's full blocks were offered to it (write-through, in token order)
        self.num_cpu_cached_tokens = 0
        self.num_offloaded_blocks = 0
        # speculative decoding (policies.speculative): the draft tokens proposed for the next step
        # (vLLM's spec_token_ids: not part of num_tokens until verified), and over the request's life
        # the verify steps that carried drafts, the draft tokens they verified and those accepted
        self.spec_token_ids: list[int] = []
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    # --- derived counts -------------------------------------------------------------------------
    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what `num_computed_tokens` must catch up with."""
        return self.num_prompt_tokens + len(self.output_token_ids)

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens still to put into the KV cache before the next output token can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.state is RequestState.FINISHED

    @property
    def is_prefill(self) -> bool:
        """True while more than one token is owed (a prompt, or a recompute after preemption)."""
        return self.num_tokens - self.num_computed_tokens > 1 or self.num_output_tokens == 0

    def token_ids(self, start: int, stop: int) -> list[int] | None:
        """Token ids of positions [start, stop) over prompt + output, or None if the prompt has no ids."""
        if self.prompt_token_ids is None:
            return None
        p = self.num_prompt_tokens
        head = list(self.prompt_token_ids[start:min(stop, p)]) if start < p else []
        if stop > p:
            head.extend(self.output_token_ids[max(start - p, 0):stop - p])
        return head

    # --- lifecycle ------------------------------------------------------------------------------
    def transition(self, new_state: RequestState) -> None:
        """Move to `new_state`, raising `IllegalTransition` if the lifecycle forbids it."""
        if new_state not in _ALLOWED[self.state]:
            raise IllegalTransition(f"request {self.req_id}: {self.state.name} -> {new_state.name} is not allowed")
        self.state = new_state

    def record_token(self, token_id: int, now: float) -> None:
        """Append one sampled output token at time `now`."""
        self.output_token_ids.append(token_id)
        self.token_times.append(now)
        if self.first_token_time is None:
            self.first_token_time = now

    def mark_preempted(self, now: float) -> None:
        """Open a preemption interval at `now` (the scheduler calls it when it preempts)."""
        self.preempted_at = now

    def mark_resumed(self, now: float) -> None:
        """Close the open preemption interval, if any, at `now` (scheduled again, or ended)."""
        if self.preempted_at is not None:
            self.preemption_intervals.append((self.preempted_at, now))
            self.preempted_at = None

    def finish(self, reason: FinishReason, now: float, why: str | None = None) -> None:
        """End the request (from any live state); a preemption still open ends here."""
        self.transition(RequestState.FINISHED)
        if self.preempted_at is not None:
            self.mark_resumed(now)
        self.finish_reason = reason
        self.finish_time = now
        if why is not None:
            self.reject_reason = why

    def __repr__(self) -> str:
        return (
            f"Request({self.req_id!r}, {self.state.name}, prompt={self.num_prompt_tokens}, "
            f"out={self.num_output_tokens}/{self.max_tokens}, computed={self.num_computed_tokens})"
        )

"""The scratch pad of one `schedule()` call, turned into an immutable `BatchPlan` at the end.

Scheduling decisions can be undone within a step (a request scheduled earlier in the step may be
preempted later to make room), so the step collects `{req_id: (request, num_new_tokens)}` and the
block moves first, and only `finish()` advances `num_computed_tokens` (vLLM v1's
`_update_after_schedule`) and freezes the plan.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from operator import attrgetter

from policies.batch_plan import BatchPlan, ScheduledSeq, ScheduledSeqs

if TYPE_CHECKING:
    from policies.request import Request


_num_computed = attrgetter("num_computed_tokens")


class StepBuilder:
    """What one step has scheduled so far, and how much token budget is left."""

    __slots__ = ("budget", "scheduled", "padding", "preempted", "swapped_out", "swapped_in",
                 "swap_out_blocks", "swap_in_blocks", "resumed", "token_budget", "carried_preempted",
                 "leading", "spec", "padding_context")

    def __init__(self, token_budget: int) -> None:
        self.token_budget = token_budget
        self.budget = token_budget
        self.carried_preempted: list = []  # recompute preemptions of earlier, empty passes of this step
        self.scheduled: dict = {}  # req_id -> (request, num_new_tokens), in pack order
        self.padding: list[ScheduledSeq] = []  # static batching's padding entries
        self.padding_context = 0  # static batching: padded keys/values its live decodes read (BatchPlan)
        self.preempted: list = []  # req_ids preempted by recompute this step
        self.swapped_out: list = []
        self.swapped_in: list = []
        self.swap_out_blocks: list[tuple[int, int]] = []
        self.swap_in_blocks: list[tuple[int, int]] = []
        self.resumed: set = set()  # req_ids admitted or swapped in this step (never victims of admission)
        # the running decodes that open the plan, one token each that samples (see
        # Scheduler._schedule_running): a slice of `running`, cheaper than entries in `scheduled`
        self.leading: list | tuple = ()
        self.spec: dict = {}  # req_id -> the draft tokens its scheduled sequence verifies (speculative)

    @property
    def num_preempted(self) -> int:
        """Preemptions in the current pass."""
        return len(self.preempted) + len(self.swapped_out)

    @property
    def is_idle(self) -> bool:
        """Nothing for the executor to do (recompute preemptions alone cost nothing)."""
        return not (self.scheduled or self.leading or self.padding or self.swap_out_blocks or self.swap_in_blocks)

    def restart(self) -> None:
        """Start another pass after a pass that only preempted (so the step is not wasted)."""
        self.carried_preempted.extend(self.preempted)
        self.preempted = []
        self.swapped_out = []
        self.budget = self.token_budget
        self.resumed = set()
        self.leading = ()
        self.spec = {}

    def add(self, req: "Request", num_new_tokens: int) -> None:
        self.scheduled[req.req_id] = (req, num_new_tokens)
        self.budget -= num_new_tokens

    def undo(self, req: "Request") -> None:
        """Forget `req`'s share of this step (it is being preempted), returning its tokens."""
        entry = self.scheduled.pop(req.req_id, None)
        if entry is not None:
            self.budget += entry[1]
            if self.spec:
                self.spec.pop(req.req_id, None)
        elif self.leading and req in self.leading:
            self.leading.remove(req)
            self.budget += 1

    def finish(self, step_id: int, now: float) -> BatchPlan:
        """Advance every scheduled request's `num_computed_tokens` and freeze the plan.

        The running decodes that open the step (`leading`, then any entries that are decodes that
        sample, up to the first other entry) go into the plan's `ScheduledSeqs` as requests and
        contexts; the rest as `ScheduledSeq` entries.
        """
        new, cls = tuple.__new__, ScheduledSeq  # the cheapest way to build one per sequence per step
        decodes = self.leading or []  # the step's opening decodes, kept compact (see ScheduledSeqs)
        contexts = list(map(_num_computed, decodes))
        for req in decodes:
            req.num_computed_tokens += 1
        seqs = []
        append = seqs.append
        entries = iter(self.scheduled.values())
        for req, n in entries:
            c = req.num_computed_tokens
            if (n == 1 and c > 0 and c + 1 == req.num_prompt_tokens + len(req.output_token_ids)
                    and req.first_scheduled_time is not None):  # one more decode that samples
                decodes.append(req)
                contexts.append(c)
                req.num_computed_tokens = c + 1
                continue
            append(new(cls, (req, n, c, c + n >= req.num_prompt_tokens + len(req.output_token_ids), False)))
            req.num_computed_tokens = c + n
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
            break  # this entry and all after it are written out
        for req, n in entries:
            c = req.num_computed_tokens
            append(new(cls, (req, n, c, c + n >= req.num_prompt_tokens + len(req.output_token_ids), False)))
            req.num_computed_tokens = c + n
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
        if self.padding:
            seqs.extend(self.padding)
        seqs = ScheduledSeqs(decodes, contexts, tuple(seqs)) if decodes else tuple(seqs)
        spec = self.spec
        pad = self.padding_context  # static batching's padded contexts
        if not (self.carried_preempted or self.preempted or self.swapped_out or self.swapped_in
                or self.swap_out_blocks or self.swap_in_blocks or pad):  # the usual step: no preemption, no swap
            return BatchPlan(step_id, seqs, spec_token_ids=spec) if spec else BatchPlan(step_id, seqs)
        return BatchPlan(
            step_id=step_id,
            seqs=seqs,
            padding_context=pad,
            preempted=tuple(self.carried_preempted + self.preempted),
            swapped_out=tuple(self.swapped_out),
            swapped_in=tuple(self.swapped_in),
            swap_out_blocks=tuple(self.swap_out_blocks),
            swap_in_blocks=tuple(self.swap_in_blocks),
            **({"spec_token_ids": spec} if spec else {}),
        )

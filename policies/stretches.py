"""`Stretches`: what a simulator replaying steps without their plans asks of a scheduler.

A run of plain decode steps, or of mixed steps under a steady budget, can be simulated without
calling `schedule()` for each step (`sim.decode_replay`, `sim.mixed_replay`): the replay needs to
know how many steps are certainly plain decodes (`decode_horizon`), to admit a waiting request as a
pass would (`admit_head`), and to take the step ids the skipped passes would have used
(`skip_step_ids`). A mixin of `policies.scheduler.Scheduler`: it reads the scheduler's queues and
block manager, and each policy says with `decode_runs` / `mixed_runs` whether its passes fit.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from policies.request import RequestState

if TYPE_CHECKING:
    from policies.request import Request

_CTX = RequestState.RUNNING_CTX
_GEN = RequestState.RUNNING_GEN


class Stretches:
    """The scheduler's answers for a replay of steps run from one look at the state (see the module)."""

    decode_runs = False  # True where schedule() of an all-decode state is the steps decode_horizon counts

    def decode_horizon(self) -> int:
        """How many of the next steps are certainly plain decode steps (0 when not known).

        Each of those steps schedules one token for every running request, in `running` order,
        preempts nobody and admits nobody, and only the last one may finish requests (reaching
        max_tokens); block allocations at block boundaries may happen inside (the free blocks may
        run out: that step preempts). 0 when the policy does not schedule such steps
        (`decode_runs`), some running request is still prefilling, something is swapped out, a
        waiting request might be admitted (it is not when every seat is taken and admissions
        cannot preempt), or the budget is short. With prefix caching, a request with token ids
        ends the stretch before it allocates or registers a full block (those steps hash content);
        with a native offload tier, so does a request whose full blocks the tier refused (each
        planned step offers them again, and one may take them).
        A multi-step executor may run that many decode steps from one look at the state; the
        simulator replays them in one go (`sim.decode_replay`).
        """
        running = self.running
        n = len(running)
        if (not self.decode_runs or not n or self.swapped or n > self.token_budget or self.loading
                or self.num_spec_tokens):  # a verify step is no plain decode step
            return 0
        if running[-1].state is not _GEN:  # the newest request is the likeliest to be prefilling
            return 0
        if self.waiting and (n < self.max_num_seqs
                             or (self.priority_admission_preemption and self.config.queue == "priority")):
            return 0
        bm = self.block_manager
        bs, caching = bm.block_size, bm.enable_prefix_caching
        # a block filling is the prefix cache's business for a request with ids (offered as it fills)
        # and the offload tier's for any request (stored as it fills): a stretch ends before it
        offloads = bm.offload is not None
        # native: a request's new full blocks the tier refused (all or none) are offered again at every
        # planned step and may fit at the next one (a request ended and released its held stores, a
        # step's copies settled): only schedule() offers them, so such a request ends the stretch
        refusals = offloads and not bm.offload.synchronous
        horizon = 1 << 62
        for req in running:
            if req.state is not _GEN:
                return 0
            num_out = len(req.output_token_ids)
            num_tokens = req.num_prompt_tokens + num_out
            c = req.num_computed_tokens
            if num_tokens - c != 1:
                return 0
            left = req.max_tokens - num_out  # the step at which it finishes (1 = the next one)
            if caching and (offloads or req.prompt_token_ids is not None):
                left = min(left, (-num_tokens) % bs, len(req.block_table) * bs - c)
            if refusals and req.num_offloaded_blocks < min(num_tokens // bs, len(req.block_table)):
                return 0
            if left < horizon:
                horizon = left
        return horizon if horizon > 0 else 0

    mixed_runs = False  # True where a pass is _schedule_running, then swapped, then waiting (chunked)

    def admit_head(self, num_tokens: int, now: float) -> "Request":
        """Admit the head of the waiting queue with its first `num_tokens` tokens, as a pass at `now`
        does for a request with nothing computed and no prefix hit (its blocks, watermark kept, must
        fit: the caller checked). The caller advances `num_computed_tokens` as the plan's end does.
        For a simulator replaying steps without their plans (`sim.mixed_replay`)."""
        req = self.waiting.peek()
        if not self.block_manager.allocate_slots(req, num_tokens, use_watermark=True):
            raise RuntimeError(f"request {req.req_id}: not enough free KV blocks for {num_tokens} tokens")
        self.waiting.pop()
        self._admitted(req, 0, 0)
        req.transition(_CTX)
        if req.preempted_at is not None:
            req.mark_resumed(now)
        self.running.append(req)
        return req

    def skip_step_ids(self, num_steps: int) -> int:
        """Take the ids of `num_steps` steps run without `schedule()` (the later steps of a stretch
        `decode_horizon` counted, run from one look at the state); returns the first of them."""
        first = self.step_id
        self.step_id = first + num_steps
        return first

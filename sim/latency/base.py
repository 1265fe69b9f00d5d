"""The latency-model interface and a constant model for tests.

A latency model turns one `BatchPlan` into the seconds its step takes on the simulated hardware,
swap copies included. The simulator calls it once per step, so implementations keep it O(num_seqs)
with small constants.
"""
from __future__ import annotations

from typing import Callable

from policies import BatchPlan
from policies.batch_plan import PlanTotals


class LatencyModel:
    """The latency-model interface: `step_time(plan) -> seconds`, and what the simulator may skip.

    A replica runs with anything that has `step_time`. A class derived from this one can also say,
    with the three methods below, how the simulator may time a stretch of all-decode steps without
    building each plan (`sim.decode_replay`), or a step from its sums alone (`sim.mixed_replay`).
    The defaults promise nothing, so a subclass, or a wrapper forwarding attributes to an inner
    model, sees every plan until it says otherwise; a subclass that changes `step_time` must keep
    all three true (override them to the defaults if not; `totals_step_time` is used only from the
    class that defines `step_time`).
    """

    def step_time(self, plan: BatchPlan) -> float:
        raise NotImplementedError

    def is_pure(self) -> bool:
        """True if `step_time` depends on the plan alone and has no side effects, so the simulator
        may call it on the plans of a decode stretch ahead of their steps. False by default."""
        return False

    def decode_step_times(self, num_seqs: int, context_sum: int, num_steps: int) -> list[float] | None:
        """`step_time`, bit for bit, of `num_steps` consecutive steps in which the same `num_seqs`
        sequences decode one token each, their contexts (new token included) summing to
        `context_sum` in the first step and growing by `num_seqs` per step; None (the default, for
        any arguments) when the model has no such formula."""
        return None

    def totals_step_time(self, totals: PlanTotals) -> float | None:
        """`step_time`, bit for bit, of any plan whose `BatchPlan.totals` are `totals` and that moves
        no blocks (no swaps, copies or offload); None (the default) when the time depends on more
        than the sums."""
        return None


#: `breakdown` keys that are host work outside the forward pass: the engine's overhead op, the named
#: host terms (`fidelity.host_overhead`), a front end's per-output charge. With async scheduling the
#: host prepares step n+1 while the GPU runs step n, so these overlap the other (device) parts.
HOST_PARTS = frozenset({"overhead", "schedule", "prepare", "sample", "output"})


def step_parts(latency_model, plan: BatchPlan) -> dict[str, float]:
    """The model's own `breakdown(plan)` (its values sum to `step_time`), else {"step": step_time}.

    A breakdown reached through attribute forwarding would leave out a wrapper's own cost, so
    only one defined on the model's class counts."""
    if callable(getattr(type(latency_model), "breakdown", None)):
        return latency_model.breakdown(plan)
    return {"step": latency_model.step_time(plan)}


def host_split(latency_model, plan: BatchPlan) -> tuple[float, float]:
    """(device seconds, host seconds) of the step of `plan`: `step_parts` split by `HOST_PARTS`."""
    device = host = 0.0
    for key, seconds in step_parts(latency_model, plan).items():
        if key in HOST_PARTS:
            host += seconds
        else:
            device += seconds
    return device, host


#: the replica's count before any prefill: (decode-only steps since one that carried prefill tokens,
#: that step's prefill tokens)
NO_PREFILL_YET = (1 << 30, 0)


def after_prefill_step(plan: BatchPlan, state: tuple[int, int], cost: Callable[[int, int, float], float],
                       seconds: float) -> tuple[tuple[int, int], float]:
    """(the count after `plan`, `plan`'s step seconds): `state` is (decode-only steps since the last step
    that carried prefill tokens, that step's prefill tokens). A prefill-carrying step starts a new
    count, a decode-only step is the next one and takes `cost(k, prefill tokens, seconds)` (e.g.
    `ProfiledLatencyModel.after_prefill_cost`), any other leaves both alone. The replica's loop, its
    decode replay and validate's per-step prediction count alike."""
    if plan.num_prefill_tokens:
        return (0, plan.num_prefill_tokens), seconds
    if plan.num_decode_tokens:
        k = state[0] + 1
        return (k, state[1]), cost(k, state[1], seconds)
    return state, seconds


class ConstantLatencyModel(LatencyModel):
    """Every non-empty step takes `step_s` (+ `per_token_s` per computed token): queueing-theory tests."""

    def __init__(self, step_s: float = 0.01, per_token_s: float = 0.0) -> None:
        if step_s < 0 or per_token_s < 0:
            raise ValueError(f"step_s/per_token_s: must be >= 0, got {step_s}, {per_token_s}")
        self.step_s = step_s
        self.per_token_s = per_token_s

    def step_time(self, plan: BatchPlan) -> float:
        if plan.is_empty:
            return 0.0
        if self.per_token_s:
            return self.step_s + self.per_token_s * plan.num_tokens
        return self.step_s

    def is_pure(self) -> bool:
        return True

    def decode_step_times(self, num_seqs: int, context_sum: int, num_steps: int) -> list[float]:
        """`step_time` of `num_steps` steps of `num_seqs` one-token decodes (see `LatencyModel`)."""
        if self.per_token_s:
            return [self.step_s + self.per_token_s * num_seqs] * num_steps
        return [self.step_s] * num_steps

    def totals_step_time(self, totals: PlanTotals) -> float:
        """`step_time` of a plan with these sums (see `LatencyModel`)."""
        if not (totals.num_seqs or totals.num_tokens):
            return 0.0
        if self.per_token_s:
            return self.step_s + self.per_token_s * totals.num_tokens
        return self.step_s

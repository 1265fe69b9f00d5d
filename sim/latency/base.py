"""The latency-model interface and a constant model for tests.

A latency model turns one `BatchPlan` into the seconds its step takes on the simulated hardware,
swap copies included. The simulator calls it once per step, so implementations keep it O(num_seqs)
with small constants.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from policies import BatchPlan


@runtime_checkable
class LatencyModel(Protocol):
    """Anything with `step_time(plan) -> seconds`.

    Two optional class attributes let the simulator replay stretches of all-decode steps without
    building their plans (`sim.replica.Replica`'s decode runs); a model with neither gets every plan:
    - `decode_step_times(num_seqs, context_sum, num_steps) -> [seconds, ...]`: a method equal (bit
      for bit) to `step_time` of `num_steps` consecutive steps in which the same `num_seqs`
      sequences decode one token each, their contexts (new token included) summing to
      `context_sum` in the first step and growing by `num_seqs` per step;
    - `pure_step_time = True`: `step_time` depends on the plan alone and has no side effects, so
      the simulator may call it on the plans of a decode run ahead of their steps;
    - `grouped_decodes = True`: `step_time` counts `BatchPlan.decodes` (leading one-token decodes
      given as a group), so the simulator may hand it grouped plans.
    Both are looked up on the class, so a wrapper that forwards attributes to an inner model does
    not inherit them by accident.
    """

    def step_time(self, plan: BatchPlan) -> float: ...


class ConstantLatencyModel:
    """Every non-empty step takes `step_s` (+ `per_token_s` per computed token): queueing-theory tests."""

    def __init__(self, step_s: float = 0.01, per_token_s: float = 0.0) -> None:
        if step_s < 0 or per_token_s < 0:
            raise ValueError(f"step_s/per_token_s: must be >= 0, got {step_s}, {per_token_s}")
        self.step_s = step_s
        self.per_token_s = per_token_s

    pure_step_time = True
    grouped_decodes = True

    def step_time(self, plan: BatchPlan) -> float:
        if plan.is_empty:
            return 0.0
        if self.per_token_s:
            return self.step_s + self.per_token_s * (sum(s.num_tokens for s in plan.seqs) + len(plan.decodes))
        return self.step_s

    def decode_step_times(self, num_seqs: int, context_sum: int, num_steps: int) -> list[float]:
        """`step_time` of `num_steps` steps of `num_seqs` one-token decodes (see `LatencyModel`)."""
        if self.per_token_s:
            return [self.step_s + self.per_token_s * num_seqs] * num_steps
        return [self.step_s] * num_steps

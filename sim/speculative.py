"""Speculative decoding in the simulator: the scheduler's acceptance draws and the proposer's cost.

The scheduling (1 + k tokens per decode under the budget, KV slots for all of them) lives in
`policies.scheduler`; the simulator adds what an executor would: `build_scheduler` gives the
scheduler a seeded `AcceptanceSampler` (the `[speculative] acceptance_rate` per position; seed
`workload.seed` and the replica's name, so runs repeat), and `with_proposer` charges each step
the proposer's work (`SpeculativeLatencyModel`) on top of the target's verify, which the latency
model already charges at its real width (1 + drafts query tokens per sequence, an LM-head row each).

The proposer's weights and KV share the GPU (`proposer_memory`): its parameters come off the KV
budget and each block also holds its layers' KV (vLLM allocates the drafter's layers in the same
blocks). The fast decode path (`sim.decode_replay`) stays off with speculation
(`Scheduler.decode_horizon`).
"""
from __future__ import annotations

from dataclasses import replace

from policies import ConfigError
from policies.schedulers import make_scheduler
from policies.speculative import AcceptanceSampler
from sim.latency.base import LatencyModel, step_parts
from sim.latency.roofline import RooflineConstants, RooflineLatencyModel
from specs import get_model


def build_scheduler(config, cache, name: str = "0"):
    """The scheduler of one replica of `config` (a `sim.config.Config`) over `cache` (a
    `CacheConfig`), with its acceptance sampler when speculative decoding is on."""
    spec = config.speculative
    scheduler = make_scheduler(config.scheduler, cache, spec)
    if spec.enabled:
        scheduler.acceptance = AcceptanceSampler(spec.rates(), seed=f"{config.workload.seed}:{name}")
    return scheduler


def draft_spec(config):
    """The `ModelSpec` the proposer runs k times per step (None for ngram)."""
    spec = config.speculative
    if spec.method == "draft":
        try:
            return get_model(spec.draft_model)
        except ConfigError as exc:
            raise ConfigError(f"speculative.draft_model: {exc}") from None
    if spec.method == "mtp":  # one layer of the target (a MoE layer for a MoE model) + its LM head
        target = config.model.spec()
        return replace(target, num_layers=1, first_k_dense_replace=0)
    return None


def proposer_memory(config) -> tuple[int, object | None]:
    """(the proposer's parameters, the `ModelSpec` whose KV each block also holds): a draft model's
    all; MTP's one layer (embedding and LM head shared with the target); ngram none."""
    model = draft_spec(config)
    if model is None:
        return 0, None
    if config.speculative.method == "draft":
        return model.num_params, model
    head = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size
    final_norm = model.hidden_size * (2 if model.bias else 1)
    return model.num_params - model.embedding_params - head - final_norm, model


class SpeculativeLatencyModel(LatencyModel):
    """`inner`'s step time plus the proposer's: `num_passes` decode passes of `proposer` (a roofline
    model) over the plan's sampling sequences. Other attributes are the inner model's; no stretch
    formula (the fast path is off with speculation). Per method:

    - ngram: prompt lookup on the host over the token history, overlapped with nothing but tiny
      (microseconds): charged 0 (`proposer` None);
    - draft: k forward passes of `draft_model` over the step's sampling sequences, each a decode of
      one token per sequence over its context (roofline of the draft model on the same GPUs);
    - mtp: k passes of the target's multi-token-prediction module: one more layer of the target plus
      its LM head, timed like the draft (roofline of a one-layer copy of the target).

    The passes run inside the step (graph-captured in vLLM): no host overhead per pass.
    """

    def __init__(self, inner, proposer: RooflineLatencyModel | None, num_passes: int) -> None:
        self.inner, self.proposer, self.num_passes = inner, proposer, num_passes

    def __getattr__(self, name):  # after_idle_s, profile, ... of the inner model
        return getattr(self.inner, name)

    def proposer_time(self, plan) -> float:
        if self.proposer is None:
            return 0.0
        sampling = [s for s in plan.seqs if s.samples and not s.is_padding]
        if not sampling:
            return 0.0
        context = sum(s.num_computed_tokens + s.num_tokens for s in sampling)
        return sum(self.proposer.decode_step_times(len(sampling), context, self.num_passes))

    def step_time(self, plan) -> float:
        t = self.inner.step_time(plan)
        if self.proposer is not None and plan.seqs:
            t += self.proposer_time(plan)
        return t

    def breakdown(self, plan) -> dict[str, float]:
        """The inner model's parts (`step_parts`) and `proposer`, the draft passes (device time)."""
        return {**step_parts(self.inner, plan),
                "proposer": self.proposer_time(plan) if self.proposer is not None and plan.seqs else 0.0}


def with_proposer(latency_model, config):
    """`latency_model` charged the proposer's cost too (as is when speculative decoding is off)."""
    spec = config.speculative
    if not spec.enabled:
        return latency_model
    model = draft_spec(config)
    proposer = None
    if model is not None:
        hw = config.hardware
        constants = RooflineConstants(step_overhead_s=0.0, per_seq_overhead_s=0.0)
        ep = getattr(hw, "ep", 1) if spec.method == "mtp" else 1  # the MTP layer's experts sit as the target's
        proposer = RooflineLatencyModel(model, hw.gpu_spec(), hw.tp, config.cache.block_size, constants,
                                        pcie_bandwidth=hw.pcie_bandwidth, ep=ep)
    return SpeculativeLatencyModel(latency_model, proposer, spec.k)

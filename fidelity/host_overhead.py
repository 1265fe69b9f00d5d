"""The host side of a real engine step, as named terms around a GPU step-time model.

A real engine's step is more than its kernels: the scheduler runs, inputs are prepared (token ids,
positions, slot mappings, block tables), tokens are sampled, and the API front end tokenizes each
request before the engine sees it. Each is a named, fitted (or set) term (`HostOverhead`), never one
lumped factor, so that a fit says where the time goes and a term measured elsewhere can be set.
`HostOverheadLatencyModel` adds the per-step terms to a GPU model's step time; `frontend_s` does
not occupy the engine (vLLM v1 runs its front end in another process), so `apply_frontend` adds it
to each request's TTFT and E2E instead.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import pandas as pd

from policies import BatchPlan, ConfigError

@dataclass(frozen=True)
class HostOverhead:
    """Named host-overhead terms (seconds; `compute_scale` a factor); all default to no overhead.

    ===============================  ==================================================================
    term                             meaning
    ===============================  ==================================================================
    schedule_s                       per step: scheduling + launching the forward pass
    schedule_per_seq_s               per scheduled sequence: scheduler bookkeeping, block tables
    prepare_per_token_s              per token of the step: input preparation (ids, positions, slots)
    sample_per_seq_s                 per sampled sequence: sampling + output processing in the step
    serialize_per_context_token_s    per context token of the step's sequences: their whole prompt and
                                     output copied between processes (vLLM v0's Ray serving path)
    compute_scale                    correction of the GPU model's kernel time (1 = as profiled)
    frontend_s                       per request, outside the engine: HTTP, tokenization, first chunk
    frontend_per_token_s             per request and prompt token, outside the engine: tokenizing
    ===============================  ==================================================================
    """

    schedule_s: float = 0.0
    schedule_per_seq_s: float = 0.0
    prepare_per_token_s: float = 0.0
    sample_per_seq_s: float = 0.0
    serialize_per_context_token_s: float = 0.0
    compute_scale: float = 1.0
    frontend_s: float = 0.0
    frontend_per_token_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
                raise ConfigError(f"overhead.{f.name}: expected a number, got {v!r}")
            if v < 0 or (f.name == "compute_scale" and v == 0):
                raise ConfigError(f"overhead.{f.name}: must be {'>' if f.name == 'compute_scale' else '>='} 0, got {v}")

    @classmethod
    def from_dict(cls, d: dict) -> "HostOverhead":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"overhead.{unknown[0]}: unknown term; allowed: {', '.join(sorted(known))}")
        return cls(**d)  # `__post_init__` names a term that is not a number

    def to_dict(self) -> dict:
        return asdict(self)

    def frontend_for(self, num_prompt_tokens):
        """Seconds of front end per request (an array for an array of prompt lengths)."""
        return self.frontend_s + self.frontend_per_token_s * num_prompt_tokens


def step_features(plan: BatchPlan) -> tuple[int, int, int, int]:
    """(tokens, sequences, sampled sequences, context tokens) of a step: what the per-step host
    terms scale with (context: each sequence's keys/values by the end of the step, summed)."""
    t = plan.totals
    return t.num_tokens, t.num_seqs, t.num_outputs, t.decode_context + t.prefill_context  # outputs: not padding


class HostOverheadLatencyModel:
    """`step_time(plan)` = compute_scale x GPU time + the named host terms.

    `log` (when `record=True`) keeps one row per call: the GPU time and the step's features, in
    step order, so that a fit can re-weigh the terms without re-running the GPU model.
    """

    def __init__(self, gpu_model, overhead: HostOverhead | None = None, record: bool = False) -> None:
        self.gpu_model = gpu_model
        self.overhead = overhead or HostOverhead()
        self.record = record
        self.log: list[tuple[float, int, int, int, int]] = []

    def breakdown(self, plan: BatchPlan) -> dict[str, float]:
        """Seconds per named term (sums to `step_time(plan)`)."""
        o = self.overhead
        gpu = float(self.gpu_model.step_time(plan))
        tokens, seqs, sampled, context = step_features(plan)
        if self.record:
            self.log.append((gpu, tokens, seqs, sampled, context))
        return {
            "gpu": o.compute_scale * gpu,
            "schedule": o.schedule_s + o.schedule_per_seq_s * seqs,
            "prepare": o.prepare_per_token_s * tokens,
            "sample": o.sample_per_seq_s * sampled,
            "serialize": o.serialize_per_context_token_s * context,
        }

    def step_time(self, plan: BatchPlan) -> float:
        return float(sum(self.breakdown(plan).values()))

    def steps_log(self) -> pd.DataFrame:
        return pd.DataFrame(self.log, columns=["gpu_s", "num_tokens", "num_seqs", "num_sampled",
                                               "context_tokens"])


def apply_frontend(requests: pd.DataFrame, overhead: HostOverhead) -> pd.DataFrame:
    """A requests table with the front end's per-request time added to TTFT and E2E (TPOT unchanged)."""
    out = requests.copy()
    tokens = out["num_prompt_tokens"].to_numpy(float) if "num_prompt_tokens" in out else 0.0
    for col in ("ttft_s", "e2e_s"):
        if col in out:
            out[col] = out[col] + overhead.frontend_for(tokens)
    return out

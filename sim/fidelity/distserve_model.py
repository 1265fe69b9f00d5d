"""Step time of vLLM on A100 from DistServe's fitted per-iteration coefficients (measured there).

DistServe's alignment data (`profile_data/profiler-a100-80g.vllm.json`) fits, per model and TP, in ms:

- a prefill iteration: `a + b * sum(prompt lens) + c * sum(prompt len ** 2)`;
- a decode iteration: `a + b * sum(context lens) + c * batch_size`, with one fit for batches below
  `decoding_large_small_bs_threshold` and another at or above it.

A step mixing both (not produced by the prefill-first engine of that era) costs the sum.
"""
from __future__ import annotations

import json
from pathlib import Path

from policies import BatchPlan, ConfigError


class DistServeLatencyModel:
    """`step_time(plan)` from DistServe's coefficients for one (model, tp)."""

    def __init__(self, path: str | Path, model: str = "facebook/opt-13b", tp: int = 1) -> None:
        data = json.loads(Path(path).read_text())
        try:
            c = data[model][str(tp)]
        except KeyError:
            raise ConfigError(f"hardware.profile: {path} has no coefficients for {model} at tp={tp}") from None
        self.prefill = c["prefill"]
        self.decode_small = c["decoding_smallbs"]
        self.decode_large = c["decoding_largebs"]
        self.threshold = int(c["decoding_large_small_bs_threshold"])

    def step_time(self, plan: BatchPlan) -> float:
        lens, ctx, batch = [], 0, 0
        for s in plan.seqs:
            if s.is_decode:
                batch += 1
                ctx += s.context_len
            else:
                lens.append(s.num_tokens)
        ms = 0.0
        if lens:
            a, b, c = self.prefill
            ms += a + b * sum(lens) + c * sum(n * n for n in lens)
        if batch:
            a, b, c = self.decode_small if batch < self.threshold else self.decode_large
            ms += a + b * ctx + c * batch
        return max(ms, 1e-3) * 1e-3

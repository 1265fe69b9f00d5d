"""Sampling: the `Sampler`, which draws tokens as `SamplingParams` (`gpu_backend.sampling_params`) say.

Greedy when `SamplingParams.is_greedy` (a temperature under 1e-5); otherwise softmax(logits /
temperature), restricted to the top-p nucleus, sampled with a generator seeded from `(seed, step)` where `step` is the request's number
of output tokens so far. So a seeded request draws the same tokens whatever batch it shares, and
after a recompute preemption. Stopping: a token in `stop_token_ids` (or the model's EOS unless
`Request.ignore_eos`) ends the request with reason STOP; `Request.max_tokens` ends it with LENGTH
(the scheduler does both).
"""
from __future__ import annotations

import torch

from gpu_backend.sampling_params import SamplingParams


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set logits outside the smallest set of tokens whose probability reaches `top_p` to -inf. [V] -> [V]"""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True)  # [V]
    probs = sorted_logits.softmax(-1)
    # drop a token when the mass strictly before it already reaches top_p (always keeps the first)
    drop = (probs.cumsum(-1) - probs) >= top_p  # [V]
    return logits.scatter(0, order, sorted_logits.masked_fill(drop, float("-inf")))


def generator_seed(seed: int, step: int) -> int:
    """The torch generator seed of a request's `step`-th draw: any 64-bit `seed` (negative too, as
    vLLM takes it), mixed with the step, modulo 2**64, the generator's seed range. The odd multiplier
    maps the 64-bit seeds one to one at each step (modulo 2**63, seed s and s + 2**63, say -5 and
    2**63 - 5, were one). CUDA's Philox generator reads all 64 bits; torch's CPU generator
    (mt19937) only the low 32, so there two seeds drawing alike is a 2**-32 chance per step."""
    return (seed * 1_000_003 + step) % 2**64


class Sampler:
    """Picks one token per sampled row (see module docstring)."""

    def __call__(self, logits: torch.Tensor, params: list[SamplingParams], seeds: list[int],
                 steps: list[int]) -> list[int]:
        # logits: [S, V] float32; params/seeds/steps: one per row
        tokens = logits.argmax(-1)  # [S], greedy for every row; random rows overwritten below
        out = tokens.tolist()
        for row, (p, seed, step) in enumerate(zip(params, seeds, steps)):
            if p.is_greedy:
                continue
            row_logits = top_p_filter(logits[row] / p.temperature, p.top_p)  # [V]
            gen = torch.Generator(device=logits.device).manual_seed(generator_seed(seed, step))
            out[row] = int(torch.multinomial(row_logits.softmax(-1), 1, generator=gen))
        return out

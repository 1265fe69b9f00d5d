"""Sampling: `SamplingParams` (goes in `Request.sampling`) and the `Sampler`.

Greedy when `temperature == 0`; otherwise softmax(logits / temperature), restricted to the top-p
nucleus, sampled with a generator seeded from `(seed, step)` where `step` is the request's number
of output tokens so far. So a seeded request draws the same tokens whatever batch it shares, and
after a recompute preemption. Stopping: a token in `stop_token_ids` (or the model's EOS unless
`Request.ignore_eos`) ends the request with reason STOP; `Request.max_tokens` ends it with LENGTH
(the scheduler does both).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from policies.config import ConfigError, check_int, check_number


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token: greedy (temperature 0), or temperature + top-p with a seed."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_number("sampling.temperature", self.temperature, 0.0)
        check_number("sampling.top_p", self.top_p, 0.0, 1.0, strict_min=True)
        check_int("sampling.seed", self.seed, 0, allow_none=True)
        if not isinstance(self.stop_token_ids, (tuple, list)):
            raise ConfigError(f"sampling.stop_token_ids: expected a list of token ids, got {self.stop_token_ids!r}")
        for t in self.stop_token_ids:
            check_int("sampling.stop_token_ids", t, 0)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = SamplingParams()


def request_seed(req_id, base_seed: int = 0) -> int:
    """A stable per-request seed for requests that give none (crc32, not Python's salted hash)."""
    return zlib.crc32(f"{base_seed}:{req_id}".encode())


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set logits outside the smallest set of tokens whose probability reaches `top_p` to -inf. [V] -> [V]"""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True)  # [V]
    probs = sorted_logits.softmax(-1)
    # drop a token when the mass strictly before it already reaches top_p (always keeps the first)
    drop = (probs.cumsum(-1) - probs) >= top_p  # [V]
    return logits.scatter(0, order, sorted_logits.masked_fill(drop, float("-inf")))


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
            gen = torch.Generator(device=logits.device).manual_seed((seed * 1_000_003 + step) % 2**63)
            out[row] = int(torch.multinomial(row_logits.softmax(-1), 1, generator=gen))
        return out

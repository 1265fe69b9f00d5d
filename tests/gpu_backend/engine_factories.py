"""Factories for the engine tests: the tiny Llama config, prompts, requests, hand-built plans, the HF reference."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_backend.model_config import ModelConfig  # noqa: E402
from policies import BatchPlan, Request, ScheduledSeq  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY_CONFIG = REPO / "examples" / "tiny-llama" / "config.json"


def make_model_config(**overrides) -> ModelConfig:
    """The example tiny Llama, smaller where a test wants it (e.g. num_hidden_layers=2)."""
    import dataclasses

    return dataclasses.replace(ModelConfig.from_json(TINY_CONFIG), **overrides)


def make_prompt(n: int, seed: int, vocab: int = 2048) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def make_request(req_id, prompt: list[int], max_tokens: int = 8, block_table=None, **kw) -> Request:
    r = Request(req_id, kw.pop("arrival_time", 0.0), len(prompt), max_tokens, prompt_token_ids=prompt, **kw)
    if block_table is not None:
        r.block_table = list(block_table)
    return r


def make_plan(*seqs: tuple, step_id: int = 0) -> BatchPlan:
    """`make_plan((request, num_tokens, num_computed, samples), ...)`."""
    return BatchPlan(step_id, tuple(ScheduledSeq(r, n, c, s) for r, n, c, s in seqs))



class HFReference:
    """Greedy continuations from transformers, one prompt at a time, full forward each token (no cache)."""

    def __init__(self, hf) -> None:
        self.hf = hf
        self._cache: dict = {}

    def logits(self, ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return self.hf(torch.tensor([ids]), use_cache=False).logits[0, -1].float()  # [vocab]

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        key = (tuple(prompt), n)
        if key not in self._cache:
            ids, out = list(prompt), []
            for _ in range(n):
                tok = int(self.logits(ids).argmax())
                out.append(tok)
                ids.append(tok)
            self._cache[key] = out
        return self._cache[key]

    def assert_same_greedy(self, prompt: list[int], tokens: list[int], near_tie: float = 1e-4) -> None:
        """Engine tokens equal the reference's; a divergence is only excused at a genuine near-tie
        (top-2 reference logits within `near_tie`), where float rounding may pick either."""
        ref = self.greedy(prompt, len(tokens))
        for i, (a, b) in enumerate(zip(tokens, ref)):
            if a != b:
                top = self.logits(list(prompt) + ref[:i]).topk(2).values
                assert float(top[0] - top[1]) < near_tie, (
                    f"token {i}: engine {a} != reference {b} (gap {float(top[0] - top[1]):.3g}); "
                    f"engine {tokens} vs reference {ref}")
                return

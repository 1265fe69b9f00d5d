"""Speculative decoding's policy objects: who proposes draft tokens, and how acceptances are drawn.

The scheduler (`policies.scheduler`) owns the mechanism, as vLLM v1's does: after a request samples,
its `proposer` gives up to k draft tokens (`Request.spec_token_ids`); the next step schedules the
request's last token plus its drafts (1 + k tokens against the budget, KV slots for all of them);
the executor verifies them and reports how many were accepted (`StepResult.num_accepted`); the
request keeps the accepted drafts and the verify's own token and its computed tokens fall back by
the rejected ones; the blocks that held rejected KV stay its own (vLLM v1's block tables only grow).

- `NgramProposer`: prompt lookup (vLLM's "ngram"), on token ids: the engine's real proposer.
- `placeholder_proposer(k)`: k placeholder drafts, for the simulator (it has no token content).
- `AcceptanceSampler`: the simulator's verify, seeded so that runs repeat.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from policies.request import Request

Proposer = Callable[["Request"], Sequence[int]]
GOLDEN = 0.6180339887498949  # (sqrt(5) - 1) / 2: the most evenly spreading step for u_n = u_0 + n g mod 1


def placeholder_proposer(k: int) -> Proposer:
    """A proposer of `k` placeholder drafts (token 0) for every request (the simulator's)."""
    drafts = (0,) * k

    def propose(req: "Request") -> Sequence[int]:
        return drafts
    return propose


class NgramProposer:
    """Prompt lookup: the tokens that followed the earliest occurrence of the sequence's last n
    tokens, for the longest n in [min_n, max_n] that occurs earlier, at most k of them ([] when
    none): what vLLM's NgramProposer picks (its reversed-KMP search keeps the earliest match)."""

    def __init__(self, k: int, min_n: int = 5, max_n: int = 5) -> None:
        if k < 1 or min_n < 1 or max_n < min_n:
            raise ValueError(f"NgramProposer: need k >= 1 and 1 <= min_n <= max_n, got k={k}, "
                             f"min_n={min_n}, max_n={max_n}")
        self.k, self.min_n, self.max_n = k, min_n, max_n

    def propose_ids(self, tokens: Sequence[int]) -> list[int]:
        """Drafts following the longest matching suffix of `tokens` (see the class docstring)."""
        tokens = list(tokens)
        total = len(tokens)
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            suffix = tokens[total - n:]
            first = suffix[0]
            # the earliest start i < total - n whose n tokens equal the suffix (a token must follow it)
            for i in range(total - n):
                if tokens[i] == first and tokens[i:i + n] == suffix:
                    return tokens[i + n:i + n + self.k]
        return []

    def __call__(self, req: "Request") -> list[int]:
        ids = req.token_ids(0, req.num_tokens)
        return [] if ids is None else self.propose_ids(ids)


class AcceptanceSampler:
    """Draws how many of d drafts a verify accepts; `rates[i]` is the acceptance probability of
    draft position i (0-based), given the earlier ones were accepted.

    Position i is accepted with probability a_i, only if every earlier position was, so
    E[tokens per step] = 1 + a_1 + a_1 a_2 + ... (Leviathan et al.: (1 - a^(k+1)) / (1 - a) for one
    rate a). One uniform per verify, from a golden-ratio sequence with a seeded start (quasi-Monte
    Carlo): each step's count has the exact distribution, and a run's total steps sit at their
    expectation instead of scattering as independent draws do (the figure that motivated it:
    docs/results/2026-12-02-docstring-history.md).
    """

    def __init__(self, rates: Sequence[float], seed: int | str = 0) -> None:
        self.rates = tuple(float(a) for a in rates)
        if not self.rates or any(not 0.0 <= a <= 1.0 for a in self.rates):
            raise ValueError(f"acceptance rates: need one or more numbers in [0, 1], got {rates!r}")
        self.u = random.Random(seed).random()
        # P(at least i accepted) = a_1 ... a_i: accept i drafts while u < that product
        self.survival = [1.0]
        for a in self.rates:
            self.survival.append(self.survival[-1] * a)

    def __call__(self, num_drafts: int) -> int:
        self.u = (self.u + GOLDEN) % 1.0  # the additive golden-ratio sequence: evenly spread in [0, 1)
        u, survival = self.u, self.survival
        accepted = 0
        for i in range(1, min(num_drafts, len(self.rates)) + 1):
            if u >= survival[i]:
                break
            accepted = i
        return accepted

    def expected_tokens(self, num_drafts: int | None = None) -> float:
        """E[tokens a verify step emits] = 1 + sum over i of a_1 ... a_i (the bonus token included)."""
        total, p = 1.0, 1.0
        for a in self.rates[:num_drafts]:
            p *= a
            total += p
        return total

"""`SyntheticPrompt`: the replayed sources' `SyntheticTokens` (one lazy prompt type), with these ids.

The simulator knows token counts, not text. To let the prefix cache find shared prefixes (a group's
system prompt, a chat's earlier turns), a prompt is described as segments `(key, length)`: two
prompts share a token exactly where they share a segment at the same position. Ids are a cheap
deterministic function of (key, offset); a segment with key None stands for generated text and
holds the simulator's placeholder id 0, so a later turn that re-sends an earlier answer hashes to
the same blocks the earlier request cached.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.workload.synthetic_tokens import SyntheticTokens

VOCAB = 32000


def segment_token(key: int | None, offset: int, vocab: int = VOCAB) -> int:
    """The id at `offset` of segment `key` (0 for generated text)."""
    if key is None:
        return 0
    # a small integer mix (splitmix-like) keeps ids spread over the vocabulary and deterministic
    x = (key * 0x9E3779B1 + offset * 0x85EBCA77) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return 1 + x % (vocab - 1)


def segment_tokens(key: int | None, lo: int, hi: int, vocab: int = VOCAB) -> list[int]:
    """Ids of offsets [lo, hi) of segment `key` (vectorised `segment_token`)."""
    if key is None:
        return [0] * (hi - lo)
    off = np.arange(lo, hi, dtype=np.uint64)
    x = (np.uint64(key * 0x9E3779B1 & 0xFFFFFFFF) + off * np.uint64(0x85EBCA77)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x2C1B3C6D)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(12)
    return (np.uint64(1) + x % np.uint64(vocab - 1)).astype(np.int64).tolist()


class SyntheticPrompt(SyntheticTokens):
    """`SyntheticTokens` over `((key, length), ...)` with this module's ids: a key None is generated
    text (id 0), and empty segments are dropped."""

    __slots__ = ()

    def __init__(self, segments: Sequence[tuple[int | None, int]], vocab_size: int = VOCAB) -> None:
        self._set(tuple((k, int(n)) for k, n in segments if int(n) > 0), vocab_size)

    def _segment_tokens(self, key: int | None, lo: int, hi: int) -> list[int]:
        if hi - lo < 32:
            return [segment_token(key, i, self.vocab_size) for i in range(lo, hi)]
        return segment_tokens(key, lo, hi, self.vocab_size)

    def __repr__(self) -> str:
        return f"SyntheticPrompt({len(self)} tokens, {len(self.segments)} segments)"

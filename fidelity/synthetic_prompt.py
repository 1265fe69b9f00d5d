"""`SyntheticPrompt`: a lazy token-id sequence made of named segments, for prefix-cache hits.

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

VOCAB = 32000


def segment_token(key: int | None, offset: int) -> int:
    """The id at `offset` of segment `key` (0 for generated text)."""
    if key is None:
        return 0
    # a small integer mix (splitmix-like) keeps ids spread over the vocabulary and deterministic
    x = (key * 0x9E3779B1 + offset * 0x85EBCA77) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return 1 + x % (VOCAB - 1)


def segment_tokens(key: int | None, lo: int, hi: int) -> list[int]:
    """Ids of offsets [lo, hi) of segment `key` (vectorised `segment_token`)."""
    if key is None:
        return [0] * (hi - lo)
    off = np.arange(lo, hi, dtype=np.uint64)
    x = (np.uint64(key * 0x9E3779B1 & 0xFFFFFFFF) + off * np.uint64(0x85EBCA77)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x2C1B3C6D)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(12)
    return (np.uint64(1) + x % np.uint64(VOCAB - 1)).astype(np.int64).tolist()


class SyntheticPrompt(Sequence):
    """Token ids over segments `((key, length), ...)`; supports `len`, indexing and slicing (-> list)."""

    __slots__ = ("segments", "_len")

    def __init__(self, segments: Sequence[tuple[int | None, int]]) -> None:
        self.segments = tuple((k, int(n)) for k, n in segments if int(n) > 0)
        self._len = sum(n for _, n in self.segments)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            out: list[int] = []
            pos = 0
            for key, n in self.segments:
                lo, hi = max(start, pos), min(stop, pos + n)
                if lo < hi:
                    out.extend(segment_tokens(key, lo - pos, hi - pos))
                pos += n
                if pos >= stop:
                    break
            return out
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        pos = 0
        for key, n in self.segments:
            if index < pos + n:
                return segment_token(key, index - pos)
            pos += n
        raise IndexError(index)  # pragma: no cover

    def extended(self, *segments: tuple[int | None, int]) -> "SyntheticPrompt":
        """This prompt followed by more segments."""
        return SyntheticPrompt(self.segments + tuple(segments))

    def __repr__(self) -> str:
        return f"SyntheticPrompt({len(self)} tokens, {len(self.segments)} segments)"

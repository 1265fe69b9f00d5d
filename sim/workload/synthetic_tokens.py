"""`SyntheticTokens`: a lazy prompt made of seeded segments, for prefix-cache experiments.

The one synthetic-prompt type: the workloads' prompts, and (with its own ids,
`fidelity.synthetic_prompt.SyntheticPrompt`) the replayed sources'. A prompt is a list of
`(seed, length)` segments. Token `i` of a segment is a deterministic hash of
`(seed, i)` folded into `[0, vocab_size)`, so two prompts that start with the same segments have the
same tokens there (and the block manager's hashes of those blocks match exactly), while different
seeds give unrelated tokens. Nothing is materialised until sliced: a 100k-token prompt costs a few
tuples. A shorter segment with the same seed is a prefix of the longer one (Mooncake's last,
partial 512-token block).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(x: int) -> int:
    """splitmix64 finaliser: a bijection on 64-bit ints with good avalanche."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
    return x ^ (x >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class SyntheticTokens(Sequence):
    """A read-only token-id sequence built from `(seed, length)` segments (see the module doc)."""

    __slots__ = ("segments", "vocab_size", "_starts", "_len")

    def __init__(self, segments: Sequence[tuple[int, int]], vocab_size: int = 32000) -> None:
        segments = tuple((int(s), int(n)) for s, n in segments)
        if any(n < 0 for _, n in segments):
            raise ValueError("SyntheticTokens: segment lengths must be >= 0")
        self._set(segments, vocab_size)

    def _set(self, segments: tuple, vocab_size: int) -> None:
        self.segments = segments
        self.vocab_size = vocab_size
        self._starts = [0, *accumulate(n for _, n in segments)]
        self._len = self._starts[-1]

    def __len__(self) -> int:
        return self._len

    def _segment_tokens(self, seed: int, lo: int, hi: int) -> list[int]:
        """The ids of offsets [lo, hi) of segment `seed` (a subclass may give other ids)."""
        base = _mix((seed * _GOLDEN) & _M64)  # decorrelate neighbouring seeds
        if hi - lo < 32:
            return [_mix((base + i * _GOLDEN) & _M64) % self.vocab_size for i in range(lo, hi)]
        idx = np.arange(lo, hi, dtype=np.uint64)
        with np.errstate(over="ignore"):
            vals = _mix_array(np.uint64(base) + idx * np.uint64(_GOLDEN))
        return (vals % np.uint64(self.vocab_size)).astype(np.int64).tolist()

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            out: list[int] = []
            if start >= stop:
                return out
            k = bisect_right(self._starts, start) - 1
            while start < stop:
                seg_start, seg_end = self._starts[k], self._starts[k + 1]
                hi = min(stop, seg_end)
                if hi > start:
                    out.extend(self._segment_tokens(self.segments[k][0], start - seg_start, hi - seg_start))
                start = max(start, hi)
                k += 1
            return out
        i = key + self._len if key < 0 else key
        if not 0 <= i < self._len:
            raise IndexError("SyntheticTokens index out of range")
        return self[i:i + 1][0]

    def __iter__(self):
        return iter(self[0:self._len])

    def truncated(self, n: int) -> "SyntheticTokens":
        """The first `n` tokens, still lazy (for clipping prompts to max_model_len)."""
        segs, left = [], n
        for seed, length in self.segments:
            if left <= 0:
                break
            segs.append((seed, min(length, left)))
            left -= length
        return type(self)(segs, self.vocab_size)

    def extended(self, *segments: tuple[int, int]) -> "SyntheticTokens":
        """This prompt followed by more segments (a chat's next turn), still lazy."""
        return type(self)(self.segments + tuple(segments), self.vocab_size)

    def __repr__(self) -> str:
        return f"SyntheticTokens({len(self.segments)} segments, {self._len} tokens)"

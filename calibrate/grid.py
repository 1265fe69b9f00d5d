"""`Grid`: the shapes and repeat counts a calibration times (`servesim calibrate --grid smoke|quick|full`)."""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.engine_steps import ENGINE_GROUPS


@dataclass(frozen=True)
class Grid:
    """The shapes and repeat counts of one calibration run."""

    tokens: tuple[int, ...]
    sampled: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]  # (chunk tokens, context length)
    decode: tuple[tuple[int, int], ...]  # (batch size, KV length)
    swap_blocks: tuple[int, ...]
    warmup: int
    repeats: int
    engine_groups: tuple[int, ...] = ENGINE_GROUPS  # request groups of the engine-step calibration
    engine_max_prompt: int = 1000  # the longest prompt of the engine-step calibration workload
    engine_max_output: int = 40  # ... and its longest output
    after_prefill_repeats: int = 12  # cycles per prefill size of the after-prefill probe

    @classmethod
    def make(cls, quick: bool | str, max_len: int = 2048, max_seqs: int = 256) -> "Grid":
        """The grid of a mode: `quick` True or "quick", False or "full", or "smoke" (a handful of shapes
        and one engine group: seconds on a CPU, for dry runs of the machinery; fits nothing well)."""
        if quick == "smoke":
            return cls((1, 2, 3, 8, 64, 256), (1, 2, 3, 8), _pairs((4, 64, 256), (0, 16, 64), max_len),
                       tuple((b, L) for b in (1, 2, 4, 8) for L in (16, 64, 256) if L <= max_len), (1, 4), 1, 2,
                       (1, 3, 2, 4), 128, 8, 2)
        if quick not in (True, False, "quick", "full"):
            raise ValueError(f"grid: {quick!r} is not allowed; choose one of smoke, quick, full")
        quick = quick in (True, "quick")
        if quick:
            # every count of 1-8 tokens: small-M GEMM kernels are not monotone there when their weights
            # come from memory (calibrate.fit._pwl; docs/results/2026-12-06-in-step-ops.md)
            tokens = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
            sampled = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
            # cached context 0 (a first chunk: SDPA's causal kernel) and 16 (a later chunk: the
            # explicit-mask kernel, ~2x the cost) bracket the jump between the two regimes tightly
            # first chunks up to the model length: a whole prompt (continuous, static) runs as one chunk,
            # and beyond the grid a curve continues linearly where attention grows with the square
            chunks, extra = _to_max_len((4, 16, 64, 128, 256, 512, 1024), max_len), (0, 16, 64, 128, 256, 512)
            # decode attention on CPU is far from bilinear between coarse knots (inside engine steps,
            # batches of 3-4 at 128-256 tokens ran 1.5x what a 1/2/4 x 16/128/512 grid interpolated):
            # the grid is dense where most decode steps of a light load fall, and cheap to time
            batches, kvs = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32), (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
            return cls(tokens, sampled, _pairs(chunks, extra, max_len), _grid(batches, kvs, max_len),
                       (1, 4, 16, 64), 2, 5)
        tokens = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
                  2048, 3072, 4096)
        sampled = tuple(s for s in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256) if s <= max_seqs)
        chunks, extra = _to_max_len((2, 4, 16, 64, 128, 256, 512, 1024), max_len), (0, 16, 64, 128, 256, 512, 1024)
        batches, kvs = ((1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128),
                        (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048))
        return cls(tokens, sampled, _pairs(chunks, extra, max_len), _grid(batches, kvs, max_len),
                   (1, 4, 16, 64, 256), 3, 11, ENGINE_GROUPS * 2, after_prefill_repeats=16)


def _to_max_len(chunks: tuple[int, ...], max_len: int) -> tuple[int, ...]:
    """`chunks` continued by doublings up to `max_len`, which ends them (a whole prompt of the model's length)."""
    out = [c for c in chunks if c < max_len]
    while out and out[-1] * 2 < max_len:
        out.append(out[-1] * 2)
    return tuple(out) + (max_len,)


def _pairs(chunks, extra, max_len):
    return tuple((q, q + e) for q in chunks for e in extra if q + e <= max_len)


def _grid(batches, kvs, max_len):
    """(batch, KV length) pairs, the KV lengths continued by doublings up to `max_len` (`_to_max_len`)."""
    return tuple((b, L) for b in batches for L in _to_max_len(kvs, max_len))

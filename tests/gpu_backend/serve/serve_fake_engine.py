"""A small stand-in for `gpu_backend.engine.Engine` that honours the same API, for server tests.

It is the front-end calibration's `ProbeEngine` (same ingress contract as the real engine: a short
lock around the ingress lists, swapped in at step boundaries; one token of a fixed script per
running request per step, so tests know the text; `on_output` called on the engine thread) plus
what the server tests need on top: KV blocks counted per request (ceil(tokens / block_size)) and
freed on finish and abort, so leak checks through /metrics mean something; an EOS token that
stops a request; `pause()`, which holds the loop at a step boundary (queues fill up).
"""
from __future__ import annotations

import math
import threading

from calibrate.probe_engine import ProbeEngine
from policies import FinishReason

SCRIPT_TEXT = " the quick brown fox jumps over the lazy dog."  # what the tests' fake engine spells


class FakeEngine(ProbeEngine):
    """One-token-per-step engine with block accounting, an EOS token and pause/resume."""

    def __init__(self, script: list[int], step_time_s: float = 0.002, block_size: int = 4,
                 num_gpu_blocks: int = 100_000, max_num_seqs: int = 256, eos_token_id: int | None = None) -> None:
        super().__init__(script, step_s=step_time_s, max_num_seqs=max_num_seqs)
        self.block_size = block_size
        self.num_gpu_blocks = num_gpu_blocks
        self.eos_token_id = eos_token_id
        self.blocks: dict = {}  # req_id -> blocks held
        self._resume = threading.Event()
        self._resume.set()

    def stats(self) -> dict:
        used = sum(self.blocks.values())
        return {**super().stats(), "num_used_gpu_blocks": used, "num_gpu_blocks": self.num_gpu_blocks,
                "kv_usage": used / self.num_gpu_blocks}

    def stop(self) -> None:
        self._resume.set()  # a paused loop must get to its stop check
        super().stop()

    # --- test helpers ---------------------------------------------------------------------------
    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    # --- ProbeEngine's hooks --------------------------------------------------------------------
    def _at_step_boundary(self) -> None:
        self._resume.wait()

    def _after_token(self, request) -> None:
        self.blocks[request.req_id] = math.ceil(request.num_tokens / self.block_size)

    def _finish_reason(self, request, token: int) -> FinishReason | None:
        if token == self.eos_token_id and not request.ignore_eos:
            return FinishReason.STOP
        return super()._finish_reason(request, token)

    def _end(self, request, cb, reason: FinishReason, now: float, token_ids: list) -> None:
        self.blocks.pop(request.req_id, None)
        super()._end(request, cb, reason, now, token_ids)

"""A small stand-in for `gpu_backend.engine.Engine` that honours the same API, for server tests.

Same contract as the real engine: `add_request(request, on_output=cb)` and `abort(req_id)` only
append to ingress lists under a short lock; the engine thread swaps those lists in at step
boundaries; every step sleeps `step_time_s` and gives each running request one token from a fixed
script (so tests know the text), calling `cb(RequestOutput(...))` on the engine thread. KV blocks
are counted per request (ceil(tokens / block_size)) and freed on finish and abort, so leak checks
through /metrics mean something. `pause()` holds the loop at a step boundary (queues fill up).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from policies import FinishReason, RequestState

SCRIPT_TEXT = " the quick brown fox jumps over the lazy dog."  # what the tests' fake engine spells


@dataclass(frozen=True)
class RequestOutput:
    """The engine's per-token callback payload (same fields as gpu_backend.engine.RequestOutput)."""

    req_id: object
    new_token_ids: list
    finished: bool
    finish_reason: object
    time: float


class FakeEngine:
    """One-token-per-step engine with block accounting; the clock is time.perf_counter()."""

    def __init__(self, script: list[int], step_time_s: float = 0.002, block_size: int = 4,
                 num_gpu_blocks: int = 100_000, max_num_seqs: int = 256, eos_token_id: int | None = None) -> None:
        self.script = list(script)
        self.step_time_s = step_time_s
        self.block_size = block_size
        self.num_gpu_blocks = num_gpu_blocks
        self.max_num_seqs = max_num_seqs
        self.eos_token_id = eos_token_id
        self._lock = threading.Lock()
        self._incoming: list = []
        self._aborts: list = []
        self._wake = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.waiting: list = []  # engine thread only
        self.running: dict = {}  # req_id -> (request, cb)
        self.blocks: dict = {}  # req_id -> blocks held
        self.finished: list = []  # every request that ended, any reason
        self.num_steps = 0

    # --- the Engine API -------------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter()

    def add_request(self, request, on_output=None) -> None:
        with self._lock:
            self._incoming.append((request, on_output))
        self._wake.set()

    def abort(self, req_id) -> None:
        with self._lock:
            self._aborts.append(req_id)
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fake-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._resume.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> dict:
        used = sum(self.blocks.values())
        return {"num_running": len(self.running), "num_waiting": len(self.waiting), "num_swapped": 0,
                "num_used_gpu_blocks": used, "num_gpu_blocks": self.num_gpu_blocks,
                "kv_usage": used / self.num_gpu_blocks, "num_preemptions": 0}

    # --- test helpers ---------------------------------------------------------------------------
    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    # --- the loop -------------------------------------------------------------------------------
    def _finish(self, req_id, reason: FinishReason, now: float) -> None:
        request, cb = self.running.pop(req_id)
        self.blocks.pop(req_id, None)
        request.finish(reason, now)
        self.finished.append(request)
        if cb is not None:
            cb(RequestOutput(req_id, [], True, reason.value, now))

    def _loop(self) -> None:
        while not self._stop:
            self._resume.wait()
            with self._lock:  # the short critical section: swap the ingress lists
                incoming, self._incoming = self._incoming, []
                aborts, self._aborts = self._aborts, []
            self.waiting.extend(incoming)
            now = self.now()
            for req_id in aborts:
                if req_id in self.running:
                    self._finish(req_id, FinishReason.ABORTED, now)
                else:
                    for i, (request, cb) in enumerate(self.waiting):
                        if request.req_id == req_id:
                            del self.waiting[i]
                            request.finish(FinishReason.ABORTED, now)
                            self.finished.append(request)
                            if cb is not None:
                                cb(RequestOutput(req_id, [], True, FinishReason.ABORTED.value, now))
                            break
            while self.waiting and len(self.running) < self.max_num_seqs:
                request, cb = self.waiting.pop(0)
                request.transition(RequestState.RUNNING_CTX)
                request.first_scheduled_time = now
                self.running[request.req_id] = (request, cb)
            if not self.running:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            time.sleep(self.step_time_s)
            self.num_steps += 1
            now = self.now()
            for req_id, (request, cb) in list(self.running.items()):
                token = self.script[request.num_output_tokens % len(self.script)]
                if request.state is RequestState.RUNNING_CTX:
                    request.transition(RequestState.RUNNING_GEN)
                request.record_token(token, now)
                self.blocks[req_id] = math.ceil(request.num_tokens / self.block_size)
                stop = token == self.eos_token_id and not request.ignore_eos
                done = stop or request.num_output_tokens >= request.max_tokens
                if cb is not None:
                    cb(RequestOutput(req_id, [token], done,
                                     (FinishReason.STOP if stop else FinishReason.LENGTH).value if done else None, now))
                if done:
                    self.running.pop(req_id)
                    self.blocks.pop(req_id, None)
                    request.finish(FinishReason.STOP if stop else FinishReason.LENGTH, now)
                    self.finished.append(request)

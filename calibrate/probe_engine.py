"""`ProbeEngine`: a stand-in engine whose steps sleep, so that the serving front end is timed alone.

It has the real Engine's API and stamps (`gpu_backend.engine.Engine`: an ingress list under a short
lock, a thread that takes it at step boundaries, one token per running request per step, the
`on_output` callback), but no torch and no model. `probe_server(tokenizer)` puts it behind the real
HTTP app: what `servesim serve --calibrate-frontend --probe-engine` and the front-end tests time
(`calibrate.frontend`). The serve tests' fake engine subclasses it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gpu_backend.serve.config import ServeConfig
from policies import FinishReason, RequestState

# the probe's output: whole words, each one token's chunk of text
PROBE_TEXT = " the house by the river was quiet in the morning and the garden was green"



@dataclass(frozen=True)
class _Output:
    """The engine's per-token callback payload (the fields of gpu_backend.engine.RequestOutput)."""

    req_id: object
    new_token_ids: list
    finished: bool
    finish_reason: object
    time: float


class ProbeEngine:
    """A stand-in engine with the real Engine's API and stamps, whose steps sleep (clock: perf_counter).

    `add_request` appends to an ingress list under a short lock and wakes the engine thread, as the
    real Engine does; the thread takes the list at a step boundary (stamping the request's
    `first_scheduled_time`; at most `max_num_seqs` run, the rest wait), then gives each request one
    token of `script` per step of `step_s` seconds, recording it at the step's end (`token_times`)
    and calling `on_output`. The steps sleep, so the interpreter is free for the event loop: the
    front end alone is timed. The serve tests' fake engine subclasses this (the `_hooks`).
    """

    def __init__(self, script: list[int], step_s: float = 0.004, max_num_seqs: int | None = None) -> None:
        self.script = list(script)
        self.step_s = step_s
        self.max_num_seqs = max_num_seqs  # None: every request runs at once
        self._lock = threading.Lock()
        self._incoming: list = []
        self._aborts: list = []
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.waiting: list = []  # engine thread only: (request, on_output) not admitted yet
        self.running: dict = {}  # req_id -> (request, on_output)
        self.finished: list = []  # every request that ended, any reason
        self.num_steps = 0

    # --- the Engine API the server uses ---------------------------------------------------------
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
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> dict:
        return {"num_running": len(self.running), "num_waiting": len(self.waiting), "num_swapped": 0,
                "num_used_gpu_blocks": 0, "num_gpu_blocks": 1, "kv_usage": 0.0, "num_preemptions": 0}

    # --- hooks (a subclass adds pausing, KV accounting, stop tokens) ----------------------------
    def _at_step_boundary(self) -> None:
        """Called on the engine thread before each step boundary."""

    def _after_token(self, request) -> None:
        """Called on the engine thread after `request` recorded a token."""

    def _finish_reason(self, request, token: int) -> FinishReason | None:
        """Why `request` ends after recording `token`; None while it goes on."""
        return FinishReason.LENGTH if request.num_output_tokens >= request.max_tokens else None

    def _end(self, request, cb, reason: FinishReason, now: float, token_ids: list) -> None:
        """Finish `request` (already out of `running`/`waiting`), then send its last output, as the
        real Engine does."""
        request.finish(reason, now)
        self.finished.append(request)
        if cb is not None:
            cb(_Output(request.req_id, token_ids, True, reason.value, now))

    # --- the loop -------------------------------------------------------------------------------
    def _abort(self, req_id, now: float) -> None:
        if req_id in self.running:
            self._end(*self.running.pop(req_id), FinishReason.ABORTED, now, [])
            return
        for i, (request, cb) in enumerate(self.waiting):
            if request.req_id == req_id:
                del self.waiting[i]
                self._end(request, cb, FinishReason.ABORTED, now, [])
                return

    def _loop(self) -> None:
        while not self._stop:
            self._at_step_boundary()
            with self._lock:  # the short critical section: swap the ingress lists
                incoming, self._incoming = self._incoming, []
                aborts, self._aborts = self._aborts, []
            self.waiting.extend(incoming)
            now = self.now()
            for req_id in aborts:
                self._abort(req_id, now)
            while self.waiting and (self.max_num_seqs is None or len(self.running) < self.max_num_seqs):
                request, cb = self.waiting.pop(0)
                request.transition(RequestState.RUNNING_CTX)
                request.first_scheduled_time = now
                self.running[request.req_id] = (request, cb)
            if not self.running:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            time.sleep(self.step_s)  # a step that leaves the interpreter to the event loop
            self.num_steps += 1
            now = self.now()
            for req_id, (request, cb) in list(self.running.items()):
                token = self.script[request.num_output_tokens % len(self.script)]
                if request.state is RequestState.RUNNING_CTX:
                    request.transition(RequestState.RUNNING_GEN)
                request.record_token(token, now)
                self._after_token(request)
                reason = self._finish_reason(request, token)
                if reason is not None:
                    del self.running[req_id]
                    self._end(request, cb, reason, now, [token])
                elif cb is not None:
                    cb(_Output(req_id, [token], False, None, now))


def probe_server(tokenizer, step_s: float = 0.004, model_name: str = "tiny-llama"):
    """An `OpenAIServer` with the real tokenizer in front of a `ProbeEngine` (no torch)."""
    from gpu_backend.serve.server import OpenAIServer  # the serve extra (fastapi)

    engine = ProbeEngine(tokenizer.encode(PROBE_TEXT, add_special_tokens=False), step_s=step_s)
    return OpenAIServer(engine, tokenizer, ServeConfig(model_name=model_name), max_model_len=1 << 20,
                        make_sampling=None)

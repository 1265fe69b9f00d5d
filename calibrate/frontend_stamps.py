"""The server's tokenizer and engine, wrapped to time what `calibrate.frontend` needs: each encode
on the thread that calls it, and each request's outputs as the engine hands them over."""
from __future__ import annotations

import threading
import time


class TimedTokenizer:
    """Wraps the server's tokenizer: times each `encode` (wall clock) on the thread that runs it.

    The server tokenizes a prompt on a worker thread and adds the request from its event loop, so
    the engine wrapper pairs a request with the encode whose ids are its prompt's (`pop`): that
    encode lies inside the request's ingress, whatever the machine's load (a separate timing of the
    same text need not).
    """

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._seconds: dict[tuple, float] = {}

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def encode(self, *args, **kwargs):
        t = time.perf_counter()
        ids = self._tokenizer.encode(*args, **kwargs)
        seconds = time.perf_counter() - t
        with self._lock:
            self._seconds[tuple(ids)] = seconds
        return ids

    def pop(self, ids) -> float | None:
        """The time of the encode that gave `ids`, once (None when none did since)."""
        with self._lock:
            return self._seconds.pop(tuple(ids), None)


class Stamping:
    """Wraps the server's engine: keeps every submitted Request and times its `on_output` calls.

    The engine's clock is turned into `time.perf_counter` with `offset` (read once at start), so
    the client's and the engine's stamps compare. With a `TimedTokenizer`, each request's own
    encode time is kept too (`encode_s`).
    """

    def __init__(self, engine, tokenizer: TimedTokenizer | None = None) -> None:
        self._engine = engine
        self._tokenizer = tokenizer
        self.requests: dict = {}
        self.encode_s: dict = {}
        self.callback_s: list[float] = []
        self.offset = time.perf_counter() - engine.now()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def add_request(self, request, on_output=None) -> None:
        self.requests[request.req_id] = request
        if self._tokenizer is not None:
            self.encode_s[request.req_id] = self._tokenizer.pop(request.prompt_token_ids)

        def timed(out, cb=on_output):
            t = time.perf_counter()
            cb(out)
            self.callback_s.append(time.perf_counter() - t)
        self._engine.add_request(request, on_output=timed if on_output is not None else None)

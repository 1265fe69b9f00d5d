"""One request's bridge from the engine thread to its asyncio handler, with its bookkeeping.

The engine calls `on_output` on its own thread after every step that produced tokens for the
request. That callback must stay short: it updates the server's counters and histograms (under the
metrics' lock) and hands the output to the event loop with `call_soon_threadsafe`. The handler
awaits `next_output()`. `close()` is idempotent, so whichever comes first (the engine's finish, a
stop string, a client disconnect) does the final accounting exactly once.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Protocol

from gpu_backend.serve.metrics import ServerMetrics
from policies import Request


class StreamOwner(Protocol):
    """What a stream reports to: the server's metrics and its two hooks (`OpenAIServer` is one)."""

    metrics: ServerMetrics

    def on_first_token(self) -> None: ...

    def on_closed(self, stream: "RequestStream", got_first: bool) -> None: ...


def reason_name(reason: object) -> str:
    """OpenAI's finish_reason for an engine finish reason (enum or string)."""
    name = str(getattr(reason, "value", reason) or "stop")
    return {"aborted": "abort"}.get(name, name)


class RequestStream:
    """Queue of engine outputs for one request, plus its first-token / finish accounting."""

    def __init__(self, server: StreamOwner, request: Request, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.request = request
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self._lock = threading.Lock()
        self.num_output_tokens = 0
        self.first_token_time: float | None = None
        self.last_token_time: float | None = None
        self.finish_reason: str | None = None  # set once, by close()

    @property
    def closed(self) -> bool:
        return self.finish_reason is not None

    # --- engine thread ------------------------------------------------------------------------
    def on_output(self, out) -> None:
        """RequestOutput callback (engine thread): account the tokens, wake the handler."""
        metrics = self.server.metrics
        n = len(out.new_token_ids)
        with self._lock:
            if self.finish_reason is not None:
                return  # already closed by the server (stop string, disconnect): late outputs are dropped
            if n:
                if self.first_token_time is None:
                    self.first_token_time = out.time
                    metrics.observe_first_token(out.time - self.request.arrival_time)
                    self.server.on_first_token()
                    metrics.observe_tokens(n, None)
                else:
                    metrics.observe_tokens(n, out.time - self.last_token_time)
                self.last_token_time = out.time
                self.num_output_tokens += n
        self._wake(out)
        if out.finished:
            self.close(reason_name(out.finish_reason), out.time)

    def _wake(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down): nobody is listening
            pass

    # --- either thread ------------------------------------------------------------------------
    def close(self, reason: str, now: float | None = None) -> bool:
        """Finish the request's accounting once; False if it was already closed."""
        with self._lock:
            if self.finish_reason is not None:
                return False
            self.finish_reason = reason
            got_first = self.first_token_time is not None
        end = self.last_token_time if self.last_token_time is not None else now
        e2e = None if end is None or not got_first else end - self.request.arrival_time
        self.server.metrics.observe_finished(reason, self.request.num_prompt_tokens, e2e)
        self.server.on_closed(self, got_first)
        self._wake(None)  # a handler still waiting learns that no more outputs will come
        return True

    async def next_output(self):
        """The next RequestOutput; None once the request was closed without a final output."""
        return await self.queue.get()

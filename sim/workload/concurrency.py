"""`ConcurrencyCap`: a client that keeps at most N requests in flight (`workload.max_concurrency`).

Benchmark clients bound their requests in flight: `vllm bench serve --max-concurrency N` makes
each request wait for a free slot before it is sent, in the order the requests were due. The
wrapped workload says when each request is due; this sends it then, or when a request in flight
ends if all N slots are busy. A request's arrival is its send (the client measures TTFT from it,
and the server sees nothing before it).
"""
from __future__ import annotations

from collections import deque

from policies import Request


class ConcurrencyCap:
    """Wraps a workload (`start()`, `on_finish()`): at most `max_concurrency` of its requests in flight."""

    def __init__(self, inner, max_concurrency: int) -> None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"workload.max_concurrency: expected a positive integer, got {max_concurrency!r}")
        self.inner = inner
        self.max_concurrency = max_concurrency
        self._due: deque[Request] = deque()  # waiting for a slot, in the order they are due
        self._in_flight = 0

    def __getattr__(self, name: str):
        # counters and settings of the wrapped workload (num_clipped, cfg, ...): not `stream`, which
        # would send every request at its due time
        if name in ("stream", "stream_parts"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def start(self) -> list[Request]:
        self._due = deque(sorted(self.inner.start(), key=lambda r: r.arrival_time))
        return self._release(0.0)

    def on_finish(self, request: Request, now: float) -> list[Request]:
        self._in_flight -= 1
        follow_ups = self.inner.on_finish(request, now)
        if follow_ups:  # the wrapped workload's own next requests queue behind those already due
            self._due = deque(sorted([*self._due, *follow_ups], key=lambda r: r.arrival_time))
        return self._release(now)

    def _release(self, now: float) -> list[Request]:
        out = []
        while self._due and self._in_flight < self.max_concurrency:
            request = self._due.popleft()
            request.arrival_time = max(request.arrival_time, now)  # sent when its slot frees
            self._in_flight += 1
            out.append(request)
        return out

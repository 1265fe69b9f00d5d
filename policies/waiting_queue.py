"""Queue order for requests that wait (new, preempted-for-recompute, or swapped out).

`fcfs`: arrival order; a preempted request goes back to the head (vLLM v1 `prepend_request`).
`priority`: lower `priority` value first, then earlier arrival (vLLM `Request.__lt__`); "prepend" is a
plain push since the heap order decides, so a preempted request goes back among its own priority by
its arrival, ahead of everything that arrived after it. Requests with equal arrival times (a burst)
keep the order in which they reached the scheduler (`Request.arrival_order`): vLLM stamps arrivals
with the wall clock, so its requests never tie, and one submitted first sorts first.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from policies.request import Request


def priority_key(req: "Request") -> tuple:
    """Sort key of the priority policy: smaller is served first (and preempted last)."""
    return (req.priority, req.arrival_time, req.arrival_order)


class FCFSQueue:
    """First come, first served; preempted requests re-enter at the head."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque = deque()

    def push(self, req: "Request") -> None:
        self._q.append(req)

    def prepend(self, req: "Request") -> None:
        self._q.appendleft(req)

    def insert(self, index: int, req: "Request") -> None:
        """Put `req` at position `index` from the head (0: `prepend`)."""
        self._q.insert(index, req)

    def peek(self) -> "Request":
        return self._q[0]

    def pop(self) -> "Request":
        return self._q.popleft()

    def remove(self, req: "Request") -> None:
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator["Request"]:
        return iter(self._q)


class PriorityQueue:
    """A heap on `priority_key`, then insertion order (for requests never added to a scheduler)."""

    __slots__ = ("_heap", "_counter")

    def __init__(self) -> None:
        self._heap: list = []
        self._counter = itertools.count()

    def push(self, req: "Request") -> None:
        heapq.heappush(self._heap, (*priority_key(req), next(self._counter), req))

    prepend = push

    def insert(self, index: int, req: "Request") -> None:
        """A plain push: the heap order decides, not `index`."""
        self.push(req)

    def peek(self) -> "Request":
        return self._heap[0][-1]

    def pop(self) -> "Request":
        return heapq.heappop(self._heap)[-1]

    def remove(self, req: "Request") -> None:
        self._heap = [e for e in self._heap if e[-1] is not req]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator["Request"]:
        return (e[-1] for e in sorted(self._heap, key=lambda e: e[:-1]))


def make_queue(policy: str) -> FCFSQueue | PriorityQueue:
    """The waiting queue for `scheduler.queue` ('fcfs' or 'priority')."""
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"scheduler.queue: {policy!r} is not allowed; choose one of fcfs, priority")

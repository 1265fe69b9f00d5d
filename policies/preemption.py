"""Who gets preempted, and how: recompute, swap, or hybrid.

Victim (when a running request cannot grow): with `fcfs` the newest running request (vLLM v1
`running.pop()`); with `priority` the one with the largest (priority, arrival) key, i.e. the lowest
priority and, among ties, the latest arrival (vLLM v1 `max(running, key=(priority, arrival_time))`,
v0 the tail of `running` sorted by the same key; `policies.waiting_queue.priority_key` breaks ties of
arrival_time by the order requests reached the scheduler).

Mode: `recompute` frees the blocks and re-prefills later; `swap` copies the blocks to CPU swap space
(falling back to recompute when the CPU space is full); `hybrid` recomputes requests that have
generated fewer than `hybrid_swap_threshold` tokens (little to lose) and swaps the others.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from policies.waiting_queue import priority_key

if TYPE_CHECKING:
    from policies.block_manager import BlockManager
    from policies.request import Request

RECOMPUTE = "recompute"
SWAP = "swap"


def lowest_priority_newest(running: list["Request"]) -> "Request":
    """The request with the largest `priority_key`: the lowest priority, then the latest arrival.

    Requests in one scheduler never tie (`Request.arrival_order`); among requests never added to
    one, ties go to the latest in `running`. So the request with the smallest key always progresses
    and two requests cannot preempt each other in turn.
    """
    return running[max(range(len(running)), key=lambda i: (*priority_key(running[i]), i))]


class Preemptor:
    """Picks preemption victims and the preemption mode (shared by every policy)."""

    __slots__ = ("mode", "queue", "hybrid_swap_threshold")

    def __init__(self, mode: str, queue: str, hybrid_swap_threshold: int = 64) -> None:
        self.mode = mode
        self.queue = queue
        self.hybrid_swap_threshold = hybrid_swap_threshold

    def pick_victim(self, running: list["Request"]) -> "Request":
        """The running request to preempt when memory runs out."""
        if self.queue == "priority":
            return lowest_priority_newest(running)
        return running[-1]

    def pick_priority_victim(self, running: list["Request"], waiting: "Request",
                             exclude: set | frozenset = frozenset()) -> "Request | None":
        """A running request of strictly lower priority than `waiting` (the lowest, newest), or None."""
        candidates = [r for r in running if r.req_id not in exclude]
        if not candidates:
            return None
        victim = lowest_priority_newest(candidates)
        return victim if victim.priority > waiting.priority else None

    def mode_for(self, req: "Request", block_manager: "BlockManager") -> str:
        """RECOMPUTE or SWAP for this victim; swap falls back to recompute without CPU space."""
        if self.mode == RECOMPUTE or req.num_computed_tokens == 0:  # nothing in the cache to save
            return RECOMPUTE
        if self.mode == "hybrid" and req.num_output_tokens < self.hybrid_swap_threshold:
            return RECOMPUTE
        return SWAP if block_manager.can_swap_out(req) else RECOMPUTE

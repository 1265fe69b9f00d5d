"""`OutstandingTokens`: a replica's running count of the tokens its live requests still owe.

A request owes the prompt it has left to compute plus the outputs it has left to produce:
`max(num_tokens - num_computed_tokens, 0) + max_tokens - num_output_tokens`. With
`num_tokens = num_prompt_tokens + num_output_tokens` that is `num_prompt_tokens + max_tokens -
min(num_computed_tokens, num_tokens)`: constant but for the last term, which only a step (its
schedule() and, with drafts, its update()), a preemption or an admission changes. So the count keeps
that term per request, as last seen, and their sum; a replica tells it of each request it admits
or ends and of those a step may have changed (`refresh`), and a router reads `total` in O(1)
instead of summing over every live request at every routing decision.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Iterable

from policies import Request

_req_id, _num_computed = attrgetter("req_id"), attrgetter("num_computed_tokens")


class OutstandingTokens:
    """Tokens still owed by a set of live requests: `total`, kept as requests join, change and leave.

    `add(request)` when a request becomes live, `remove(request)` when it ends (a request never
    added is ignored), `refresh(requests)` after their `num_computed_tokens` or outputs may have
    changed (requests not live here are skipped). `total` is then what summing every live
    request's owed tokens would give (`recount`).

    `drafts`: whether `num_computed_tokens` may run ahead of `num_tokens` (a step verifying
    speculative drafts, until its update); without them the last term is `num_computed_tokens`
    itself, which a refresh reads in C loops (it runs at every step of every replica).
    """

    def __init__(self, requests: Iterable[Request] = (), drafts: bool = True) -> None:
        self.total = 0
        self.drafts = bool(drafts)
        self._done: dict = {}  # req_id -> min(num_computed_tokens, num_tokens) as last counted
        for request in requests:
            self.add(request)

    def add(self, request: Request) -> None:
        done = min(request.num_computed_tokens, request.num_tokens)
        self._done[request.req_id] = done
        self.total += request.num_prompt_tokens + request.max_tokens - done

    def remove(self, request: Request) -> None:
        done = self._done.pop(request.req_id, None)
        if done is not None:
            self.total -= request.num_prompt_tokens + request.max_tokens - done

    def refresh(self, requests: Iterable[Request]) -> None:
        counted = self._done
        if not isinstance(requests, list):  # read twice below
            requests = list(requests)
        if not self.drafts:
            ids = list(map(_req_id, requests))
            old = list(map(counted.get, ids))
            if None not in old:  # all live here (else the general loop skips the others)
                new = list(map(_num_computed, requests))
                counted.update(zip(ids, new))
                self.total += sum(old) - sum(new)
                return
        change = 0
        for request in requests:
            rid = request.req_id
            old = counted.get(rid)
            if old is None:
                continue  # not live here (say, a hand-off's placeholder)
            c, n = request.num_computed_tokens, request.num_prompt_tokens + len(request.output_token_ids)
            done = c if c < n else n
            if done != old:
                counted[rid] = done
                change += old - done
        self.total += change

    @staticmethod
    def recount(requests: Iterable[Request]) -> int:
        """The owed tokens of `requests` summed one by one (what `total` must equal)."""
        return sum(max(r.num_tokens - r.num_computed_tokens, 0) + r.max_tokens - r.num_output_tokens
                   for r in requests)

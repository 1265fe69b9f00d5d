"""Routers: which replica of a pool gets a newly arrived request.

A router sees the replicas through two calls a `sim.replica.Replica` provides:
`num_outstanding_tokens()` (prompt left to compute plus outputs left, over its live requests) and
`scheduler.block_manager` (for the prefix-aware router's block size). All routers are deterministic
given their seed.

- `round_robin`: replica i, i+1, ... in turn.
- `least_tokens`: the replica owing the fewest tokens (ties: lowest index).
- `power_of_two`: two distinct replicas drawn at random, the one owing fewer tokens.
- `prefix_aware`: the replica whose cache (as the router remembers what it sent where) holds the
  longest prefix of the prompt's full blocks; ties and misses go to the least-loaded one. A replica
  more than `max_imbalance` times busier than the least-loaded one is passed over, so one hot
  prefix cannot pile all traffic on one replica.
"""
from __future__ import annotations

import random
from collections import OrderedDict
from typing import Protocol, Sequence

from policies import ConfigError, Request
from policies.config import check_choice

ROUTERS = ("round_robin", "least_tokens", "power_of_two", "prefix_aware")


class ReplicaLike(Protocol):
    """What a router reads from a replica (a `sim.replica.Replica`, or a stand-in in tests)."""

    def num_outstanding_tokens(self) -> int: ...


class Router:
    """Base class: `choose(request, replicas) -> index`; `on_finish` lets a router forget state."""

    name = "base"
    # whether `choose` reads anything of a replica but `num_outstanding_tokens()` (kept right at every
    # instant, carried stretches included): see `reads_only_load`
    reads_beyond_load = True

    def choose(self, request: Request, replicas: Sequence[ReplicaLike]) -> int:
        raise NotImplementedError

    def on_finish(self, request: Request, replica_index: int) -> None:
        pass


class RoundRobinRouter(Router):
    """Replica 0, 1, ..., n-1, 0, ... regardless of load."""

    name = "round_robin"
    reads_beyond_load = False

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: Request, replicas: Sequence[ReplicaLike]) -> int:
        i = self._next % len(replicas)
        self._next = i + 1
        return i


def least_loaded(replicas: Sequence[ReplicaLike], candidates: Sequence[int] | None = None) -> int:
    candidates = range(len(replicas)) if candidates is None else candidates
    return min(candidates, key=lambda i: (replicas[i].num_outstanding_tokens(), i))


class LeastTokensRouter(Router):
    """The replica with the fewest outstanding tokens (join-the-shortest-queue in tokens)."""

    name = "least_tokens"
    reads_beyond_load = False

    def choose(self, request: Request, replicas: Sequence[ReplicaLike]) -> int:
        return least_loaded(replicas)


class PowerOfTwoRouter(Router):
    """Power of two choices: sample two replicas, keep the one owing fewer tokens."""

    name = "power_of_two"
    reads_beyond_load = False

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def choose(self, request: Request, replicas: Sequence[ReplicaLike]) -> int:
        if len(replicas) == 1:
            return 0
        a, b = self._rng.sample(range(len(replicas)), 2)
        return least_loaded(replicas, sorted((a, b)))


def block_hashes(request: Request, block_size: int) -> list[int]:
    """Chained hashes of the prompt's full blocks (empty when the prompt has no token ids)."""
    ids = request.prompt_token_ids
    if ids is None:
        return []
    hashes, parent = [], 0
    for start in range(0, request.num_prompt_tokens - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start:start + block_size])))
        hashes.append(parent)
    return hashes


class PrefixAwareRouter(Router):
    """Sends a request where the longest prefix of its blocks is (probably) cached.

    The router keeps, per replica, an LRU set of the block hashes it routed there, capped at
    `capacity_blocks` (the replica's GPU blocks): a router-side model of each replica's prefix
    cache, as production routers do, rather than peeking into the replica.
    """

    name = "prefix_aware"
    reads_beyond_load = False

    def __init__(self, block_size: int = 16, capacity_blocks: Sequence[int] | int = 4096,
                 max_imbalance: float = 2.0) -> None:
        if max_imbalance < 1:
            raise ConfigError(f"cluster.max_imbalance: must be >= 1, got {max_imbalance}")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.max_imbalance = max_imbalance
        # per replica (by its name where it has one: an autoscaler changes which replicas are offered)
        self._cached: dict[object, OrderedDict[int, None]] = {}

    def _capacity(self, i: int) -> int:
        c = self.capacity_blocks
        return int(c if isinstance(c, int) else c[i])

    def choose(self, request: Request, replicas: Sequence[ReplicaLike]) -> int:
        caches = [self._cached.setdefault(getattr(r, "name", i), OrderedDict()) for i, r in enumerate(replicas)]
        hashes = block_hashes(request, self.block_size)
        loads = [r.num_outstanding_tokens() for r in replicas]
        limit = self.max_imbalance * min(loads) + request.num_prompt_tokens + request.max_tokens
        allowed = [i for i in range(len(replicas)) if loads[i] <= limit]

        def matched(i: int) -> int:
            n = 0
            for h in hashes:
                if h not in caches[i]:
                    break
                n += 1
            return n

        best = min(allowed, key=lambda i: (-matched(i), loads[i], i))
        cache = caches[best]
        for h in hashes:  # the replica will now hold these blocks; refresh their LRU position
            cache.pop(h, None)
            cache[h] = None
        while len(cache) > self._capacity(best):
            cache.popitem(last=False)
        return best


def reads_only_load(router: Router) -> bool:
    """Whether `router`'s own class says its `choose` reads no more of a replica than its load: then
    each replica's fast path may run through the others' events (`sim.cluster.colocated`). A subclass
    that does not say so itself is taken to read more (it may override `choose`)."""
    return vars(type(router)).get("reads_beyond_load", True) is False


def make_router(name: str, seed: int = 0, block_size: int = 16, capacity_blocks: Sequence[int] | int = 4096,
                max_imbalance: float = 2.0) -> Router:
    """The router called `name` (one of ROUTERS)."""
    check_choice("cluster.router", name, ROUTERS)
    if name == "round_robin":
        return RoundRobinRouter()
    if name == "least_tokens":
        return LeastTokensRouter()
    if name == "power_of_two":
        return PowerOfTwoRouter(seed)
    return PrefixAwareRouter(block_size, capacity_blocks, max_imbalance)

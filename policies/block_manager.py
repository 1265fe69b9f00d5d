"""The paged KV block manager: integer block ids, ref counts, swap space and the prefix cache.

Pure bookkeeping (no tensors): the simulator counts blocks, the engine maps the same ids onto its
KV tensors. A request's GPU blocks live in `request.block_table` (token order), its CPU blocks in
`request.cpu_block_table` while swapped out. Semantics follow vLLM v1's KV cache manager and block
pool (ENGINE-SEMANTICS.md §1.2); they are listed on `BlockManager`. An optional CPU tier of the
prefix cache (`offload`, a `policies.kv_offload.OffloadTier`, vLLM's KV offloading) holds copies of
full blocks by the same hashes; `offload_lookup`, `offload_load` and `offload_stores` are the block
side of its loads and stores (the scheduler drives them).
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import TYPE_CHECKING

from policies.config import ConfigError
from policies.kv_offload import OffloadTier

if TYPE_CHECKING:
    from policies.config import CacheConfig
    from policies.request import Request

NONE_HASH = hash(("servesim", "root"))  # parent hash of a request's first block (deterministic)
# a count-only request's KV is its own (no other request holds its tokens): its chain starts from a
# root drawn from this process-wide count, so no two requests share a block, in any block manager
_COUNT_ONLY_ROOTS = itertools.count()


class BlockManager:
    """GPU and CPU KV blocks: allocation, ref counts, LRU free queue, swap, prefix cache.

    - `allocate_slots(req, num_new_tokens)` grows a request's table so it covers
      `num_computed_tokens + num_new_tokens` tokens, or changes nothing and returns False.
    - Free blocks sit in one LRU queue. Allocation pops the head; every freed block goes to the tail,
      with or without a hash (vLLM 0.11-0.22's `BlockPool.free_blocks` appends them all; only later
      releases, vllm-project/vllm#42656, put blocks without a hash at the head). A request frees its
      blocks in reverse order, so its tail blocks (the least reusable) are evicted first.
    - Prefix cache (optional): a full block's hash is `hash((parent_hash, tuple(block_token_ids)))`;
      only full blocks are hashed. A hit block is shared (ref count > 1). A cached block whose ref count
      drops to 0 stays findable until the LRU queue hands it out again (eviction). A lookup never covers
      the last token (`num_tokens - 1`), so a full hit still recomputes it for logits. Unlike v1 we do
      not keep duplicate blocks under one hash: a second block with the same content stays unhashed.
      A chunk's full blocks are offered when allocated, before their KV is written (a request admitted
      later in the same step may share them, as in v1); a request that lets them go before that
      step ran (preempted in it) withdraws the ones nobody else holds.
    - A count-only request (no token ids: the simulator's) holds content no other request has, so no
      one else can hit its blocks; but it hits its own after a recompute preemption, as an engine's
      request does (v1 keeps a freed block's hash until evicted). Its full computed blocks are offered
      when it lets them go (`free`), not as they fill: nobody could hit them before, and so the
      simulator's replayed stretches (`append_blocks`) need not stop at block boundaries. Blocks it
      brings back (`swap_in`, a landed load) are offered at once, as for any request, so that copies
      of blocks it left cached decide the same way. The KV offload tier stores them as they fill.
    - The watermark (vLLM v0, 1% there, 0 in v1) only guards admissions and swap-ins, never the
      growth of a running request.
    - `null_block` (vLLM v1 from 0.8.3): block 0 of the pool is never handed out. v1's `BlockPool`
      takes it off its free queue at start as the placeholder that skipped (sliding-window) blocks
      point at, so of the `num_gpu_blocks` vLLM reports (and is given by `num_gpu_blocks_override`)
      one fewer hold KV; `get_usage` divides by `num_gpu_blocks - 1`. Here `num_gpu_blocks` is then
      the usable count and `num_pool_blocks` the pool's (block ids run 1..num_pool_blocks - 1).
    """

    __slots__ = (
        "block_size", "num_gpu_blocks", "num_pool_blocks", "num_cpu_blocks", "watermark_blocks",
        "enable_prefix_caching",
        "ref_counts", "block_hash", "free_queue", "cached", "free_cpu", "holders", "cpu_holders",
        "num_prefix_queried_tokens", "num_prefix_hit_tokens", "offload", "_lifo",
    )

    def __init__(self, num_gpu_blocks: int, block_size: int = 16, num_cpu_blocks: int = 0,
                 watermark: float = 0.0, enable_prefix_caching: bool = False, null_block: bool = False) -> None:
        if num_gpu_blocks < 1 + null_block:
            raise ConfigError(f"cache.num_gpu_blocks: must be >= {1 + null_block}, got {num_gpu_blocks}"
                              + (" (vLLM v1 keeps one block as its null block)" if null_block else ""))
        if block_size < 1:
            raise ConfigError(f"cache.block_size: must be >= 1, got {block_size}")
        self.block_size = block_size
        self.num_pool_blocks = num_gpu_blocks
        self.num_gpu_blocks = num_gpu_blocks - null_block  # the blocks that can hold KV
        self.num_cpu_blocks = num_cpu_blocks
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_gpu_blocks
        self.block_hash: list[int | None] = [None] * num_gpu_blocks
        # LRU free queue, its head at its *end* (block 0 first, as from a queue 0, 1, 2, ...). With
        # prefix caching an OrderedDict: O(1) pop-head, push-head/tail (freed blocks go to the tail)
        # and removal from the middle (prefix hits). Without, a list used as a stack (`_lifo`): every
        # freed block goes to the head, so a chunk's blocks come off and a request's go back in one
        # slice (the same block ids in the same order).
        self._lifo = not enable_prefix_caching
        self.free_queue: "list[int] | OrderedDict[int, None]" = (
            list(range(num_gpu_blocks - 1, null_block - 1, -1)) if self._lifo
            else OrderedDict.fromkeys(range(num_gpu_blocks - 1, null_block - 1, -1)))
        self.cached: dict[int, int] = {}  # block hash -> GPU block id
        self.free_cpu = list(range(num_cpu_blocks - 1, -1, -1))  # a stack; pops block 0 first
        self.holders: dict = {}  # req_id -> Request holding GPU blocks
        self.cpu_holders: dict = {}  # req_id -> Request holding CPU blocks
        self.num_prefix_queried_tokens = 0
        self.num_prefix_hit_tokens = 0
        self.offload = None  # policies.kv_offload.OffloadTier when the cache has a CPU tier

    @classmethod
    def from_config(cls, cache: "CacheConfig", enable_prefix_caching: bool | None = None,
                    null_block: bool = False) -> "BlockManager":
        if enable_prefix_caching is None:
            enable_prefix_caching = bool(cache.enable_prefix_caching)
        bm = cls(cache.num_gpu_blocks, cache.block_size, cache.num_cpu_blocks, cache.watermark,
                 enable_prefix_caching, null_block)
        if cache.num_offload_blocks:
            if not enable_prefix_caching:
                raise ConfigError("cache.offload_size_gb: the CPU tier is a prefix cache found by block hash; "
                                  "turn prefix caching on (cache.enable_prefix_caching = true, or policy 'vllm')")
            bm.offload = OffloadTier(cache.num_offload_blocks, cache.block_size, cache.offload_backend,
                                     cache.offload_s_per_block, cache.offload_block_bytes)
        return bm

    # --- counts -------------------------------------------------------------------------------
    @property
    def num_free_gpu_blocks(self) -> int:
        """Blocks no request holds (cached-but-unreferenced blocks count as free: evictable)."""
        return len(self.free_queue)

    @property
    def num_used_gpu_blocks(self) -> int:
        return self.num_gpu_blocks - len(self.free_queue)

    @property
    def usage(self) -> float:
        """Fraction of GPU blocks held by requests (0..1)."""
        return self.num_used_gpu_blocks / self.num_gpu_blocks

    @property
    def num_free_cpu_blocks(self) -> int:
        return len(self.free_cpu)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks currently findable in the prefix cache (held or evictable)."""
        return len(self.cached)

    @property
    def prefix_cache_hit_rate(self) -> float:
        """Hit tokens / queried tokens over all admissions (0 when nothing was queried)."""
        q = self.num_prefix_queried_tokens
        return self.num_prefix_hit_tokens / q if q else 0.0

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def can_ever_fit(self, num_tokens: int) -> bool:
        """Could a request holding `num_tokens` KV tokens fit in an otherwise empty GPU?"""
        return self.blocks_for(num_tokens) <= self.num_gpu_blocks - self.watermark_blocks

    # --- prefix cache ---------------------------------------------------------------------------
    def _update_hashes(self, req: "Request", num_tokens: int) -> None:
        """Extend `req.block_hashes` to cover every full block within the first `num_tokens` tokens."""
        bs = self.block_size
        hashes = req.block_hashes
        n_full = num_tokens // bs
        start = len(hashes)
        if start >= n_full:
            return
        ids = req.token_ids(start * bs, n_full * bs)
        if ids is None:  # count-only: content of its own, one chain per request (see the class docstring)
            parent = hashes[-1] if hashes else hash(("count-only", next(_COUNT_ONLY_ROOTS)))
            for i in range(start, n_full):
                parent = hash((parent, i))
                hashes.append(parent)
            return
        parent = hashes[-1] if hashes else NONE_HASH
        for i in range(n_full - start):
            parent = hash((parent, tuple(ids[i * bs:(i + 1) * bs])))
            hashes.append(parent)

    def get_computed_blocks(self, req: "Request") -> tuple[list[int], int]:
        """The longest cached prefix of `req` as (block ids, number of hit tokens).

        Only for a request with nothing computed; never covers the last known token. A count-only
        request can only hit blocks it offered itself, so one that never hashed any has no lookup.
        """
        if not self.enable_prefix_caching or (req.prompt_token_ids is None and not req.block_hashes):
            return [], 0
        max_hit_blocks = (req.num_tokens - 1) // self.block_size
        self._update_hashes(req, max_hit_blocks * self.block_size)
        blocks = []
        cached = self.cached
        for h in req.block_hashes[:max_hit_blocks]:
            b = cached.get(h)
            if b is None:
                break
            blocks.append(b)
        return blocks, len(blocks) * self.block_size

    def record_prefix_lookup(self, num_queried_tokens: int, num_hit_tokens: int) -> None:
        """Count one admission's lookup (queried = the request's known tokens)."""
        self.num_prefix_queried_tokens += num_queried_tokens
        self.num_prefix_hit_tokens += num_hit_tokens

    def _cache_full_blocks(self, req: "Request", num_tokens: int) -> None:
        """Offer the full blocks within the first `num_tokens` tokens of `req` to the prefix cache."""
        table = req.block_table
        n_full = min(num_tokens // self.block_size, len(table))
        k = req.num_registered_blocks
        if k >= n_full:
            return
        self._update_hashes(req, n_full * self.block_size)
        hashes, block_hash, cached = req.block_hashes, self.block_hash, self.cached
        for i in range(k, n_full):
            b = table[i]
            h = hashes[i]
            if block_hash[b] is None and h not in cached:
                block_hash[b] = h
                cached[h] = b
        req.num_registered_blocks = n_full

    def _registered_ahead(self, req: "Request") -> range:
        """Indices in `req`'s table of the blocks it offered to the prefix cache ahead of computing them
        (its last allocation registers the full blocks of the chunk it was scheduled for)."""
        return range(req.num_computed_tokens // self.block_size, min(req.num_registered_blocks, len(req.block_table)))

    def _uncache_uncomputed(self, req: "Request") -> None:
        """Withdraw from the prefix cache the blocks `req` registered ahead of computing them, unless
        another request holds them too. Called as `req` lets go of its blocks: one preempted in the step
        that allocated them never writes their KV, so a later hit would read blocks that hold nothing."""
        table, rc, block_hash, cached = req.block_table, self.ref_counts, self.block_hash, self.cached
        for i in self._registered_ahead(req):
            b = table[i]
            h = block_hash[b]
            if rc[b] == 1 and h is not None and h == req.block_hashes[i]:
                if cached.get(h) == b:
                    del cached[h]
                block_hash[b] = None

    def lends_uncomputed(self, req: "Request") -> bool:
        """Does another request hold a block that `req` registered but has not computed yet (a prefix
        hit on a chunk scheduled in this step)? Preempting `req` now would leave that request reading
        KV nobody writes."""
        table, rc = req.block_table, self.ref_counts
        return any(rc[table[i]] > 1 for i in self._registered_ahead(req))

    # --- allocation -------------------------------------------------------------------------------
    def _pop_free(self) -> int:
        """Take the LRU head, evicting its cached content if any."""
        b = self.free_queue.pop() if self._lifo else self.free_queue.popitem()[0]
        h = self.block_hash[b]
        if h is not None:
            if self.cached.get(h) == b:
                del self.cached[h]
            self.block_hash[b] = None
        self.ref_counts[b] = 1
        return b

    def num_blocks_to_allocate(self, req: "Request", num_new_tokens: int, computed_blocks: list[int] = ()) -> int:
        """Blocks the free queue must give up: new blocks plus evictable (ref 0) prefix-hit blocks."""
        total = req.num_computed_tokens + len(computed_blocks) * self.block_size + num_new_tokens
        n = self.blocks_for(total) - len(req.block_table) - len(computed_blocks)
        if computed_blocks:
            rc = self.ref_counts
            n += sum(1 for b in computed_blocks if rc[b] == 0)
        return max(n, 0)

    def can_allocate(self, req: "Request", num_new_tokens: int, computed_blocks: list[int] = (),
                     use_watermark: bool = False, reserved_blocks: int = 0) -> bool:
        reserve = (self.watermark_blocks if use_watermark else 0) + reserved_blocks
        return self.num_blocks_to_allocate(req, num_new_tokens, computed_blocks) <= len(self.free_queue) - reserve

    def allocate_slots(self, req: "Request", num_new_tokens: int, computed_blocks: list[int] = (),
                       use_watermark: bool = False, delay_cache: bool = False,
                       num_lookahead_tokens: int = 0, reserved_blocks: int = 0) -> bool:
        """Grow `req`'s block table to hold its computed tokens, `computed_blocks` (prefix hits, only for
        a request with an empty table) and `num_new_tokens` more. False (and no change) if short of blocks.
        `delay_cache`: do not offer the new full blocks to the prefix cache yet (their KV is still being
        loaded from the CPU tier; `cache_loaded_blocks` offers them once it has landed).
        `num_lookahead_tokens`: slots past the new tokens too (a proposer's drafts' KV, vLLM's lookahead).
        `reserved_blocks`: free blocks promised to other requests, not to be taken (vLLM's argument of
        that name: what the prompts in flight still need, kept from a native CPU-tier load).
        """
        table = req.block_table
        bs = self.block_size
        total = req.num_computed_tokens + len(computed_blocks) * bs + num_new_tokens
        needed = -(-(total + num_lookahead_tokens) // bs) - len(table) - len(computed_blocks)
        if needed > 0 or computed_blocks:
            if computed_blocks:
                if not self.can_allocate(req, num_new_tokens + num_lookahead_tokens, computed_blocks,
                                         use_watermark, reserved_blocks):
                    return False
                if table:
                    raise ValueError(f"request {req.req_id}: prefix hits need an empty block table")
                rc, fq = self.ref_counts, self.free_queue
                for b in computed_blocks:
                    if rc[b] == 0:
                        del fq[b]
                    rc[b] += 1
                table.extend(computed_blocks)
                req.num_registered_blocks = len(computed_blocks)
            elif needed > len(self.free_queue) - (self.watermark_blocks if use_watermark else 0) - reserved_blocks:
                return False  # can_allocate without prefix hits, inlined (hot path)
            if needed > 0 and self._lifo:  # no prefix cache, so no block holds a hash: one slice
                fq, rc = self.free_queue, self.ref_counts
                blocks = fq[-needed:]
                del fq[-needed:]
                blocks.reverse()
                for b in blocks:
                    rc[b] = 1
                table.extend(blocks)
            elif needed > 0:
                # _pop_free inlined: a prefill chunk takes tens of blocks at once
                pop, block_hash, cached, rc = self.free_queue.popitem, self.block_hash, self.cached, self.ref_counts
                append = table.append
                for _ in range(needed):
                    b = pop()[0]
                    h = block_hash[b]
                    if h is not None:
                        if cached.get(h) == b:
                            del cached[h]
                        block_hash[b] = None
                    rc[b] = 1
                    append(b)
            self.holders[req.req_id] = req
        if self.enable_prefix_caching and req.prompt_token_ids is not None and not delay_cache:
            # known tokens only: slots for unverified draft tokens (speculative decoding) hold no content yet
            self._cache_full_blocks(req, total if total <= req.num_tokens else req.num_tokens)
        return True

    def cache_loaded_blocks(self, req: "Request") -> None:
        """Offer `req`'s computed full blocks to the prefix cache (after a delayed-cache allocation)."""
        if self.enable_prefix_caching:
            self._cache_full_blocks(req, req.num_computed_tokens)

    def allocate(self, req: "Request", num_new_tokens: int, computed_blocks: list[int] = ()) -> None:
        """`allocate_slots` that must succeed (raises RuntimeError otherwise)."""
        if not self.allocate_slots(req, num_new_tokens, computed_blocks):
            raise RuntimeError(f"request {req.req_id}: not enough free KV blocks for {num_new_tokens} tokens")

    def append_slots(self, req: "Request", num_new_tokens: int = 1) -> bool:
        """Room for a running request's next `num_new_tokens` tokens (no watermark)."""
        return self.allocate_slots(req, num_new_tokens)

    def append_slot(self, req: "Request") -> bool:
        return self.allocate_slots(req, 1)

    def append_blocks(self, requests: "list[Request]") -> None:
        """One more GPU block at the end of each of `requests`' tables, in the order given (a request
        may come several times): the LRU head each time, its cached content evicted.

        For running requests growing past block boundaries several steps ahead, the blocks counted
        by the caller (a multi-step executor; the simulator's decode replay, `sim.decode_replay`,
        hands them out in the order step-by-step `allocate_slots` calls would). Registers nothing in
        the prefix cache. Raises RuntimeError, changing nothing, if fewer blocks are free.
        """
        if len(requests) > len(self.free_queue):
            raise RuntimeError(f"append_blocks: {len(requests)} blocks asked for, {len(self.free_queue)} free")
        holders = self.holders
        if self._lifo:  # no prefix cache: no block holds a hash
            pop, rc = self.free_queue.pop, self.ref_counts
            for req in requests:
                b = pop()
                rc[b] = 1
                req.block_table.append(b)
                holders[req.req_id] = req
            return
        pop = self._pop_free
        for req in requests:
            req.block_table.append(pop())
            holders[req.req_id] = req

    def free(self, req: "Request", finished: bool = False) -> None:
        """Release `req`'s GPU blocks (in reverse order) and its CPU blocks, if any. `finished`: `req`
        has ended (a count-only one's blocks are then never looked up again: `_release_own`)."""
        table = req.block_table
        if table and self.enable_prefix_caching and req.prompt_token_ids is None:  # count-only
            if not finished or req.block_hashes:  # it may come back for them, or left copies cached
                self._cache_full_blocks(req, min(req.num_computed_tokens, req.num_tokens))
            elif self.cached:
                self._release_own(req)
        if table:
            rc, fq = self.ref_counts, self.free_queue
            if not self.cached:
                # no block holds a hash, so none is shared (sharing comes from prefix hits, whose
                # hashes stay cached while held): every block goes to the head, ref count 1 -> 0
                for b in table:
                    rc[b] = 0
                if self._lifo:
                    fq.extend(reversed(table))  # the last one, table[0], at the head
                else:
                    fq.update(dict.fromkeys(reversed(table)))
            else:
                self._uncache_uncomputed(req)
                to_tail = fq.move_to_end
                for b in reversed(table):
                    rc[b] -= 1
                    if rc[b] == 0:  # to the tail, hashed or not (vLLM's append_n)
                        fq[b] = None
                        to_tail(b, False)
            table.clear()
        req.num_registered_blocks = 0
        self.holders.pop(req.req_id, None)
        if req.cpu_block_table:
            self.free_cpu.extend(reversed(req.cpu_block_table))
            req.cpu_block_table = []
            self.cpu_holders.pop(req.req_id, None)

    def _release_own(self, req: "Request") -> None:
        """Free the blocks of a finished count-only request that never hashed one: to the tail in
        reverse order (its first block last to be evicted), where any freed block goes, without
        hashing blocks nobody can look up. Only while some block is cached: with none, the order of
        the free blocks among themselves decides no eviction (a block cached later goes behind them
        all), so `free` puts them all at the head."""
        table, rc, fq = req.block_table, self.ref_counts, self.free_queue
        to_tail = fq.move_to_end
        for b in reversed(table):
            rc[b] = 0  # its own: no other request can hit a count-only request's blocks
            fq[b] = None
            to_tail(b, False)
        table.clear()

    # --- swap -------------------------------------------------------------------------------------
    def can_swap_out(self, req: "Request") -> bool:
        return self.blocks_for(req.num_computed_tokens) <= len(self.free_cpu)

    def swap_out(self, req: "Request") -> list[tuple[int, int]]:
        """Move the blocks holding `req`'s computed tokens to CPU; returns (gpu, cpu) copy pairs."""
        keep = self.blocks_for(req.num_computed_tokens)
        if keep > len(self.free_cpu):
            raise RuntimeError(f"request {req.req_id}: {keep} CPU blocks needed, {len(self.free_cpu)} free")
        table = req.block_table
        pairs = [(table[i], self.free_cpu.pop()) for i in range(keep)]
        self.free(req)  # GPU blocks (and any unused tail) go back; cached hashes stay findable
        req.cpu_block_table = [c for _, c in pairs]
        if pairs:
            self.cpu_holders[req.req_id] = req
        return pairs

    def can_swap_in(self, req: "Request", num_new_tokens: int = 0, use_watermark: bool = True) -> bool:
        reserve = self.watermark_blocks if use_watermark else 0
        needed = self.blocks_for(req.num_computed_tokens + num_new_tokens)
        return needed <= len(self.free_queue) - reserve

    def swap_in(self, req: "Request") -> list[tuple[int, int]]:
        """Bring `req`'s CPU blocks back to fresh GPU blocks; returns (cpu, gpu) copy pairs."""
        cpu = req.cpu_block_table
        if len(cpu) > len(self.free_queue):
            raise RuntimeError(f"request {req.req_id}: {len(cpu)} GPU blocks needed, {len(self.free_queue)} free")
        pairs = []
        table = req.block_table
        for c in cpu:
            g = self._pop_free()
            table.append(g)
            pairs.append((c, g))
        self.free_cpu.extend(reversed(cpu))
        req.cpu_block_table = []
        self.cpu_holders.pop(req.req_id, None)
        if table:
            self.holders[req.req_id] = req
        if self.enable_prefix_caching:  # a count-only request too: its old copies may still be cached
            self._cache_full_blocks(req, req.num_computed_tokens)
        return pairs

    # --- the CPU offload tier ----------------------------------------------------------------------
    def offload_lookup(self, req: "Request", num_gpu_hit_blocks: int, now: float) -> int:
        """Blocks of `req`'s prefix, after its `num_gpu_hit_blocks` GPU hits, that the CPU tier can load
        (never the block of the last known token, as for GPU hits)."""
        if self.offload is None or (req.prompt_token_ids is None and not req.block_hashes):
            return 0  # a count-only request only finds what it stored itself
        max_hit_blocks = (req.num_tokens - 1) // self.block_size
        if max_hit_blocks > num_gpu_hit_blocks:
            self._update_hashes(req, max_hit_blocks * self.block_size)
        hashes = req.block_hashes[:max_hit_blocks]
        self.offload.touch(hashes)  # vLLM's connector touches the prompt's blocks at every lookup
        if max_hit_blocks <= num_gpu_hit_blocks:
            return 0
        return self.offload.lookup(hashes, num_gpu_hit_blocks, now)

    def offload_load(self, req: "Request", first_block: int, num_blocks: int, now: float
                     ) -> tuple[list[tuple[int, int]], list[int], float]:
        """Start loading blocks [first_block, first_block + num_blocks) of `req` (its GPU blocks already
        allocated) from the CPU tier: (cpu, gpu) copy pairs, their hashes, and when the load lands."""
        hashes = req.block_hashes[first_block:first_block + num_blocks]
        cpu_blocks, ready_at = self.offload.start_load(hashes, now)
        gpu_blocks = req.block_table[first_block:first_block + num_blocks]
        return list(zip(cpu_blocks, gpu_blocks)), hashes, ready_at

    def offload_stores(self, req: "Request", prompt_only: bool = False) -> tuple[list[tuple[int, int]], list[int]]:
        """Offer `req`'s full blocks computed by now (known tokens only, never unverified drafts) that
        it has not offered yet to the CPU tier: (gpu, cpu) copy pairs of the ones to copy and their
        hashes. `prompt_only`: stop at the prompt (LMCache saves no decode KV); the tier's backend
        also rounds down to whole chunks."""
        tier = self.offload
        if tier is None:
            return [], []
        tokens = min(req.num_computed_tokens, req.num_tokens)
        if prompt_only:
            tokens = min(tokens, req.num_prompt_tokens)
        n_full = min(tokens // self.block_size, len(req.block_table))
        n_full -= n_full % tier.chunk_blocks
        start = req.num_offloaded_blocks
        if n_full <= start:
            return [], []
        self._update_hashes(req, n_full * self.block_size)
        hashes = req.block_hashes[:n_full]
        picked = tier.start_store(hashes, start)
        if picked is None:  # native: no room for all of them now; offered again after the next step
            return [], []
        req.num_offloaded_blocks = n_full
        table = req.block_table
        return [(table[start + i], cpu) for i, cpu in picked], [hashes[start + i] for i, _ in picked]

    # --- checks -----------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (tests call this after every step)."""
        n = self.num_pool_blocks
        counts = [0] * n
        for rid, req in self.holders.items():
            assert req.req_id == rid and req.block_table, f"holder {rid} has no blocks"
            assert not req.is_finished, f"finished request {rid} still holds blocks"
            assert len(req.block_table) * self.block_size >= req.num_computed_tokens, f"{rid}: table too short"
            assert len(set(req.block_table)) == len(req.block_table), f"{rid}: duplicate block in table"
            for b in req.block_table:
                counts[b] += 1
        assert counts == self.ref_counts, "ref counts differ from the block tables"
        free = [b for b in range(n - self.num_gpu_blocks, n) if counts[b] == 0]  # the null block is never free
        assert len(self.free_queue) == len(free) and set(self.free_queue) == set(free), "free queue != unreferenced"
        for h, b in self.cached.items():
            assert self.block_hash[b] == h, f"cache entry {h} -> {b} but block hash is {self.block_hash[b]}"
        assert sum(h is not None for h in self.block_hash) == len(self.cached), "hashed blocks != cache entries"
        assert len(self.free_cpu) == len(set(self.free_cpu)), "duplicate free CPU block"
        held_cpu = [c for r in self.cpu_holders.values() for c in r.cpu_block_table]
        assert len(held_cpu) == len(set(held_cpu)), "a CPU block is held twice"
        assert not set(held_cpu) & set(self.free_cpu), "a held CPU block is also free"
        assert len(held_cpu) + len(self.free_cpu) == self.num_cpu_blocks, "CPU blocks lost"
        if self.offload is not None:
            self.offload.check_invariants()

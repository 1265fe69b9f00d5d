"""`OffloadTier`: the CPU tier of the paged KV cache (vLLM's KV offloading), found by prefix hash.

A second, larger prefix cache in host memory. Full KV blocks are copied to it as the steps that fill
them end (write-through, as vLLM v1's OffloadingConnector does: every full block is offered once, so
the blocks of finished or evicted prefixes are already there when the GPU's prefix cache lets them
go). When a request arrives, the blocks of its prefix past the GPU prefix-cache hit are looked up
here by the same chained hash; the consecutive run that is present is loaded back into fresh GPU
blocks instead of being recomputed. Eviction is LRU over the blocks no transfer is using (native:
nor a live request's stores: vLLM completes them, making them findable and evictable, only once their
request has finished or been preempted, and stores a step's new blocks of a request all or none), in the
backend's recency order: vLLM's native manager touches a request's blocks last-to-first at every
lookup and store, so a prefix loses its tail first; LMCache touches chunks in token order on use.

Transfers go over the host link, one queue per direction (PCIe is full duplex), each block taking
`s_per_block` seconds (its bytes / the link's bandwidth); how they overlap the forward passes is the
backend's (`kv_offloading_backend`: `native` asynchronous, `lmcache` synchronous; see `OffloadTier`).
Sizes: `num_blocks` CPU blocks of the replica (vLLM's `kv_offloading_size` GiB is summed over the TP
ranks; each rank keeps its shard of every block). Times are the caller's clock (simulated or wall);
the engine passes `s_per_block = 0` and measures its real copies instead.
"""
from __future__ import annotations

from collections import OrderedDict

from policies.config import OFFLOAD_BACKENDS as BACKENDS
from policies.config import ConfigError, check_choice, check_int, check_number

LMCACHE_CHUNK_TOKENS = 256  # LMCache's default chunk_size


class OffloadTier:
    """Host KV blocks keyed by prefix hash (LRU), with the host link's two transfer queues.

    Every method takes the block hashes of one request in token order. Entries being stored or
    loaded are pinned (never evicted) until `finish_store` / `finish_load`. Counters: blocks stored,
    loaded and evicted, for the run's records. The backends:

    - `native` (vLLM's OffloadingConnector): asynchronous. Stores run beside the next steps; a stored
      block is held by its request (`hold`) and can be found once its copy has landed and the request
      has ended or been preempted (`release`). A request whose prefix hits here holds its GPU blocks
      and waits (vLLM's WAITING_FOR_REMOTE_KVS) until its load has landed, while the other requests
      keep running; then it is scheduled like any waiting request, its loaded tokens already computed.
    - `lmcache` (LMCacheConnectorV1): synchronous, in units of 256-token chunks. A hit is loaded in the
      step that schedules the request, before its forward pass, and a step's stores (prompt chunks
      only: LMCache does not save decode KV by default) are copied before it ends: both add their copy
      time to the step (`step_seconds`).
    """

    def __init__(self, num_blocks: int, block_size: int, backend: str = "native", s_per_block: float = 0.0,
                 block_bytes: int = 0) -> None:
        check_int("cache.offload_size_gb", num_blocks, 1)
        check_choice("cache.offload_backend", backend, BACKENDS)
        check_number("cache.offload_bandwidth_gbps", s_per_block, 0.0)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.backend = backend
        self.s_per_block = s_per_block
        self.block_bytes = block_bytes  # bytes of one block over the replica's GPUs (records only)
        self.synchronous = backend == "lmcache"
        self.chunk_blocks = max(1, LMCACHE_CHUNK_TOKENS // block_size) if self.synchronous else 1
        self.entries: OrderedDict[int, int] = OrderedDict()  # hash -> CPU block, least recently used first
        self.ready_at: dict[int, float] = {}  # hash -> when its stored copy has landed (inf while pending)
        self.pins: dict[int, int] = {}  # hash -> transfers using it
        self.owned: set = set()  # native: hashes a live request's stores hold (not findable, not evictable)
        self.free_blocks = list(range(num_blocks - 1, -1, -1))  # a stack; pops block 0 first
        self.store_free_at = 0.0  # device -> host queue busy until
        self.load_free_at = 0.0  # host -> device queue busy until
        self.num_stored_blocks = 0
        self.num_loaded_blocks = 0
        self.num_evicted_blocks = 0

    @property
    def num_used_blocks(self) -> int:
        return len(self.entries)

    # --- lookups and loads ----------------------------------------------------------------------
    def touch(self, hashes) -> None:
        """Native: mark the entries of one request's `hashes` (token order) recently used, the first
        most recently, as vLLM's LRU `touch` does (it walks them reversed): under pressure a prefix is
        evicted from its tail, and what is left of it is still a loadable run from its first block.
        LMCache touches only the chunks it reads or writes (`start_load`, `start_store`)."""
        if self.synchronous:
            return
        entries = self.entries
        for h in reversed(hashes):
            if h in entries:
                entries.move_to_end(h)

    def lookup(self, hashes, num_gpu_hit_blocks: int, now: float) -> int:
        """How many blocks of `hashes` after the first `num_gpu_hit_blocks` (the GPU's hit) can be
        loaded: the consecutive run present and landed by `now` (lmcache: ending on a chunk)."""
        entries, ready_at = self.entries, self.ready_at
        n = 0
        owned = self.owned
        for h in hashes[num_gpu_hit_blocks:]:
            if h not in entries or ready_at[h] > now or h in owned:
                break
            n += 1
        if self.chunk_blocks > 1:  # whole chunks only, counted from the first token
            n = max(0, (num_gpu_hit_blocks + n) // self.chunk_blocks * self.chunk_blocks - num_gpu_hit_blocks)
        return n

    def is_busy(self, hashes) -> bool:
        """True when a transfer in flight uses one of `hashes` (vLLM defers a request whose hit blocks
        another request is still loading, rather than load them twice)."""
        pins = self.pins
        return any(h in pins for h in hashes)

    def start_load(self, hashes, now: float) -> tuple[list[int], float]:
        """Pin the entries of `hashes` (all present; lmcache: touch them, native: the lookup did);
        returns their CPU blocks and when the load has landed (native: queued behind earlier loads;
        lmcache: `now`, its time is the step's)."""
        blocks = []
        for h in hashes:
            if self.synchronous:
                self.entries.move_to_end(h)
            self.pins[h] = self.pins.get(h, 0) + 1
            blocks.append(self.entries[h])
        self.num_loaded_blocks += len(blocks)
        if self.synchronous or not blocks:
            return blocks, now
        done = max(now, self.load_free_at) + len(blocks) * self.s_per_block
        self.load_free_at = done
        return blocks, done

    def finish_load(self, hashes) -> None:
        """The load of `hashes` has landed (or was abandoned): unpin them."""
        self._unpin(hashes)

    # --- stores ---------------------------------------------------------------------------------
    def start_store(self, hashes, first: int = 0) -> list[tuple[int, int]] | None:
        """Reserve CPU blocks for the blocks of `hashes[first:]` (one request's new full blocks; the
        ones before are its blocks offered earlier) not stored yet, evicting LRU entries no transfer
        pins; returns (index in `hashes[first:]`, CPU block) for each block to copy. lmcache stops when
        the tier is full of pinned entries; native reserves all or none (None: none, offer them again
        later), never evicting one of `hashes[first:]`, as vLLM's `prepare_store`. Present ones are only
        touched (native: all of `hashes`, once something was reserved, as vLLM's connector does)."""
        out = []
        entries, pins = self.entries, self.pins
        new = hashes[first:]
        protected = ()
        if not self.synchronous:
            protected = set(new)
            need = sum(h not in entries for h in new) - len(self.free_blocks)
            if need > 0 and not self._has_evictable(need, protected):
                return None
        for i, h in enumerate(new):
            if h in entries:
                if self.synchronous:
                    entries.move_to_end(h)
                continue
            if not self.free_blocks and not self._evict_one(protected):
                break
            b = self.free_blocks.pop()
            entries[h] = b
            self.ready_at[h] = float("inf")
            pins[h] = pins.get(h, 0) + 1
            out.append((i, b))
        self.num_stored_blocks += len(out)
        if out:
            self.touch(hashes)
        return out

    def finish_store(self, hashes, now: float) -> float:
        """The step that filled the blocks of `hashes` (started by `start_store`) ended at `now`: their
        copies are queued (native) or done (lmcache) and they can be found from the returned time."""
        if not hashes:
            return now
        done = now
        if not self.synchronous:
            done = max(now, self.store_free_at) + len(hashes) * self.s_per_block
            self.store_free_at = done
        for h in hashes:
            if h in self.ready_at:
                self.ready_at[h] = done
        self._unpin(hashes)
        return done

    def hold(self, hashes) -> None:
        """Native: the stores of `hashes` belong to a live request: not findable nor evictable until
        `release` (vLLM's blocks stay un-ready until the connector completes the request's stores)."""
        entries = self.entries
        self.owned.update(h for h in hashes if h in entries)

    def release(self, hashes, now: float) -> None:
        """Native: the request holding `hashes` ended or was preempted at `now`: they can be found (all
        at once, when the last of their landed copies is in, as vLLM reports a request's stores done)
        and evicted. One still being copied becomes findable when its copy lands (`finish_store`)."""
        owned, ready_at = self.owned, self.ready_at
        held = [h for h in hashes if h in owned]
        if not held:
            return
        landed = [ready_at[h] for h in held if ready_at[h] != float("inf")]
        at = max([now, *landed])
        for h in held:
            owned.discard(h)
            if ready_at[h] != float("inf"):
                ready_at[h] = at

    # --- seconds and checks -----------------------------------------------------------------------
    def step_seconds(self, num_loaded: int, num_stored: int) -> float:
        """Copy time a step carrying these transfers spends on them (lmcache: all of it; native: none,
        its copies run beside the steps)."""
        if not self.synchronous:
            return 0.0
        return (num_loaded + num_stored) * self.s_per_block

    def _unpin(self, hashes) -> None:
        pins = self.pins
        for h in hashes:
            n = pins.get(h, 0)
            if n <= 1:
                pins.pop(h, None)
            else:
                pins[h] = n - 1

    def _has_evictable(self, n: int, protected) -> bool:
        """True when `n` entries could be evicted (unpinned, not held, not in `protected`)."""
        pins, owned = self.pins, self.owned
        if len(self.entries) - len(owned) < n:  # held entries are a subset: too few, without a scan
            return False
        for h in self.entries:
            if h not in pins and h not in owned and h not in protected:
                n -= 1
                if n <= 0:
                    return True
        return False

    def _evict_one(self, protected=()) -> bool:
        """Drop the least recently used entry no transfer pins, no live request holds and not in
        `protected`; False when there is none."""
        pins, owned = self.pins, self.owned
        for h in self.entries:
            if h not in pins and h not in owned and h not in protected:
                b = self.entries.pop(h)
                del self.ready_at[h]
                self.free_blocks.append(b)
                self.num_evicted_blocks += 1
                return True
        return False

    def check_invariants(self) -> None:
        """Raise AssertionError if the tier's bookkeeping is inconsistent (tests)."""
        used = list(self.entries.values())
        assert len(used) == len(set(used)), "a CPU block holds two hashes"
        assert not set(used) & set(self.free_blocks), "a used CPU block is also free"
        assert len(used) + len(self.free_blocks) == self.num_blocks, "CPU offload blocks lost"
        assert set(self.ready_at) == set(self.entries), "ready times differ from the entries"
        assert set(self.pins) <= set(self.entries), "a pin on an evicted entry"
        assert self.owned <= set(self.entries), "a held store was evicted"


def offload_blocks(size_gib: float, block_bytes_per_replica: int) -> int:
    """CPU blocks in `size_gib` GiB (vLLM's kv_offloading_size, summed over the TP ranks)."""
    if size_gib <= 0:
        return 0
    if block_bytes_per_replica <= 0:
        raise ConfigError("cache.offload_size_gb: the KV block size in bytes is unknown")
    return int(size_gib * 2**30 // block_bytes_per_replica)

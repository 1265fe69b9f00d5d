"""`OffloadTransfers`: the scheduler's bookkeeping of the KV offload tier's copies between steps.

The tier (`policies.kv_offload.OffloadTier`) holds the blocks and times the link; what the scheduler
must remember across `schedule()` and `update()` lives here: the copies the plan being built
carries, the requests a native load holds back, and, per step, the copies to settle once that step
has ended. Kept apart from `policies.scheduler` because only a cache with a CPU tier uses it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policies.batch_plan import BatchPlan
    from policies.block_manager import BlockManager
    from policies.request import Request


class OffloadTransfers:
    """Loads and stores in flight, from admission to the end of the step that carries them.

    - `loading`: requests whose prefix is being loaded by the native backend, req_id ->
      [request, block hashes, when the load lands, step id of the plan that carries it (None until
      a plan does)]; they count as waiting, as vLLM counts its WAITING_FOR_REMOTE_KVS requests.
    - the loads admitted by the `schedule()` call in progress (block pairs for its plan; the hashes
      of synchronous lmcache loads, finished with their step);
    - per step id, the (store hashes, synchronous load hashes) that `settle` finishes after it;
    - native: per live request, the hashes its stores hold in the tier until it ends or is preempted
      (`release_stores`), when vLLM's connector completes them.
    """

    def __init__(self, block_manager: "BlockManager") -> None:
        self.block_manager = block_manager  # its `offload` tier, its blocks
        self.loading: dict = {}
        self._loads: list[tuple[int, int]] = []
        self._sync_loads: list = []
        self._by_step: dict = {}
        self._held: dict = {}  # native: req_id -> hashes its stores hold

    @property
    def has_unsettled(self) -> bool:
        """True while some executed step's copies still wait for `settle`."""
        return bool(self._by_step)

    def start_load(self, req: "Request", first_block: int, num_tokens: int, now: float) -> None:
        """Load `num_tokens` tokens of `req` (blocks from `first_block`) from the CPU tier: the copies go
        into the plan being built; a native load holds the request in `loading` until it lands."""
        bm = self.block_manager
        pairs, hashes, ready_at = bm.offload_load(req, first_block, num_tokens // bm.block_size, now)
        self._loads.extend(pairs)
        if bm.offload.synchronous:
            self._sync_loads.append(hashes)
        else:
            self.loading[req.req_id] = [req, hashes, ready_at, None]

    def land(self, now: float) -> list["Request"]:
        """The requests whose native load has landed by `now` (its plan executed, its time come), their
        loaded blocks now in the GPU prefix cache, in the order to put them back at the head of the
        waiting queue one by one (so that they end up there in arrival order)."""
        landed = [e for e in self.loading.values() if e[3] is not None and e[2] <= now]
        if not landed:
            return []
        landed.sort(key=lambda e: (e[0].arrival_time, e[3]))
        bm, back = self.block_manager, []
        for req, hashes, _, _ in reversed(landed):
            del self.loading[req.req_id]
            bm.offload.finish_load(hashes)
            bm.cache_loaded_blocks(req)
            back.append(req)
        return back

    def next_wakeup(self) -> float | None:
        """When the earliest native load in flight lands (None when none is)."""
        times = [e[2] for e in self.loading.values() if e[3] is not None]
        return min(times) if times else None

    def release(self, req_id) -> bool:
        """Forget a request that ends while held for its load (its tier entries released); False when
        `req_id` is not held here."""
        entry = self.loading.pop(req_id, None)
        if entry is None:
            return False
        self.block_manager.offload.finish_load(entry[1])
        return True

    def release_stores(self, req: "Request", now: float) -> None:
        """`req` ended or was preempted at `now`: the blocks its native stores hold can be found (once
        copied) and evicted."""
        hashes = self._held.pop(req.req_id, None)
        if hashes:
            self.block_manager.offload.release(hashes, now)

    def attach(self, plan: "BatchPlan") -> "BatchPlan":
        """`plan` with this step's copies: the loads admitted into it, and the stores of the full blocks
        its sequences fill (lmcache: prompt chunks only)."""
        bm = self.block_manager
        loads, self._loads = self._loads, []
        sync_loads, self._sync_loads = self._sync_loads, []
        stores, store_hashes = [], []
        tier = bm.offload
        prompt_only = tier.synchronous
        for seq in plan.seqs:
            if seq.is_padding:
                continue
            pairs, hashes = bm.offload_stores(seq.request, prompt_only)
            if pairs:
                stores.extend(pairs)
                store_hashes.extend(hashes)
                if not prompt_only:
                    tier.hold(hashes)
                    self._held.setdefault(seq.request.req_id, []).extend(hashes)
        if not loads and not stores:
            return plan
        if store_hashes or sync_loads:
            self._by_step[plan.step_id] = (store_hashes, sync_loads)
        for entry in self.loading.values():
            if entry[3] is None:
                entry[3] = plan.step_id
        return replace(plan, offload_load_blocks=tuple(loads), offload_store_blocks=tuple(stores))

    def settle(self, plan: "BatchPlan", now: float) -> None:
        """After the step of `plan` (ended at `now`): its stores are queued and findable once copied, its
        synchronous loads done."""
        done = self._by_step.pop(plan.step_id, None)
        if done is None:
            return
        store_hashes, sync_loads = done
        tier = self.block_manager.offload
        tier.finish_store(store_hashes, now)
        for hashes in sync_loads:
            tier.finish_load(hashes)

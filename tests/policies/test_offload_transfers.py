"""The scheduler's bookkeeping of offload copies (`OffloadTransfers`), against a stand-in tier: which
held requests land and in what order they go back, what a plan carries, what a step settles."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from policies.offload_transfers import OffloadTransfers


class FakeTier:
    """Records what the transfers finish; loads take 1 s a block."""

    def __init__(self, synchronous: bool = False) -> None:
        self.synchronous = synchronous
        self.loads_done: list = []
        self.stores_done: list = []

    def finish_load(self, hashes) -> None:
        self.loads_done.append(list(hashes))

    def finish_store(self, hashes, now: float) -> None:
        self.stores_done.append((list(hashes), now))


class FakeBlocks:
    """The block manager's offload calls: block i of a request has hash (req_id, i)."""

    block_size = 4

    def __init__(self, synchronous: bool = False) -> None:
        self.offload = FakeTier(synchronous)
        self.cached: list = []

    def offload_load(self, req, first_block: int, num_blocks: int, now: float):
        hashes = [(req.req_id, first_block + i) for i in range(num_blocks)]
        return [(i, first_block + i) for i in range(num_blocks)], hashes, now + num_blocks

    def offload_stores(self, req, prompt_only: bool):
        return [(0, 0)], [(req.req_id, "store")]

    def cache_loaded_blocks(self, req) -> None:
        self.cached.append(req.req_id)


@dataclass(frozen=True)
class Plan:
    step_id: int
    seqs: tuple = ()
    offload_load_blocks: tuple = ()
    offload_store_blocks: tuple = field(default=())


def make_transfers(synchronous: bool = False) -> tuple[FakeBlocks, OffloadTransfers]:
    bm = FakeBlocks(synchronous)
    return bm, OffloadTransfers(bm)


def make_request(req_id, arrival: float):
    return SimpleNamespace(req_id=req_id, arrival_time=arrival)


def seq(req):
    return SimpleNamespace(request=req, is_padding=False)


def test_held_requests_land_once_a_plan_carried_their_load_and_its_time_came():
    bm, t = make_transfers()
    late, early, unplanned = make_request("late", 2.0), make_request("early", 1.0), make_request("x", 0.0)
    t.start_load(late, 0, 8, now=10.0)  # 2 blocks: lands at 12
    t.start_load(early, 0, 4, now=10.0)  # 1 block: lands at 11
    plan = t.attach(Plan(step_id=7))
    assert len(plan.offload_load_blocks) == 3
    t.start_load(unplanned, 0, 4, now=10.0)  # no plan carries it yet: never lands
    assert t.next_wakeup() == 11.0
    assert t.land(11.5) == [early] and set(t.loading) == {"late", "x"}
    assert t.land(20.0) == [late] and t.land(20.0) == []
    assert bm.cached == ["early", "late"]  # each landed load's blocks cached, its tier entries freed
    assert [h[0][0] for h in bm.offload.loads_done] == ["early", "late"]


def test_two_loads_landing_together_go_back_in_arrival_order():
    bm, t = make_transfers()
    second, first = make_request("second", 5.0), make_request("first", 1.0)
    t.start_load(second, 0, 4, now=0.0)
    t.start_load(first, 0, 4, now=0.0)
    t.attach(Plan(step_id=1))
    queue = []
    for req in t.land(1.0):
        queue.insert(0, req)
    assert [r.req_id for r in queue] == ["first", "second"] and not t.loading


def test_release_forgets_a_held_request_and_frees_its_tier_entries():
    bm, t = make_transfers()
    req = make_request("r", 0.0)
    assert not t.release("r")
    t.start_load(req, 2, 8, now=0.0)
    assert t.release("r") and not t.loading
    assert bm.offload.loads_done == [[("r", 2), ("r", 3)]] and t.next_wakeup() is None


def test_a_step_settles_its_own_stores_and_synchronous_loads_only():
    bm, t = make_transfers(synchronous=True)
    a, b = make_request("a", 0.0), make_request("b", 0.0)
    t.start_load(a, 0, 4, now=0.0)  # lmcache: loaded in the step, nobody held
    assert not t.loading
    first = t.attach(Plan(step_id=1, seqs=(seq(a),)))
    second = t.attach(Plan(step_id=2, seqs=(seq(b),)))
    assert first.offload_store_blocks and t.has_unsettled
    t.settle(second, now=3.0)
    assert bm.offload.stores_done == [([("b", "store")], 3.0)] and bm.offload.loads_done == []
    t.settle(first, now=4.0)
    assert bm.offload.loads_done == [[("a", 0)]] and not t.has_unsettled


def test_a_plan_without_copies_is_returned_as_it_is():
    bm, t = make_transfers()
    bm.offload_stores = lambda req, prompt_only: ([], [])
    plan = Plan(step_id=3, seqs=(seq(make_request("a", 0.0)),))
    assert t.attach(plan) is plan and not t.has_unsettled

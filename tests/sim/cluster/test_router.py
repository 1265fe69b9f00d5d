"""Routers on stand-in replicas: round-robin order, least work, power of two, prefix affinity."""
import pytest

from policies import ConfigError, Request
from sim.cluster.router import ROUTERS, PrefixAwareRouter, block_hashes, make_router


class FakeReplica:
    """A replica as a router sees it: just its outstanding tokens."""

    def __init__(self, load=0):
        self.load = load

    def num_outstanding_tokens(self):
        return self.load


def make_request(i, prompt=None, n=64, max_tokens=8):
    return Request(i, 0.0, len(prompt) if prompt is not None else n, max_tokens, prompt_token_ids=prompt)


def test_round_robin_cycles():
    r = make_router("round_robin")
    reps = [FakeReplica(load=100 * i) for i in range(3)]
    assert [r.choose(make_request(i), reps) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_tokens_picks_the_least_loaded_lowest_index_on_ties():
    r = make_router("least_tokens")
    assert r.choose(make_request(0), [FakeReplica(5), FakeReplica(3), FakeReplica(3)]) == 1


def test_power_of_two_never_picks_the_busiest_of_three_and_is_seeded():
    reps = [FakeReplica(0), FakeReplica(10), FakeReplica(1000)]
    picks = [make_router("power_of_two", seed=1).choose(make_request(i), reps) for i in range(200)]
    assert 2 not in picks  # whichever pair is drawn, the busiest loses
    a = make_router("power_of_two", seed=7)
    b = make_router("power_of_two", seed=7)
    assert [a.choose(make_request(i), reps) for i in range(50)] == [b.choose(make_request(i), reps) for i in range(50)]


def test_block_hashes_chain_over_full_blocks_only():
    p = list(range(40))
    h = block_hashes(make_request(0, p), 16)
    assert len(h) == 2  # 40 tokens = 2 full blocks + 8
    q = list(range(32)) + [999] * 8
    assert block_hashes(make_request(1, q), 16) == h  # same first 32 tokens
    r = [7] + list(range(1, 40))
    assert block_hashes(make_request(2, r), 16)[1] != h[1]  # chained: a changed first block changes all
    assert block_hashes(make_request(3, None, n=40), 16) == []


def test_prefix_aware_sends_a_group_back_where_its_prefix_went():
    router = PrefixAwareRouter(block_size=16, capacity_blocks=1000, max_imbalance=100)
    reps = [FakeReplica(0) for _ in range(4)]
    groups = [[g * 1000 + t for t in range(64)] for g in range(4)]
    first = {}
    for i in range(40):
        g = i % 4
        prompt = groups[g] + [i] * 16  # shared 64-token prefix + a private suffix
        choice = router.choose(make_request(i, prompt), reps)
        reps[choice].load += 80
        first.setdefault(g, choice)
        assert choice == first[g]
    assert len(set(first.values())) == 4  # misses spread by load


def test_prefix_aware_passes_over_an_overloaded_replica():
    router = PrefixAwareRouter(block_size=16, capacity_blocks=1000, max_imbalance=2.0)
    reps = [FakeReplica(0), FakeReplica(0)]
    prompt = list(range(64))
    assert router.choose(make_request(0, prompt), reps) == 0
    reps[0].load = 10_000  # the cached replica is swamped
    assert router.choose(make_request(1, prompt), reps) == 1


def test_prefix_aware_forgets_beyond_capacity():
    router = PrefixAwareRouter(block_size=16, capacity_blocks=4, max_imbalance=100)
    reps = [FakeReplica(0), FakeReplica(0)]
    a, b = list(range(64)), list(range(100, 164))
    assert router.choose(make_request(0, a), reps) == 0
    reps[0].load = 1
    assert router.choose(make_request(1, b), reps) == 1
    reps[1].load = 2
    reps[0].load = 3
    c = list(range(200, 264))
    assert router.choose(make_request(2, c), reps) == 1  # a miss: least loaded
    # replica 1 held b (4 blocks) and now c (4 blocks) with room for 4: b's blocks were evicted
    # with room for 4 blocks, replica 1 evicted b for c: b now matches nowhere and goes to the least loaded
    reps[0].load, reps[1].load = 5, 0
    assert router.choose(make_request(3, b), reps) == 1
    reps[0].load, reps[1].load = 5, 0
    assert router.choose(make_request(4, a), reps) == 0  # a is still cached on 0: affinity beats load


def test_unknown_router_lists_the_choices():
    with pytest.raises(ConfigError, match="cluster.router: 'random'.*" + ROUTERS[0]):
        make_router("random")

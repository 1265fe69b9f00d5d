"""Routers on stand-in replicas (round-robin order, least work, power of two, prefix affinity), and
in a cluster against the queueing theory of their disciplines."""
import math

import numpy as np
import pytest

from policies import ConfigError, Request
from sim.cluster.router import ROUTERS, PrefixAwareRouter, block_hashes, make_router
from sim.config import load_config
from sim.latency.base import ConstantLatencyModel
from sim.runner import simulate


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


# --- routers against queueing theory ----------------------------------------------------------------
# One sequence at a time (max_num_seqs=1) and a constant step time make a replica a single server
# whose service is `output tokens x STEP_S`; Poisson arrivals from the workload generator. The
# references are what each discipline is in theory, computed on the run's own arrival times where
# the discipline is exactly defined (no sampling error between them), else the closed form, to
# within the run's own sampling error (batch means).

STEP_S = 0.01


def routed(router: str, k: int, rate: float, n: int, output_len: dict, seed: int = 1):
    """The requests table (in arrival order) of `k` one-at-a-time replicas behind `router`."""
    config = load_config({
        "model": {"name": "Llama-3-8B"}, "scheduler": {"policy": "continuous", "max_num_seqs": 1},
        "workload": {"kind": "poisson", "rate": rate, "num_requests": n, "seed": seed,
                     "prompt_len": {"kind": "constant", "value": 8}, "output_len": output_len},
        "cluster": {"num_replicas": k, "router": router}})
    return simulate(config, latency_model=ConstantLatencyModel(STEP_S)).requests.sort_values("arrival_time")


def constant(m: int) -> dict:
    return {"kind": "constant", "value": m}


def fcfs_waits(arrivals, services, k: int) -> np.ndarray:
    """Waits of a k-server FCFS queue (one shared queue): the Kiefer-Wolfowitz workload recursion.

    Sending each arrival to the server with the least unfinished work is the same queue, so this
    is also what least-work routing gives.
    """
    work, waits, prev = np.zeros(k), np.empty(len(arrivals)), arrivals[0]
    for i, (a, s) in enumerate(zip(arrivals, services)):
        work = np.maximum(work - (a - prev), 0.0)
        prev = a
        j = int(np.argmin(work))
        waits[i] = work[j]
        work[j] += s
    return waits


def mdc_mean_wait(c: int, rate: float, service: float, size: int = 400) -> float:
    """Exact mean wait of M/D/c: the number in system D apart is max(N - c, 0) + Poisson(rate x D)
    (everyone in service at t has left by t + D, nobody waiting has); its stationary law gives the
    mean queue length, and Little's law the wait."""
    a = rate * service
    j = np.arange(size)
    arrivals = np.exp(-a + j * np.log(a) - np.array([math.lgamma(x + 1) for x in j]))
    pi = np.zeros(size)
    pi[0] = 1.0
    for _ in range(100_000):
        served = np.zeros(size)
        served[0] = pi[:c + 1].sum()
        served[1:size - c] = pi[c + 1:]
        new = np.convolve(served, arrivals)[:size]
        new /= new.sum()
        if np.abs(new - pi).max() < 1e-14:
            break
        pi = new
    return float((np.maximum(j - c, 0) * pi).sum() / rate)


def batch_se(waits, num_batches: int = 40) -> float:
    """Standard error of the mean wait by batch means (batches far longer than a busy period)."""
    means = np.array_split(np.asarray(waits), num_batches)
    return float(np.std([b.mean() for b in means], ddof=1) / np.sqrt(num_batches))


def test_mdc_reference_reduces_to_pollaczek_khinchine_for_one_server():
    assert mdc_mean_wait(1, 70.0, 0.01) == pytest.approx(0.7 * 0.01 / (2 * 0.3), rel=1e-9)


def test_round_robin_over_deterministic_service_is_the_md_k_queue():
    """Round robin deals a Poisson stream out as Erlang-k streams; with equal deterministic service
    that is exactly one FCFS queue of k servers (the server free first is the one that started k
    requests ago), so each request waits what M/D/k gives it, and the mean is M/D/k's."""
    k, rho, n = 4, 0.7, 40_000
    rate = rho * k / STEP_S
    table = routed("round_robin", k, rate, n, constant(1))
    waits = table["queue_s"].to_numpy()
    np.testing.assert_allclose(waits, fcfs_waits(table["arrival_time"].to_numpy(), np.full(n, STEP_S), k),
                               atol=1e-9)
    np.testing.assert_allclose(table["e2e_s"] - table["queue_s"], STEP_S, atol=1e-9)
    assert abs(waits.mean() - mdc_mean_wait(k, rate, STEP_S)) < 4 * batch_se(waits)


def test_least_tokens_is_least_work_routing_the_mgk_queue():
    """Outstanding tokens are a replica's unfinished work in steps (the simulator knows each
    output length), so least_tokens is least-work routing: the M/G/k FCFS queue, to within the
    step the router cannot see into. Round robin on the same arrivals waits several times longer."""
    k, n = 4, 10_000
    lengths = {"kind": "lognormal", "median": 10, "sigma": 0.8, "max": 200}
    rate = 0.7 * k / (10 * math.exp(0.8 ** 2 / 2) * STEP_S)  # load 0.7 at the lognormal's mean
    table = routed("least_tokens", k, rate, n, lengths)
    services = table["num_output_tokens"].to_numpy() * STEP_S
    np.testing.assert_allclose(table["e2e_s"] - table["queue_s"], services, atol=1e-9)
    reference = fcfs_waits(table["arrival_time"].to_numpy(), services, k).mean()
    assert abs(table["queue_s"].mean() - reference) < STEP_S
    assert routed("round_robin", k, rate, n, lengths)["queue_s"].mean() > 2 * reference


def test_power_of_two_lies_between_pooling_and_random_routing():
    """Two random candidates, the less loaded: better than routing at random (k M/D/1 queues at
    rate / k, Pollaczek-Khinchine), worse than least work (M/D/k). With two replicas it always
    draws both, so it is least_tokens."""
    k, rho, n = 4, 0.7, 20_000
    rate = rho * k / STEP_S
    waits = routed("power_of_two", k, rate, n, constant(1))["queue_s"]
    se = batch_se(waits)
    random_routing = rho * STEP_S / (2 * (1 - rho))
    assert mdc_mean_wait(k, rate, STEP_S) + 4 * se < waits.mean() < random_routing - 4 * se
    two = [routed(name, 2, 1.4 / (3 * STEP_S), 3000, constant(3)) for name in ("power_of_two", "least_tokens")]
    np.testing.assert_allclose(two[0]["queue_s"], two[1]["queue_s"], atol=1e-12)


def test_prefix_aware_without_shared_prefixes_routes_as_least_tokens():
    """No prompt token ids, so no cached prefix anywhere: every request is a miss, sent to the
    least-loaded replica within max_imbalance, which is the least-loaded one."""
    runs = [routed(name, 3, 2.1 / (3 * STEP_S), 3000, constant(3)) for name in ("prefix_aware", "least_tokens")]
    np.testing.assert_allclose(runs[0]["queue_s"], runs[1]["queue_s"], atol=1e-12)
    assert (runs[0]["replica"].to_numpy() == runs[1]["replica"].to_numpy()).all()

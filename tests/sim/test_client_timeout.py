"""The client's request timeout (`workload.request_timeout_s`, `Replica(request_timeout_s=...)`).

Invariants: every request ends (finished, rejected or timed out) and every KV block comes back; no
request is reported finished after its deadline; a timed-out one ends at its deadline. Queueing
theory: a single server with Poisson arrivals, exponential service and a deterministic deadline
tau on the whole sojourn (M/M/1+D, the waiting ones dropped at tau, those in service finishing
their service) fails the fraction derived in `mm1_deadline_failure`. Fast path on vs off with
timeouts: tests/sim/test_fast_path.py.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import simpy

from policies import ConfigError, Request
from records.results import Recorder, preemption_table, requests_table
from sim.config import load_config
from sim.replica import Replica
from sim.runner import simulate
from sim.workload import WorkloadConfig
from sim_helpers import ConstantLatency, make_requests, make_sched, run_replica

ENDED = {"length", "stop", "rejected", "timed_out"}
TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama" / "config.json"


def overload_config(timeout=2.0, **workload):
    return load_config({
        "model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 300},
        "scheduler": {"policy": "vllm", "max_num_seqs": 16, "max_model_len": 4096},
        "cache": {"enable_prefix_caching": False},
        "workload": {"kind": "poisson", "rate": 30.0, "num_requests": 200, "seed": 3, "request_timeout_s": timeout,
                     "prompt_len": {"kind": "lognormal", "median": 300, "sigma": 1.0, "max": 1500},
                     "output_len": {"kind": "lognormal", "median": 150, "sigma": 0.7, "max": 800}, **workload}})


def check_ended(table, timeout):
    """Every row ended; finished ones by their deadline; timed-out ones at it, never with a latency."""
    assert set(table["finish_reason"]) <= ENDED
    done = table["finish_reason"].isin(["length", "stop"])
    deadline = table["arrival_time"] + timeout
    assert (table.loc[done, "finish_time"] <= deadline[done]).all()
    out = table["finish_reason"] == "timed_out"
    assert (table.loc[out, "finish_time"] == deadline[out]).all()
    assert table.loc[out, ["ttft_s", "e2e_s", "tpot_s"]].isna().all().all()


@pytest.mark.parametrize("policy, preemption", [("chunked", "recompute"), ("chunked", "swap"),
                                                ("continuous", "recompute"), ("static", "recompute")])
def test_every_request_ends_and_every_block_returns(policy, preemption):
    """Memory pressure and a queue that outgrows the timeout: some finish, many time out (waiting,
    prefilling, decoding, preempted or swapped), none is lost, and the pool is whole at the end."""
    sched = make_sched(policy, num_gpu_blocks=40, block_size=8, num_cpu_blocks=64 if preemption == "swap" else 0,
                       preemption=preemption, max_num_seqs=8, max_num_batched_tokens=256)
    rng = np.random.default_rng(0)
    requests = make_requests(120, arrivals=np.cumsum(rng.exponential(0.02, 120)),
                             prompt=rng.integers(8, 120, 120), max_tokens=rng.integers(1, 60, 120))
    recorder, replica = run_replica(sched, ConstantLatency(0.004, 1e-5), requests, request_timeout_s=0.6, fast_decode=False)
    table = requests_table(recorder.requests)
    assert len(table) == 120 and replica.num_outstanding == 0 and not sched.requests
    check_ended(table, 0.6)
    reasons = table["finish_reason"].value_counts()
    assert reasons.get("timed_out", 0) > 20 and reasons.get("length", 0) > 10
    bm = sched.block_manager
    assert bm.num_free_gpu_blocks == bm.num_gpu_blocks
    assert bm.num_free_cpu_blocks == bm.num_cpu_blocks
    # a preemption never outlasts its request: a timed-out one's still open at the abort ends at the deadline
    for r in recorder.requests:
        assert len(r.preemption_intervals) == r.num_preemptions
        assert all(a <= b <= r.finish_time for a, b in r.preemption_intervals), (r.req_id, r.preemption_intervals)


def test_a_preemption_open_when_its_request_times_out_ends_at_the_deadline():
    """A tight pool under a closed loop with swap preemption and a short timeout: requests preempted
    when their client gives up end at the deadline, and so do their open preemption intervals."""
    cfg = load_config({
        "model": {"name": str(TINY)},
        "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 4, "swap_space_gb": 0.0},
        "scheduler": {"policy": "continuous", "max_num_seqs": 4, "queue": "priority", "preemption": "swap"},
        "cache": {"block_size": 32, "watermark": 0.2, "enable_prefix_caching": True},
        "workload": {"num_requests": 261, "seed": 460, "prompt_len": {"kind": "uniform", "low": 7, "high": 104},
                     "output_len": {"kind": "constant", "value": 12}, "kind": "closed_loop", "num_users": 8,
                     "think_time": 0.01, "num_prefix_groups": 1, "prefix_len": 16, "users_per_group": 2,
                     "request_timeout_s": 0.05}})
    table = simulate(cfg).requests
    out = table[(table["finish_reason"] == "timed_out") & (table["num_preemptions"] > 0)]
    assert len(out) > 0
    intervals = preemption_table(table).merge(table[["req_id", "finish_time"]])
    assert len(intervals) == table["num_preemptions"].sum()
    assert (intervals["preempted_at"] <= intervals["resumed_at"]).all()
    assert (intervals["resumed_at"] <= intervals["finish_time"]).all()


def test_requests_sent_together_while_a_step_runs_get_their_deadlines_in_order():
    """Async scheduling defers a request that arrives mid-step to the next plan; several arriving
    at one instant share a deadline and were once compared as Requests on the deadline heap
    (TypeError). Each keeps its own place, and every one ends by its deadline."""
    sched = make_sched("chunked", num_gpu_blocks=200, block_size=8, max_num_seqs=8, max_num_batched_tokens=256)
    arrivals = np.repeat(np.arange(1, 11) * 0.013, 6)  # bursts of six, each landing inside a step
    requests = make_requests(len(arrivals), arrivals=arrivals, prompt=np.full(len(arrivals), 40),
                             max_tokens=np.full(len(arrivals), 30))
    recorder, replica = run_replica(sched, ConstantLatency(0.01, 1e-5), requests, request_timeout_s=0.5,
                                    async_scheduling=True)
    table = requests_table(recorder.requests)
    assert len(table) == len(arrivals) and replica.num_submitted == len(arrivals)
    check_ended(table, 0.5)
    assert (table["finish_reason"] == "timed_out").any() and table["finish_reason"].isin(["length"]).any()


def test_a_request_finishing_in_the_step_that_spans_its_deadline_is_lost_to_its_client():
    """One request alone: 1 + 9 steps of 0.1 s end at 1.0 s; a 0.95 s timeout falls inside the last
    step, whose token the client never sees: timed out at 0.95 s. A 1.0 s timeout it meets."""
    for timeout, reason, finish in ((0.95, "timed_out", 0.95), (1.0, "length", 1.0)):
        recorder, _ = run_replica(make_sched("chunked"), ConstantLatency(0.1), make_requests(1, max_tokens=10),
                                  request_timeout_s=timeout)
        row = requests_table(recorder.requests).iloc[0]
        assert row["finish_reason"] == reason and row["finish_time"] == pytest.approx(finish, abs=1e-12)


def test_an_idle_replica_wakes_to_time_out_a_request_that_cannot_run():
    """A request waiting for blocks that the replica's owner holds (no step can run): its client
    still gives up at its deadline, and the replica reports it then."""
    sched = make_sched("chunked", num_gpu_blocks=8, block_size=4)
    env = simpy.Environment()
    recorder = Recorder()
    replica = Replica(env, sched, ConstantLatency(0.01), recorder, request_timeout_s=2.0)
    bm = sched.block_manager
    hold = Request("hold", 0.0, bm.num_gpu_blocks * bm.block_size, 1)
    assert bm.allocate_slots(hold, bm.num_gpu_blocks * bm.block_size)  # an outside hold (a KV transfer's)
    ended = []
    replica.on_finish.append(lambda r, now: ended.append((r.req_id, now)))
    replica.submit(make_requests(1, prompt=8)[0])
    env.run(until=5.0)
    assert ended == [(0, 2.0)]
    assert requests_table(recorder.requests).iloc[0]["finish_reason"] == "timed_out"


def test_summary_counts_timed_out_requests_and_measures_successes_only():
    result = simulate(overload_config())
    s, table = result.summary, result.requests
    assert s["num_timed_out"] == int((table["finish_reason"] == "timed_out").sum()) > 0
    assert s["num_requests"] == s["num_finished"] + s["num_rejected"] + s["num_aborted"] + s["num_timed_out"]
    done = table[table["finish_reason"].isin(["length", "stop"])]
    assert s["e2e_s"]["mean"] == pytest.approx(done["e2e_s"].mean())
    assert s["e2e_s"]["max"] <= 2.0
    check_ended(table, 2.0)
    streamed = simulate(overload_config(), stream=True).summary  # the streaming recorder counts them alike
    assert streamed["num_timed_out"] == s["num_timed_out"] and streamed["num_finished"] == s["num_finished"]
    # the queue is one of TTFT's parts: over the same successes, in both recorders, and so its parts' row
    assert s["queue_s"]["mean"] == pytest.approx(done["queue_s"].mean())
    assert streamed["queue_s"]["mean"] == pytest.approx(done["queue_s"].mean(), rel=0.01)
    assert s["queue_s"]["mean"] < table["queue_s"].mean()  # the timed-out waited longer: not in it


def test_no_timeout_is_the_client_that_waits():
    """Default (None) and a timeout longer than any answer: the same tables as before timeouts."""
    waits = simulate(overload_config(timeout=None))
    assert waits.summary["num_timed_out"] == 0
    longer = simulate(overload_config(timeout=1e6))
    assert longer.requests.equals(waits.requests) and longer.steps.equals(waits.steps)


def test_timeouts_on_several_replicas():
    result = simulate(load_config({**_as_dict(overload_config()),
                                   "cluster": {"num_replicas": 2, "router": "least_tokens"}}))
    assert result.summary["num_timed_out"] > 0
    check_ended(result.requests, 2.0)


def _as_dict(config) -> dict:
    import tomllib

    from sim.config import config_to_toml
    return tomllib.loads(config_to_toml(config))


def test_disaggregation_with_a_timeout_is_a_clear_error():
    data = _as_dict(overload_config())
    data["disaggregation"] = {"enabled": True}
    data.pop("cluster", None)
    with pytest.raises(ConfigError, match="^workload.request_timeout_s: .*disaggregation"):
        simulate(load_config(data))


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "300"])
def test_the_timeout_must_be_a_positive_number_of_seconds(bad):
    with pytest.raises(ConfigError, match=r"^workload.request_timeout_s: expected a finite number of seconds > 0"):
        WorkloadConfig(request_timeout_s=bad)


# --- queueing theory ---------------------------------------------------------------------------
class ExponentialSteps:
    """Each step (one request, one token: its whole service) lasts an exponential time, mean 1/mu."""

    def __init__(self, mu: float, seed: int = 0) -> None:
        self.mu, self.rng = mu, np.random.default_rng(seed)

    def step_time(self, plan) -> float:
        return float(self.rng.exponential(1.0 / self.mu))


def mm1_deadline_failure(lam: float, mu: float, tau: float) -> float:
    """Fraction of requests not done by arrival + tau in M/M/1 FCFS, where a request still waiting
    at its deadline leaves unserved and one in service is served in full (late: a failure).

    The virtual waiting time V (work an arrival finds, of served requests only) has an atom P0 at
    0, density lam P0 e^{-(mu-lam)x} below tau and f(tau) e^{-mu(x-tau)} above it (level crossing:
    only arrivals that find V < tau add work). An arrival fails if V >= tau (never served) or
    V < tau < V + S: P0 rho e^{-(mu-lam)tau} + P0 e^{-(mu-lam)tau}.
    """
    rho, d = lam / mu, mu - lam
    decay = math.exp(-d * tau)
    below = lam * tau if d == 0 else lam * (1 - decay) / d
    p0 = 1.0 / (1.0 + below + rho * decay)
    return p0 * decay * (1.0 + rho)


@pytest.mark.parametrize("lam, mu, tau", [(0.8, 1.0, 3.0), (1.5, 1.0, 5.0)])
def test_single_server_with_a_deadline_fails_the_mm1_fraction(lam, mu, tau):
    """One seat, one-token requests (each a single step of exponential length): the fraction timed
    out matches M/M/1+D, under load and in overload (rho = 1.5, where the queue is held in check
    only by the clients that give up)."""
    n = 20000
    rng = np.random.default_rng(7)
    requests = make_requests(n, arrivals=np.cumsum(rng.exponential(1.0 / lam, n)), prompt=4, max_tokens=1)
    sched = make_sched("chunked", max_num_seqs=1)
    recorder, _ = run_replica(sched, ExponentialSteps(mu, seed=11), requests, request_timeout_s=tau)
    table = requests_table(recorder.requests)
    check_ended(table, tau)
    failed = float((table["finish_reason"] == "timed_out").mean())
    expected = mm1_deadline_failure(lam, mu, tau)
    assert failed == pytest.approx(expected, abs=0.02), (failed, expected)

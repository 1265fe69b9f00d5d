"""Replicas sharing one environment carry their stretches through one another's events (behind a
router that reads only their loads, without an autoscaler): the same tables, row for row, and the same
loads at every routing decision, as when every stretch is cut at the next event of any replica."""
from __future__ import annotations

import hashlib

import pandas as pd
import pytest
import simpy

from sim.cluster.colocated import ColocatedCluster
from sim.cluster.router import LeastTokensRouter, make_router, reads_only_load
from sim.config import load_config
from sim.mixed_replay import MixedReplay
from sim.runner import simulate
from cluster_helpers import base_dict

CASES = {
    "poisson, 8 replicas": ["cluster.num_replicas=8", "workload.rate=60"],
    "closed loop": ["cluster.num_replicas=4", "workload.kind=closed_loop", "workload.num_users=24",
                    "workload.think_time=0.3"],
    "gamma bursts, memory pressure (recompute)": ["cluster.num_replicas=3", "workload.kind=gamma", "workload.cv=3",
                                                  "workload.rate=25", "hardware.num_gpu_blocks=500"],
    "swap": ["cluster.num_replicas=3", "workload.rate=25", "hardware.num_gpu_blocks=500",
             "scheduler.preemption=swap"],
    "client timeouts": ["cluster.num_replicas=4", "workload.rate=60", "workload.request_timeout_s=2"],
    "time limit, capped concurrency": ["cluster.num_replicas=5", "workload.rate=80", "workload.max_concurrency=30",
                                       "sim.max_sim_time_s=6"],
    "heterogeneous groups": ['cluster.replicas=[{count = 2, gpu = "H100-SXM"}, {count = 1, gpu = "A100-80G"}]',
                             "workload.rate=18"],
    "vllm, prefix caching": ["cluster.num_replicas=4", "workload.rate=40", "scheduler.policy=vllm",
                             "workload.num_prefix_groups=6", "workload.prefix_len=256",
                             "cache.enable_prefix_caching=true"],
}
# prompts with token ids under prefix caching are left to schedule() by the fast path: nothing carried,
# the tables must still agree
NOT_REPLAYED = {"vllm, prefix caching"}
ROUTED = [("round_robin", case) for case in CASES] + [("least_tokens", case) for case in CASES] + [
    ("power_of_two", "poisson, 8 replicas"), ("power_of_two", "closed loop"),
    ("prefix_aware", "gamma bursts, memory pressure (recompute)"), ("prefix_aware", "client timeouts")]


def uncut(monkeypatch, run):
    """`run()` with every router declared one that reads more than the loads: nothing is carried."""
    with monkeypatch.context() as patch:
        for name in ("round_robin", "least_tokens", "power_of_two", "prefix_aware"):
            patch.setattr(type(make_router(name)), "reads_beyond_load", True)
        return run()


def logging_loads(monkeypatch):
    """Log every replica's load at every routing decision (what least-work routers read)."""
    loads = []
    original = ColocatedCluster.submit

    def submit(self, request):
        loads.append([r.num_outstanding_tokens() for r in self.replicas])
        original(self, request)

    monkeypatch.setattr(ColocatedCluster, "submit", submit)
    return loads


def counting_carried_stretches(monkeypatch):
    """Log the stretches the mixed replay ran in carry mode (so a test knows the carried path ran)."""
    stretches = []
    original = MixedReplay.run

    def run(self, now):
        result = yield from original(self, now)
        if result is not None and self.carry:
            stretches.append(len(result[0]))
        return result

    monkeypatch.setattr(MixedReplay, "run", run)
    return stretches


@pytest.mark.parametrize("router, case", ROUTED)
def test_carried_replicas_give_the_uncut_tables_row_by_row(router, case, monkeypatch):
    config = load_config(base_dict(num_requests=300), [f"cluster.router={router}"] + CASES[case])
    carried_runs = counting_carried_stretches(monkeypatch)
    loads = logging_loads(monkeypatch)
    carried = simulate(config)
    assert bool(carried_runs) is (case not in NOT_REPLAYED), "the carried path taken or not as expected"
    carried_loads, loads[:] = list(loads), []
    shared = uncut(monkeypatch, lambda: simulate(config))
    assert carried_loads == loads  # every replica's load, at every routing decision
    pd.testing.assert_frame_equal(carried.steps, shared.steps)
    pd.testing.assert_frame_equal(carried.requests, shared.requests)
    assert carried.summary == shared.summary


def test_and_the_files_of_a_streamed_closed_loop_run(monkeypatch, tmp_path):
    config = load_config(base_dict(num_requests=300), ["cluster.router=round_robin"] + CASES["closed loop"])
    simulate(config, out=tmp_path / "carried")
    uncut(monkeypatch, lambda: simulate(config, out=tmp_path / "uncut"))
    files = sorted(p.name for p in (tmp_path / "uncut").iterdir() if p.is_file())
    assert "steps.csv" in files and "requests.parquet" in files
    for name in files:
        digests = [hashlib.md5((tmp_path / run / name).read_bytes()).hexdigest() for run in ("carried", "uncut")]
        assert digests[0] == digests[1], name


def test_a_fleet_whose_replicas_are_read_between_steps_is_not_carried(monkeypatch):
    """The autoscaler reads queues and blocks between steps; a router subclass may read anything."""
    config = load_config(base_dict(num_requests=20), ["cluster.num_replicas=3"])
    assert all(r._mixed.carry for r in ColocatedCluster(simpy.Environment(), config, None).replicas)
    scaled = load_config(base_dict(num_requests=20), ["cluster.num_replicas=3", "autoscaling.enabled=true",
                                                      "autoscaling.max_replicas=3"])
    assert not any(r._mixed.carry for r in ColocatedCluster(simpy.Environment(), scaled, None).replicas)

    class Reading(LeastTokensRouter):  # may override choose() to read more: it has not said it does not
        pass

    assert reads_only_load(LeastTokensRouter()) and not reads_only_load(Reading())

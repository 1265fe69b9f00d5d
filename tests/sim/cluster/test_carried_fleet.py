"""Round-robin replicas sharing one environment carry their stretches through one another's events:
the same tables, row for row, as when every stretch is cut at the next event of any replica."""
from __future__ import annotations

import hashlib

import pandas as pd
import pytest
import simpy

from sim.cluster.colocated import ColocatedCluster
from sim.cluster.router import RoundRobinRouter
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


def uncut(monkeypatch, run):
    """`run()` with round robin declared a router that reads the replicas: nothing is carried."""
    with monkeypatch.context() as patch:
        patch.setattr(RoundRobinRouter, "reads_replicas", True)
        return run()


def counting_stretches(monkeypatch):
    """Count the mixed replay's stretches that wait out another event (a carried one's waits)."""
    waits = []
    original = MixedReplay.run

    def run(self, now):
        before = self.env.now
        result = yield from original(self, now)
        if result is not None and self.carry and result[2] > before:
            waits.append(1)
        return result

    monkeypatch.setattr(MixedReplay, "run", run)
    return waits


@pytest.mark.parametrize("case", list(CASES))
def test_carried_replicas_give_the_uncut_tables_row_by_row(case, monkeypatch):
    config = load_config(base_dict(num_requests=300), ["cluster.router=round_robin"] + CASES[case])
    carried_runs = counting_stretches(monkeypatch)
    carried = simulate(config)
    assert bool(carried_runs) is (case not in NOT_REPLAYED), "the carried path taken or not as expected"
    shared = uncut(monkeypatch, lambda: simulate(config))
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


@pytest.mark.parametrize("overrides", [["cluster.router=least_tokens"], ["cluster.router=power_of_two"],
                                       ["autoscaling.enabled=true", "autoscaling.max_replicas=3"]])
def test_a_fleet_whose_replicas_are_read_between_steps_is_not_carried(overrides):
    config = load_config(base_dict(num_requests=20), ["cluster.num_replicas=3"] + overrides)
    cluster = ColocatedCluster(simpy.Environment(), config, recorder=None)
    assert not any(r._mixed.carry for r in cluster.replicas)

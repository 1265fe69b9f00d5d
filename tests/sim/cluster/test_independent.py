"""Round-robin replicas of an open-loop workload, each run alone: the shared environment's results."""
from __future__ import annotations

import pandas as pd
import pytest

import sim.cluster.runner as cluster_runner
from sim.cluster.independent import independent_parts
from sim.config import load_config
from sim.runner import simulate
from sim.workload import build_workload
from cluster_helpers import base_dict

CASES = {
    "poisson, 4 replicas": ["cluster.num_replicas=4", "workload.rate=22"],
    "gamma bursts, memory pressure": ["cluster.num_replicas=3", "workload.kind=gamma", "workload.cv=3",
                                      "workload.rate=25", "hardware.num_gpu_blocks=500"],
    "constant arrivals, time limit": ["cluster.num_replicas=5", "workload.kind=constant", "workload.rate=30",
                                      "sim.max_sim_time_s=6"],
    "heterogeneous groups": ['cluster.replicas=[{count = 2, gpu = "H100-SXM"}, {count = 1, gpu = "A100-80G"}]',
                             "workload.rate=18"],
    "filtered, rejected": ["cluster.num_replicas=3", "scheduler.max_model_len=1500", "workload.too_long=filter",
                           "workload.rate=20"],
}


def shared_environment_run(config, tmp_path):
    """The same streamed run with every replica in one environment (the decomposition turned off)."""
    original = cluster_runner.independent_parts
    cluster_runner.independent_parts = lambda config, workload: None
    try:
        return simulate(config, out=tmp_path)
    finally:
        cluster_runner.independent_parts = original


@pytest.mark.parametrize("case", list(CASES))
def test_replicas_run_alone_give_the_shared_environments_results(case, tmp_path):
    config = load_config(base_dict(num_requests=300), CASES[case])
    assert independent_parts(config, build_workload(config.workload, config.scheduler.max_model_len)) is not None
    alone = simulate(config, out=tmp_path / "alone")
    shared = shared_environment_run(config, tmp_path / "shared")
    for key in ("num_requests", "num_finished", "num_aborted", "num_steps", "duration_s", "ttft_s", "tpot_s",
                "itl_s", "e2e_s", "queue_s", "saturated", "offered_rate", "backlog_growth", "num_preemptions"):
        want, got = shared.summary[key], alone.summary[key]
        if isinstance(want, dict):
            for k in want:
                assert got[k] == pytest.approx(want[k], rel=1e-12), (key, k)
        else:
            assert got == (pytest.approx(want, rel=1e-12) if isinstance(want, float) else want), key
    by = ["replica", "step_id"]
    pd.testing.assert_frame_equal(alone.steps.sort_values(by).reset_index(drop=True),
                                  shared.steps.sort_values(by).reset_index(drop=True))
    pd.testing.assert_frame_equal(alone.requests.sort_values("req_id").reset_index(drop=True),
                                  shared.requests.sort_values("req_id").reset_index(drop=True))


def test_and_the_in_memory_run_too(tmp_path):
    config = load_config(base_dict(num_requests=200), CASES["poisson, 4 replicas"])
    alone = simulate(config, out=tmp_path)
    exact = simulate(config)  # in memory: always the shared environment
    pd.testing.assert_frame_equal(alone.requests.sort_values("req_id").reset_index(drop=True),
                                  exact.requests.sort_values("req_id").reset_index(drop=True), check_dtype=False)
    assert alone.summary["ttft_s"]["p99"] == exact.summary["ttft_s"]["p99"]


@pytest.mark.parametrize("overrides", [["cluster.router=least_tokens"], ["workload.kind=closed_loop"],
                                       ["disaggregation.enabled=true"]])
def test_replicas_that_can_affect_one_another_share_one_environment(overrides):
    config = load_config(base_dict(num_requests=50), ["cluster.num_replicas=3"] + overrides)
    assert independent_parts(config, build_workload(config.workload, config.scheduler.max_model_len)) is None


def test_the_parts_deal_the_stream_round_robin():
    config = load_config(base_dict(num_requests=103), ["cluster.num_replicas=4"])
    _, whole = build_workload(config.workload).stream()
    whole = list(whole)
    parts = [list(it) for _, it in build_workload(config.workload).stream_parts(4)]
    assert sum(map(len, parts)) == 103
    for k, part in enumerate(parts):
        assert [r.req_id for r in part] == [r.req_id for r in whole[k::4]]
        assert [r.arrival_time for r in part] == [r.arrival_time for r in whole[k::4]]

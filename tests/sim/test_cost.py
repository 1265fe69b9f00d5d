"""What a run costs: GPU-hours, dollars and joules agree with the summary's own figures and physics."""
from __future__ import annotations

import pytest

from sim.config import load_config
from sim.runner import simulate
from specs import get_gpu

BASE = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM", "price_per_hour": 2.5},
        "scheduler": {"policy": "chunked"},
        "workload": {"kind": "poisson", "rate": 8.0, "num_requests": 200, "seed": 2,
                     "prompt_len": {"kind": "constant", "value": 256},
                     "output_len": {"kind": "constant", "value": 64}}}


def run(**sections):
    config = {k: (BASE.get(k, {}) | v) for k, v in sections.items()}
    return simulate(load_config(BASE | config)).summary


def output_tokens(summary) -> float:
    return summary["throughput"]["output_tokens_per_s"] * summary["duration_s"]


def test_cost_per_million_tokens_is_price_times_gpu_hours_over_tokens():
    s = run(hardware={"tp": 2})
    assert s["gpu_hours"] == pytest.approx(2 * s["duration_s"] / 3600)
    assert s["cost_per_million_output_tokens"] == pytest.approx(2.5 * s["gpu_hours"] / output_tokens(s) * 1e6)


def test_a_heterogeneous_cluster_pays_each_pool_its_own_price():
    s = run(cluster={"replicas": [{"count": 1, "gpu": "H100-SXM", "hardware": {"price_per_hour": 4.0}},
                                  {"count": 2, "gpu": "A100-80G", "hardware": {"price_per_hour": 1.0}}]})
    hours = s["duration_s"] / 3600
    assert s["gpu_hours"] == pytest.approx(3 * hours)
    assert s["cost_usd"] == pytest.approx((4.0 + 2 * 1.0) * hours)
    assert s["cost_per_million_output_tokens"] == pytest.approx(s["cost_usd"] / output_tokens(s) * 1e6)


@pytest.mark.parametrize("gpu", ["H100-SXM", "A100-80G", "MI300X"])
def test_energy_per_token_lies_between_idle_and_board_power(gpu):
    s = run(hardware={"gpu": gpu})
    spec = get_gpu(gpu)
    gpu_s = s["gpu_hours"] * 3600
    tokens = output_tokens(s)
    assert spec.idle_power_w * gpu_s / tokens < s["energy_j_per_output_token"] < spec.board_power_w * gpu_s / tokens
    assert spec.idle_power_w < s["mean_power_w"] < spec.board_power_w


def test_prompt_heavy_work_draws_more_power_than_decode_heavy_work():
    # the same busy GPU: long prompts are compute-bound GEMMs, long answers memory-bound decodes
    prompts = run(workload={"rate": 40.0, "prompt_len": {"kind": "constant", "value": 2048},
                            "output_len": {"kind": "constant", "value": 2}})
    decodes = run(workload={"rate": 40.0, "prompt_len": {"kind": "constant", "value": 16},
                            "output_len": {"kind": "constant", "value": 512}})
    assert prompts["mean_power_w"] > decodes["mean_power_w"]


def test_an_idle_deployment_draws_near_idle_power():
    busy = run(workload={"rate": 20.0})
    quiet = run(workload={"rate": 0.05, "num_requests": 30})
    assert quiet["mean_power_w"] < busy["mean_power_w"]
    assert quiet["mean_power_w"] < get_gpu("H100-SXM").idle_power_w * 1.2

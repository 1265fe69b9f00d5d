"""The serving phenomena the design notes describe, reproduced end to end by `simulate()`.

Each test runs the whole stack (workload generator, roofline latency model, real scheduler, replica,
metrics) on a small scenario and checks the direction and rough size of an effect the notes report,
not numbers copied from a run.
"""
from __future__ import annotations

import pytest

from sim.config import load_config
from sim.latency import RooflineConstants
from specs import bytes_per_block
from sim.runner import simulate


def lognormal(median, sigma, max_):
    return {"kind": "lognormal", "median": median, "sigma": sigma, "max": max_}


MIXED = {  # 48 closed-loop users; one request in five is a ~2,500-token document
    "model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM"},
    "workload": {"kind": "closed_loop", "num_users": 48, "num_requests": 400, "seed": 3,
                 "output_len": lognormal(120, 0.5, 400),
                 "classes": [{"name": "short", "fraction": 0.8, "prompt_len": lognormal(150, 0.5, 800)},
                             {"name": "long", "fraction": 0.2, "prompt_len": lognormal(2500, 0.2, 3500)}]},
}


def test_chunked_prefill_trades_ttft_for_smooth_decodes():
    runs = {name: simulate(load_config(MIXED, sets)).summary for name, sets in {
        "whole": ["scheduler.policy=continuous", "scheduler.max_num_batched_tokens=4096"],
        "512": ["scheduler.policy=chunked", "scheduler.max_num_batched_tokens=512"],
        "256": ["scheduler.policy=chunked", "scheduler.max_num_batched_tokens=256"],
    }.items()}
    whole, c512, c256 = runs["whole"], runs["512"], runs["256"]
    for s in runs.values():
        assert s["num_finished"] == s["num_requests"] == 400
    # a whole 2,500-token prefill stalls every decode in its step; chunks bound the stall
    assert c512["max_stall_s"] < whole["max_stall_s"] / 3
    assert c256["max_stall_s"] < c512["max_stall_s"]
    assert c512["tpot_s"]["p99"] < whole["tpot_s"]["p99"]
    assert c256["tpot_s"]["p99"] < c512["tpot_s"]["p99"]
    # ... while prompts take more steps to get through: TTFT rises as the budget shrinks
    assert whole["ttft_s"]["mean"] < c512["ttft_s"]["mean"] < c256["ttft_s"]["mean"]


def test_continuous_batching_beats_static_with_heavy_tailed_lengths():
    cfg = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM"},
           "scheduler": {"max_num_seqs": 32, "max_num_batched_tokens": 32768},
           "workload": {"kind": "poisson", "rate": 200.0, "num_requests": 300, "seed": 5,  # overloaded:
                        "prompt_len": lognormal(200, 0.8, 1000),  # throughput = capacity
                        "output_len": lognormal(60, 1.2, 2000)}}
    static = simulate(load_config(cfg, ["scheduler.policy=static"])).summary
    cont = simulate(load_config(cfg, ["scheduler.policy=continuous"])).summary
    assert static["num_finished"] == cont["num_finished"] == 300
    assert cont["throughput"]["output_tokens_per_s"] > 2 * static["throughput"]["output_tokens_per_s"]
    assert cont["e2e_s"]["mean"] < static["e2e_s"]["mean"]
    # static computes padding: the finished slots of a batch keep running until its longest member ends
    assert static["padding_fraction"] > 0.3 and cont["padding_fraction"] == 0.0


@pytest.mark.parametrize("preemption", ["recompute", "swap", "hybrid"])
def test_memory_pressure_preempts_and_every_request_still_finishes(preemption):
    cfg = {"model": {"name": "Llama-2-7B"},
           "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 256, "swap_space_gb": 4.0},
           "scheduler": {"policy": "chunked", "max_num_seqs": 64, "preemption": preemption},
           "workload": {"kind": "poisson", "rate": 50.0, "num_requests": 200, "seed": 2,
                        "prompt_len": lognormal(300, 0.5, 1500), "output_len": lognormal(200, 0.5, 1000)}}
    result = simulate(load_config(cfg))
    s, table = result.summary, result.requests
    assert s["num_preemptions"] > 0
    assert s["num_finished"] == s["num_requests"] == 200
    assert (table["num_output_tokens"] == table["max_tokens"]).all()
    assert result.steps["num_kv_blocks_used"].max() <= 256
    moved = result.steps["num_swap_out_blocks"].sum()
    if preemption == "recompute":
        assert moved == 0 and s["num_recomputes"] == s["num_preemptions"]
    elif preemption == "swap":
        assert moved > 0 and s["num_swaps"] == s["num_preemptions"]
        assert result.steps["num_swap_in_blocks"].sum() == moved  # everything swapped out comes back
    else:
        assert s["num_swaps"] + s["num_recomputes"] == s["num_preemptions"]


def test_swap_time_grows_with_the_bytes_moved(tmp_path):
    # every request arrives at t = 0, so the scheduler's decisions do not depend on time and two runs
    # differing only in PCIe bandwidth swap exactly the same blocks; the extra time is the copies'
    trace = tmp_path / "burst.csv"
    trace.write_text("arrival_time,prompt_tokens,output_tokens\n" + "0.0,300,400\n" * 60)
    base = {"model": {"name": "Llama-2-7B"},
            "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 600, "swap_space_gb": 8.0},
            "scheduler": {"policy": "chunked", "preemption": "swap", "max_num_seqs": 64},
            "workload": {"kind": "trace", "trace": str(trace)}}
    slow = simulate(load_config(base, ["hardware.pcie_bandwidth_gbps=4"]))
    fast = simulate(load_config(base, ["hardware.pcie_bandwidth_gbps=32"]))
    moved = slow.steps["num_swap_out_blocks"] + slow.steps["num_swap_in_blocks"]
    assert moved.sum() > 0
    assert moved.tolist() == (fast.steps["num_swap_out_blocks"] + fast.steps["num_swap_in_blocks"]).tolist()
    extra = slow.steps["duration"] - fast.steps["duration"]
    assert (extra[moved == 0].abs() < 1e-12).all()  # steps without copies cost the same
    cfg = load_config(base)
    block_bytes = bytes_per_block(cfg.model.spec(), cfg.hardware.tp, cfg.cache.block_size)
    per_byte = extra[moved > 0] / (moved[moved > 0] * block_bytes)
    wire = 1 / 4e9 - 1 / 32e9  # seconds per byte saved by the faster link, at full efficiency
    assert per_byte.min() >= wire * 0.999
    assert per_byte.max() <= wire / RooflineConstants().pcie_eff * 1.001

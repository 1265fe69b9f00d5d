"""The KV offload tier in the simulator: shared prefixes that do not fit the GPU's KV come back from
the CPU tier (better prefix hit rate and TTFT than without it), and the bytes the records report are
the blocks moved times one block's bytes."""
from __future__ import annotations

import pytest

from policies import ConfigError
from sim.config import load_config
from sim.runner import simulate
from specs import bytes_per_block, get_model

# 16 system prompts of 2,048 tokens (2,048 blocks of 16 in all) on a GPU holding 1,200 blocks:
# the GPU's prefix cache cannot keep them all
SHARED_PREFIX = {
    "model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 1200},
    "scheduler": {"policy": "vllm", "max_num_batched_tokens": 2048, "max_num_seqs": 64},
    "workload": {"kind": "poisson", "rate": 4.0, "num_requests": 240, "num_prefix_groups": 16, "prefix_len": 2048,
                 "users_per_group": 4, "prompt_len": {"kind": "constant", "value": 128},
                 "output_len": {"kind": "constant", "value": 64}, "seed": 0},
}


def run(*overrides):
    return simulate(load_config(SHARED_PREFIX, list(overrides)))


@pytest.fixture(scope="module")
def without_tier():
    return run()


@pytest.mark.parametrize("backend", ["native", "lmcache"])
def test_a_cpu_tier_raises_the_prefix_hit_rate_and_cuts_ttft(without_tier, backend):
    with_tier = run("cache.offload_size_gb=8", f"cache.offload_backend={backend}")
    a, b = without_tier.summary, with_tier.summary
    assert "offload" not in a and b["cpu_prefix_cache_hit_rate"] > 0.2
    assert b["prefix_cache_hit_rate"] + b["cpu_prefix_cache_hit_rate"] > a["prefix_cache_hit_rate"] + 0.2
    assert b["ttft_s"]["mean"] < 0.7 * a["ttft_s"]["mean"] and b["ttft_s"]["p90"] < a["ttft_s"]["p90"]
    assert b["num_finished"] == a["num_finished"] == 240


@pytest.mark.parametrize("backend", ["native", "lmcache"])
def test_bytes_moved_are_blocks_moved_times_block_bytes(backend):
    result = run("cache.offload_size_gb=8", f"cache.offload_backend={backend}", "hardware.tp=2",
                 "hardware.num_gpu_blocks=2400")
    steps, o = result.steps, result.summary["offload"]
    block = bytes_per_block(get_model("Llama-3-8B"), 2, 16) * 2  # one block over the replica's two GPUs
    assert block == 16 * 131072  # 128 KiB a token in bf16
    assert (steps["offload_load_bytes"] == steps["num_offload_load_blocks"] * block).all()
    assert (steps["offload_store_bytes"] == steps["num_offload_store_blocks"] * block).all()
    assert o["load_bytes"] == o["num_load_blocks"] * block > 0
    assert o["store_bytes"] == o["num_store_blocks"] * block > 0
    # what was loaded is what the requests were served from the tier (first admissions; a recompute
    # after preemption loads again)
    assert o["num_load_blocks"] * 16 >= result.requests["num_cpu_cached_tokens"].sum() > 0


def test_a_slow_link_delays_native_loads_and_lmcache_steps():
    fast = run("cache.offload_size_gb=8", "cache.offload_bandwidth_gbps=50").summary
    slow = run("cache.offload_size_gb=8", "cache.offload_bandwidth_gbps=0.5").summary
    assert slow["ttft_s"]["mean"] > fast["ttft_s"]["mean"]
    lm_fast = run("cache.offload_size_gb=8", "cache.offload_backend=lmcache", "cache.offload_bandwidth_gbps=50")
    lm_slow = run("cache.offload_size_gb=8", "cache.offload_backend=lmcache", "cache.offload_bandwidth_gbps=0.5")

    def copy_step_time(result):  # lmcache's copies are on the step's path
        steps = result.steps
        return steps["duration"][steps["num_offload_load_blocks"] + steps["num_offload_store_blocks"] > 0].mean()

    assert copy_step_time(lm_slow) > 2 * copy_step_time(lm_fast)


def test_offload_settings_are_checked():
    with pytest.raises(ConfigError, match=r"^cache\.offload_backend"):
        load_config(SHARED_PREFIX, ["cache.offload_backend=disk"])
    with pytest.raises(ConfigError, match=r"^cache\.offload_size_gb: the CPU tier is a prefix cache"):
        run("cache.offload_size_gb=8", "scheduler.policy=chunked")
    with pytest.raises(ConfigError, match=r"^cache\.offload_bandwidth_gbps"):
        load_config(SHARED_PREFIX, ["cache.offload_bandwidth_gbps=0"])

"""The engine a servesim config describes (`calibrate.engine_config`): what it refuses, before building anything."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gpu_backend.kv_cache as kv_cache_module  # noqa: E402
from calibrate.engine_config import engine_config_from_sim  # noqa: E402
from policies import ConfigError  # noqa: E402
from sim.config import load_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "examples" / "tiny-llama" / "config.json"
BLOCK_BYTES = 2 * 4 * 2 * 32 * 16 * 4  # K and V x 4 layers x 2 KV heads x head dim 32 x 16 tokens x float32


def make_config(model: dict | None = None, **sections):
    """The tiny Llama's engine config, float32, 64 KV blocks, with `model` keys and whole sections added."""
    tables = {"model": {"name": str(TINY), "dtype": "float32", **(model or {})},
              "hardware": {"num_gpu_blocks": 64, **sections.pop("hardware", {})}, **sections}
    return load_config(tables)


@pytest.mark.parametrize("model, hardware, field", [
    ({"dtype": "fp8"}, {}, "model.dtype"),
    ({"dtype": "w4a16"}, {}, "model.dtype"),
    ({"kv_cache_dtype": "fp8"}, {}, "model.kv_cache_dtype"),
    ({"kv_cache_dtype": "bfloat16"}, {}, "model.kv_cache_dtype"),  # float32 weights: float32 KV
    ({}, {"tp": 2}, "hardware.tp"),
])
def test_settings_the_engine_would_not_run_are_refused(model, hardware, field):
    with pytest.raises(ConfigError, match=rf"^{field}: the engine "):
        engine_config_from_sim(make_config(model, hardware=hardware), "cpu")


def test_a_client_timeout_the_replay_would_not_apply_is_refused():
    """The engine's replay waits for every answer: a config with request_timeout_s ran every request to
    its end (e2e 9.2 s against a 0.05 s timeout) and wrote the timeout into config.toml as if applied."""
    with pytest.raises(ConfigError, match=r"^workload.request_timeout_s: the engine's workload replay has no client"):
        engine_config_from_sim(make_config(workload={"request_timeout_s": 0.05}), "cpu")


def test_async_scheduling_the_engine_would_not_apply_is_refused():
    """The engine plans a step only after the one before has ended: with async_scheduling = true it ran
    synchronously (an arrival during step n in step n+1, where the simulator holds it to step n+2) and
    wrote the setting into config.toml as if applied."""
    with pytest.raises(ConfigError, match=r"^scheduler.async_scheduling: the engine plans each step after"):
        engine_config_from_sim(make_config(scheduler={"async_scheduling": True}), "cpu")


def test_what_the_engine_runs_as_written_is_accepted():
    engine_config, _ = engine_config_from_sim(make_config(), "cpu")
    assert engine_config.dtype == "float32"
    engine_config, toml = engine_config_from_sim(make_config({"dtype": "bfloat16", "kv_cache_dtype": "bfloat16"}), "cpu")
    assert engine_config.dtype == "bfloat16" and 'kv_cache_dtype = "bfloat16"' in toml


def test_kv_blocks_beyond_the_memory_free_are_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(kv_cache_module, "available_memory", lambda device: 2**30)  # 1 GiB: 32768 blocks
    engine_config, _ = engine_config_from_sim(make_config(hardware={"num_gpu_blocks": 2**30 // BLOCK_BYTES}), "cpu")
    assert engine_config.cache.num_gpu_blocks == 32768
    with pytest.raises(ConfigError, match=r"^hardware.num_gpu_blocks: 10000000 KV blocks of 32768 bytes need "
                                          r"327680000000 bytes \(305.2 GiB\) but cpu memory has 1073741824 bytes "
                                          r"\(1.0 GiB\) available; at most 32768 fit$"):
        engine_config_from_sim(make_config(hardware={"num_gpu_blocks": 10_000_000}), "cpu")
    # on a CPU device the swap space shares host memory with the KV cache
    with pytest.raises(ConfigError, match=r"^hardware.swap_space_gb: 32768 KV blocks of 32768 bytes need 1073741824 "
                                          r"bytes \(1.0 GiB\) of host memory but 1065353216 bytes \(1.0 GiB\) are "
                                          r"available beside the KV cache$"):
        engine_config_from_sim(make_config(hardware={"num_gpu_blocks": 256, "swap_space_gb": 1.0}), "cpu")
    with pytest.raises(ConfigError, match=r"^cache.offload_size_gb: 32768 KV blocks of 32768 bytes need .* but "
                                          r"528482304 bytes \(0.5 GiB\) are available beside the KV cache and the "
                                          r"swap space$"):
        engine_config_from_sim(make_config(hardware={"num_gpu_blocks": 256, "swap_space_gb": 0.5},
                                           cache={"offload_size_gb": 1.0}), "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch sees a CUDA device")
def test_cuda_without_a_cuda_device_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^--device: cuda was asked for but torch sees no CUDA device; choose one "
                                          r"of cpu$"):
        engine_config_from_sim(make_config(), "cuda")

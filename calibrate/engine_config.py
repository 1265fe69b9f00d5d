"""The engine a servesim config describes: a `sim.config.Config` as the engine's `EngineConfig`.

One TOML file drives both executors; this is where its sections meet the engine. It sits in
`calibrate` (the layer that sees both worlds) so that `gpu_backend` never imports the simulator.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from gpu_backend.engine import DTYPES, Engine, EngineConfig, check_device, resolve_dtype
from gpu_backend.kv_cache import KVCache, check_memory
from gpu_backend.model_config import ModelConfig
from policies import CacheConfig, ConfigError, SpeculativeConfig
from sim.cluster.layout import cluster_section, is_disaggregated
from sim.config import config_to_toml


def engine_config_from_sim(config, device: str | torch.device = "cpu") -> tuple[EngineConfig, str]:
    """An `EngineConfig` (and the config's TOML) from a `sim.config.Config`.

    The model section must name a HF config.json (file or folder); safetensors beside it are loaded,
    else weights are seeded random. KV blocks: `hardware.num_gpu_blocks`, else what fits the device;
    CPU swap blocks from `hardware.swap_space_gb`; KV offload-tier blocks from `cache.offload_size_gb`;
    all of them checked against the memory the device and host have free
    (`gpu_backend.kv_cache.check_memory`).
    Settings the engine cannot run (`check_engine_settings`) are refused, not run as something else.
    """
    device = check_device(device)
    if is_disaggregated(config):
        raise ConfigError("disaggregation.enabled: the engine serves one replica; simulate prefill/decode "
                          "pools with `servesim simulate`")
    cluster = cluster_section(config)
    if cluster.num_replicas > 1:
        raise ConfigError(f"cluster.num_replicas: the engine serves one replica, got {cluster.num_replicas}; "
                          "simulate several with `servesim simulate`")
    path = Path(config.model.name)
    if not (path.suffix == ".json" or path.is_dir()):
        raise ConfigError(f"model.name: the engine needs a HF config.json path (e.g. examples/tiny-llama/config.json), "
                          f"got catalog name {config.model.name!r}")
    torch_dtype = check_engine_settings(config, device)
    model_config = ModelConfig.from_json(path)
    folder = path if path.is_dir() else path.parent
    weights = str(folder) if any(folder.glob("*.safetensors")) else None
    block_size = config.cache.block_size
    num_gpu_blocks = config.hardware.num_gpu_blocks or KVCache.default_num_blocks(
        model_config, block_size, torch_dtype, device)
    block_bytes = model_config.kv_bytes_per_token(torch.tensor([], dtype=torch_dtype).element_size()) * block_size
    num_cpu_blocks = int(config.hardware.swap_space_gb * 2**30) // block_bytes
    # the KV offload tier: real host blocks, real copies (their time is measured, not modelled)
    offload = {}
    if config.cache.offload_size_gb:
        offload = {"num_offload_blocks": int(config.cache.offload_size_gb * 2**30) // block_bytes,
                   "offload_backend": config.cache.offload_backend, "offload_block_bytes": block_bytes}
    check_memory(device, block_bytes, num_gpu_blocks, num_cpu_blocks, offload.get("num_offload_blocks", 0))
    cache = CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks,
                        watermark=config.cache.watermark, enable_prefix_caching=config.cache.enable_prefix_caching,
                        **offload)
    engine_config = EngineConfig(model=model_config, scheduler=config.scheduler, cache=cache, weights=weights,
                                 dtype=config.model.dtype, seed=getattr(config.workload, "seed", 0) or 0,
                                 slo=config.slo, max_time_s=config.sim.max_sim_time_s,
                                 speculative=getattr(config, "speculative", None) or SpeculativeConfig())
    return engine_config, config_to_toml(config)


def check_engine_settings(config, device: torch.device) -> torch.dtype:
    """The dtype the engine runs `config` in on `device`, refusing what it would not run as written:
    quantized weights (its GEMMs are 16/32-bit), a KV cache in another dtype than the weights (its KV
    tensors take the model's), tensor parallelism (it runs one device), a client timeout (its replay
    waits for every answer), async scheduling (it plans each step after the last one ended). Running
    something else in their place would leave results and a config.toml that claim settings which
    never ran; `servesim simulate` models them."""
    if config.model.dtype not in DTYPES:
        raise ConfigError(f"model.dtype: the engine runs float32, float16 or bfloat16 weights (auto: float32 on "
                          f"CPU, bfloat16 on CUDA), got {config.model.dtype!r}; simulate quantized weights with "
                          "`servesim simulate`")
    dtype = resolve_dtype(config.model.dtype, device)
    ran = str(dtype).removeprefix("torch.")
    if config.model.kv_cache_dtype not in ("auto", ran):
        raise ConfigError(f"model.kv_cache_dtype: the engine keeps the KV cache in the weights' dtype ({ran} here), "
                          f"got {config.model.kv_cache_dtype!r}; set auto, or simulate it with `servesim simulate`")
    if config.hardware.tp != 1:
        raise ConfigError(f"hardware.tp: the engine runs the model on one device (tp 1), got {config.hardware.tp}; "
                          "simulate tensor parallelism with `servesim simulate`")
    if config.scheduler.async_scheduling:  # the simulator would hold each arrival a step longer
        raise ConfigError("scheduler.async_scheduling: the engine plans each step after the one before has ended "
                          "(an arrival during step n joins step n+1); set it false, or simulate vLLM's "
                          "--async-scheduling with `servesim simulate`")
    timeout = getattr(config.workload, "request_timeout_s", None)
    if timeout is not None:  # the replay's client waits for every answer: it would run them all to the end
        raise ConfigError(f"workload.request_timeout_s: the engine's workload replay has no client that gives up "
                          f"(got {timeout:g} s); leave it unset, or simulate client timeouts with `servesim simulate`")
    return dtype


def build_engine(config, device: str | torch.device = "cpu", model=None, clock: str = "wall") -> Engine:
    """An `Engine` for a servesim config (its TOML kept for the results), on `model` when given, with
    the engine clock `clock` (`gpu_backend.clock`)."""
    return engine_for(*engine_config_from_sim(config, device), device, model, clock)


def engine_for(engine_config: EngineConfig, config_toml: str, device: str | torch.device = "cpu", model=None,
               clock: str = "wall") -> Engine:
    """`build_engine` from its `engine_config_from_sim` pair, for a caller that checks the engine
    config before the model's weights load."""
    if clock != engine_config.clock:
        engine_config = dataclasses.replace(engine_config, clock=clock)
    engine = Engine(engine_config, device, model=model)
    engine.config_toml = config_toml
    return engine

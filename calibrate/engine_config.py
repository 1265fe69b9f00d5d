"""The engine a servesim config describes: a `sim.config.Config` as the engine's `EngineConfig`.

One TOML file drives both executors; this is where its sections meet the engine. It sits in
`calibrate` (the layer that sees both worlds) so that `gpu_backend` never imports the simulator.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from gpu_backend.engine import DTYPES, Engine, EngineConfig, resolve_dtype
from gpu_backend.kv_cache import KVCache
from gpu_backend.model_config import ModelConfig
from policies import CacheConfig, ConfigError, SpeculativeConfig
from sim.cluster.layout import cluster_section, is_disaggregated
from sim.config import config_to_toml


def engine_config_from_sim(config, device: str | torch.device = "cpu") -> tuple[EngineConfig, str]:
    """An `EngineConfig` (and the config's TOML) from a `sim.config.Config`.

    The model section must name a HF config.json (file or folder); safetensors beside it are loaded,
    else weights are seeded random. KV blocks: `hardware.num_gpu_blocks`, else what fits the device;
    CPU swap blocks from `hardware.swap_space_gb`; KV offload-tier blocks from `cache.offload_size_gb`.
    """
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
    model_config = ModelConfig.from_json(path)
    folder = path if path.is_dir() else path.parent
    weights = str(folder) if any(folder.glob("*.safetensors")) else None
    dtype = config.model.dtype if config.model.dtype in DTYPES else "auto"
    torch_dtype = resolve_dtype(dtype, device)
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
    cache = CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks,
                        watermark=config.cache.watermark, enable_prefix_caching=config.cache.enable_prefix_caching,
                        **offload)
    engine_config = EngineConfig(model=model_config, scheduler=config.scheduler, cache=cache, weights=weights,
                                 dtype=dtype, seed=getattr(config.workload, "seed", 0) or 0, slo=config.slo,
                                 max_time_s=config.sim.max_sim_time_s,
                                 speculative=getattr(config, "speculative", None) or SpeculativeConfig())
    return engine_config, config_to_toml(config)


def build_engine(config, device: str | torch.device = "cpu", model=None, clock: str = "wall") -> Engine:
    """An `Engine` for a servesim config (its TOML kept for the results), on `model` when given, with
    the engine clock `clock` (`gpu_backend.clock`)."""
    engine_config, config_toml = engine_config_from_sim(config, device)
    if clock != engine_config.clock:
        engine_config = dataclasses.replace(engine_config, clock=clock)
    engine = Engine(engine_config, device, model=model)
    engine.config_toml = config_toml
    return engine

"""Model and GPU catalogs, the `model`/`hardware` config sections, and KV memory arithmetic."""
from specs.gpu_spec import GPUS, GPUSpec, get_gpu, gpu_names
from specs.hardware import HardwareConfig, ModelConfig, check_parallelism
from specs.memory import (
    activation_reserve_bytes, bytes_per_block, kv_bytes_per_token, kv_cache_bytes, num_cpu_blocks,
    num_gpu_blocks, profiling_reserve_bytes, v0_activation_reserve_bytes, weight_bytes_per_gpu,
)
from specs.model_catalog import MODELS, get_model, model_names
from specs.model_spec import ModelSpec

__all__ = [
    "GPUS", "GPUSpec", "get_gpu", "gpu_names", "HardwareConfig", "ModelConfig", "check_parallelism",
    "activation_reserve_bytes", "bytes_per_block", "kv_bytes_per_token", "kv_cache_bytes", "num_cpu_blocks",
    "num_gpu_blocks", "profiling_reserve_bytes", "v0_activation_reserve_bytes", "weight_bytes_per_gpu", "MODELS", "get_model", "model_names", "ModelSpec",
]

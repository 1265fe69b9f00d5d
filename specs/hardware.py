"""The `model` and `hardware` config sections (frozen, validated on construction).

`ModelConfig` names a catalog model (or a HF `config.json`) and its dtype; `HardwareConfig` names the
GPU, the tensor-parallel degree, the KV memory knobs and which latency model to use.
"""
from __future__ import annotations

from dataclasses import dataclass

from policies.config import ConfigError, check_choice, check_int, check_number
from specs.gpu_spec import GPUSpec, get_gpu
from specs.model_catalog import get_model
from specs.model_spec import DTYPE_BYTES, ModelSpec

# engine generations whose profiling sizes the KV pool (specs.memory); "v0-peak": vLLM <= 0.2.4
MEMORY_PROFILES = ("v1", "v0", "v0-peak")

DTYPES = ("auto", "float16", "bfloat16", "float32", "fp8", "w4a16", "w8a16")
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8")
TP_SIZES = (1, 2, 4, 8)
LATENCY_MODELS = ("roofline", "profiled")


# the block pool is a list of free blocks (~55 bytes each in the simulator): 10^7 of them hold ten
# times the KV tokens of a 1B model on a 141 GB H200 at block size 1, and take ~0.6 GB of RAM
MAX_GPU_BLOCKS = 10**7

@dataclass(frozen=True)
class ModelConfig:
    """Which model is served: a catalog name (case-insensitive) or a HF config.json path, and dtypes."""

    name: str = "Llama-2-7B"
    dtype: str = "auto"  # weights; "auto" = the catalog's (16-bit) or the config.json's (its torch_dtype or
    # quantization); fp8, or w4a16 / w8a16: 4- or 8-bit integer weights over 16-bit activations (AWQ, GPTQ)
    kv_cache_dtype: str = "auto"  # "auto" = same as the weights

    def __post_init__(self) -> None:
        check_choice("model.dtype", self.dtype, DTYPES)
        check_choice("model.kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        get_model(self.name)  # fail early on an unknown name

    def spec(self) -> ModelSpec:
        """The model's dimensions with this section's dtypes applied."""
        return get_model(self.name).with_dtype(self.dtype, self.kv_cache_dtype)


@dataclass(frozen=True)
class HardwareConfig:
    """The serving hardware of one replica: `tp` GPUs of one kind, and how their memory is used.

    `num_gpu_blocks` overrides the block count derived from memory (see `specs.memory`).
    `swap_space_gb` is CPU swap per GPU in GiB (vLLM's `swap_space`); 0 = no swapping.
    `pcie_bandwidth_gbps` overrides the GPU's host link (GB/s per direction) for swap copies.
    `latency` picks the step-time model: "roofline" (datasheet) or "profiled" (needs `profile`).
    `enforce_eager` (vLLM's flag) models an engine without CUDA graphs.
    `memory_profiling` is the engine generation whose profiling sizes the KV pool: "v1" (vLLM >= 0.8's
    engine), "v0" (vLLM 0.2.5-0.4: profiles sampling of every sequence, counts all device memory in
    use) or "v0-peak" (vLLM <= 0.2.4: the same profiling, torch's peak allocation only; `specs.memory`).
    `ep` spreads a MoE model's routed experts over `ep` expert-parallel groups (1 = every expert
    sharded over the `tp` GPUs). With ep <= tp (ep divides tp) the replica's tp GPUs form ep groups,
    each holding E/ep experts sharded tp/ep ways (SGLang's moe_tp = tp/ep). With ep > tp (tp divides
    ep) the experts span ep GPUs: this replica and ep/tp - 1 more data-parallel engines like it
    (vLLM's data_parallel_size x tp with enable_expert_parallel), each GPU holding E/ep whole experts
    and serving every engine's tokens. Tokens reach their experts by an all-to-all over the GPUs'
    link (NVLink, else PCIe); see `sim.latency.roofline`.
    """

    gpu: str = "H100-SXM"
    tp: int = 1
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    swap_space_gb: float = 0.0
    pcie_bandwidth_gbps: float | None = None
    latency: str = "roofline"
    profile: str | None = None
    price_per_hour: float | None = None  # USD per GPU-hour; None = the catalog's rough price
    enforce_eager: bool = False  # vLLM's flag: no CUDA graphs (the roofline adds per-layer launch costs)
    ep: int = 1  # expert-parallel degree of a MoE model (see the class docstring)
    ep_link_bandwidth_gbps: float | None = None  # the all-to-all's GB/s per GPU per direction (None: see roofline)
    memory_profiling: str = "v1"  # "v1", "v0" or "v0-peak": whose profiling rule sizes the KV pool

    def __post_init__(self) -> None:
        get_gpu(self.gpu)  # fail early on an unknown GPU
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp not in TP_SIZES:
            raise ConfigError(f"hardware.tp: {self.tp!r} is not allowed; choose one of 1, 2, 4, 8")
        check_int("hardware.ep", self.ep, 1)
        if self.ep % self.tp and self.tp % self.ep:
            raise ConfigError(f"hardware.ep: {self.ep} must divide hardware.tp = {self.tp} or be a multiple of it")
        if self.ep_link_bandwidth_gbps is not None:
            check_number("hardware.ep_link_bandwidth_gbps", self.ep_link_bandwidth_gbps, 0.0, strict_min=True)
        check_int("hardware.num_gpu_blocks", self.num_gpu_blocks, 1, allow_none=True, maximum=MAX_GPU_BLOCKS)
        check_number("hardware.gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, strict_min=True)
        check_number("hardware.swap_space_gb", self.swap_space_gb, 0.0)
        if self.pcie_bandwidth_gbps is not None:
            check_number("hardware.pcie_bandwidth_gbps", self.pcie_bandwidth_gbps, 0.0, strict_min=True)
        check_choice("hardware.latency", self.latency, LATENCY_MODELS)
        check_choice("hardware.memory_profiling", self.memory_profiling, MEMORY_PROFILES)
        if self.latency == "profiled" and not self.profile:
            raise ConfigError("hardware.profile: required when hardware.latency = 'profiled' (a profile file path)")
        if self.price_per_hour is not None:
            check_number("hardware.price_per_hour", self.price_per_hour, 0.0)
        if not isinstance(self.enforce_eager, bool):
            raise ConfigError(f"hardware.enforce_eager: expected true or false, got {self.enforce_eager!r}")

    def gpu_spec(self) -> GPUSpec:
        return get_gpu(self.gpu)

    @property
    def pcie_bandwidth(self) -> float:
        """Host link bytes/s per direction (the override, else the GPU's)."""
        if self.pcie_bandwidth_gbps is not None:
            return self.pcie_bandwidth_gbps * 1e9
        return self.gpu_spec().pcie_bandwidth

    @property
    def cost_per_hour(self) -> float:
        """USD per replica-hour (all `tp` GPUs)."""
        price = self.price_per_hour if self.price_per_hour is not None else self.gpu_spec().price_per_hour
        return price * self.tp


def check_parallelism(model: ModelSpec, tp: int, ep: int = 1) -> None:
    """TP shards attention heads (and MLP columns): `tp` must divide the head count and the MLP width.

    KV heads fewer than `tp` are replicated, as vLLM does, so they need not be divisible. Expert
    parallelism needs a MoE model whose routed experts `ep` divides, and experts sharded tp/ep ways.
    """
    if ep > 1:
        if not model.is_moe:
            raise ConfigError(f"hardware.ep: {ep} needs a mixture-of-experts model; {model.name} is dense (set 1)")
        if model.num_experts % ep:
            raise ConfigError(f"hardware.ep: {ep} does not divide {model.name}'s {model.num_experts} routed experts")
    moe_tp = max(1, tp // ep)
    if model.is_moe and model.moe_intermediate_size % moe_tp:
        raise ConfigError(f"hardware.tp: {tp} (experts sharded {moe_tp} ways) does not divide {model.name}'s "
                          f"moe_intermediate_size={model.moe_intermediate_size}")
    if model.num_attention_heads % tp:
        raise ConfigError(f"hardware.tp: {tp} does not divide {model.name}'s num_attention_heads="
                          f"{model.num_attention_heads}; choose a divisor among 1, 2, 4, 8")
    if model.intermediate_size % tp:
        raise ConfigError(f"hardware.tp: {tp} does not divide {model.name}'s intermediate_size="
                          f"{model.intermediate_size}")
    if not model.is_mla and model.num_kv_heads > tp and model.num_kv_heads % tp:
        raise ConfigError(f"hardware.tp: {tp} does not divide {model.name}'s num_kv_heads={model.num_kv_heads}")


__all__ = ["ModelConfig", "HardwareConfig", "check_parallelism", "DTYPE_BYTES"]

"""KV cache memory: bytes per token and per block, weight bytes, and how many blocks fit.

Everything is PER GPU: with tensor parallelism each GPU holds 1/tp of the weights and of the KV
heads (fewer KV heads than tp are replicated, as in vLLM); a "block" is the per-GPU shard of
`block_size` tokens' K and V, and the block COUNT is the same on every GPU of a replica. MLA caches
one unsharded latent per token (`kv_lora_rank + qk_rope_head_dim` per layer, on every rank); MoE
routed experts spread over max(tp, ep) GPUs (`hardware.ep`). GPU blocks follow vLLM's rule::

    kv_bytes = memory_bytes x gpu_memory_utilization - weight_bytes - activation_reserve

with the reserve of the engine generation's profiling (`hardware.memory_profiling`): vLLM v1's
(`activation_reserve_bytes`, checked against vLLM 0.11/0.19 logs in tests/specs/test_memory.py) or
vLLM v0's (`v0_activation_reserve_bytes`: 0.2-0.4, early 2024, which samples every profiled
sequence and counts all memory in use on the device; a worked example in the same tests), or
vLLM <= 0.2.4's (`"v0-peak"`: the same profiling run, but only torch's peak allocation is counted).
"""
from __future__ import annotations

from policies.config import ConfigError
from specs.hardware import MEMORY_PROFILES, HardwareConfig, check_parallelism
from specs.model_spec import ModelSpec, kv_bytes, mla_kv_bytes

GiB = 2**30
NON_TORCH_BYTES = int(0.25 * GiB)  # CUDA context leftovers + NCCL/all-reduce buffers + graph pool
ACT_HIDDEN_BUFFERS = 6  # hidden-size activation buffers alive at the MLP peak (see module doc)
# what vLLM v0's `total - free` counts beyond the allocator: the CUDA context of the worker process
# (CUDA 12 lazy module loading) and NCCL's buffers of its one-rank group. Not measured here: the
# PyTorch forum's figure for a first CUDA call is 0.3-0.7 GiB (more without lazy loading); a GPU
# check can measure it (`torch.cuda.mem_get_info` before any allocation)
V0_NON_TORCH_BYTES = int(0.5 * GiB)
# bytes per (sequence, vocab) entry alive at the peak of v0's sampler for top-k/top-p (which its
# profiling requests): the logits, their sorted copy, softmax and cumsum, the re-gathered logits
# (5 in the activations' dtype), the sort's indices and their inverse (int64), two boolean masks
V0_SAMPLER_INT_BYTES = 2 * 8 + 2 * 1
V0_SAMPLER_ACT_COPIES = 5


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token(model: ModelSpec, tp: int = 1) -> int:
    """KV cache bytes of one token of a `ModelSpec` (its KV cache dtype) on one of `tp` GPUs."""
    if model.is_mla:
        return mla_kv_bytes(model.num_layers, model.kv_lora_rank, model.qk_rope_head_dim, model.kv_dtype_bytes)
    return kv_bytes(model.num_layers, model.num_kv_heads, model.head_dim, model.kv_dtype_bytes, tp)


def bytes_per_block(model: ModelSpec, tp: int, block_size: int) -> int:
    """One KV block's bytes on one GPU (what a swap copies per GPU, in parallel on each GPU's link)."""
    return block_size * kv_bytes_per_token(model, tp)


def routed_expert_params(model: ModelSpec) -> int:
    """All routed experts' weights (0 for a dense model)."""
    return model.num_moe_layers * model.num_experts * model.expert_params


def weight_bytes_per_gpu(model: ModelSpec, tp: int, ep: int = 1, extra_params: int = 0) -> int:
    """Weights one GPU holds: the sharded matrices / tp, the routed experts / max(tp, ep); norms (and
    biases) and MLA's down-projections replicated, at `ModelSpec.weight_element_bytes`; vocab sharded,
    the embedding and LM head at the activations' precision (`ModelSpec.weight_bytes`: vLLM leaves
    them unquantized).
    `extra_params`: more weights sharded the same way (a speculative proposer's: the MTP module)."""
    replicated = (model.num_layers * (model.norm_params_per_layer + model.mla_replicated_params)
                  + model.hidden_size * (2 if model.bias else 1))
    routed = routed_expert_params(model)
    vocab = model.vocab_params
    sharded = model.num_params + extra_params - replicated - routed - vocab
    return (round((sharded // tp + routed // max(tp, ep) + replicated) * model.weight_element_bytes)
            + vocab // tp * model.act_dtype_bytes)


def activation_reserve_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int = 2048,
                             max_num_seqs: int = 256) -> int:
    """Memory vLLM's profiling run keeps away from the KV cache: what its profiling forward measures.

    * peak activations of one forward over `max_num_batched_tokens` tokens: the MLP's gate/up output
      and activation (3 x intermediate / tp per token) and a few hidden-size buffers (residual, norm
      output, QKV and attention output: ~6 x hidden), in the weights' dtype;
    * the sampler's float32 logits for `max_num_seqs` sequences (x2: logits and probabilities);
    * a fixed non-torch allowance (CUDA context allocations, NCCL/custom all-reduce buffers, CUDA
      graph pools): `NON_TORCH_BYTES`.
    """
    act, h = model.act_dtype_bytes, model.hidden_size
    per_token = (3 * model.intermediate_size // tp + ACT_HIDDEN_BUFFERS * h) * act
    if model.is_moe:  # the experts' gate/up outputs for the k routed (+ shared) experts of a token
        moe = (3 * model.moe_intermediate_size // tp + ACT_HIDDEN_BUFFERS * h) * act
        moe *= model.num_experts_per_tok + model.num_shared_experts
        per_token = max(moe, per_token) if model.num_dense_layers else moe
    logits = 2 * max_num_seqs * model.vocab_size * 4 // tp
    return max_num_batched_tokens * per_token + logits + NON_TORCH_BYTES


def v0_activation_reserve_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int = 2048,
                                max_num_seqs: int = 256, non_torch: bool = True) -> int:
    """Memory vLLM v0 (0.2-0.4, `Worker.profile_num_available_blocks`) keeps away from the KV cache.

    v0 runs one forward of `max_num_batched_tokens` tokens split over `max_num_seqs` prompts, samples
    every prompt's next token with top-k/top-p (`ModelRunner.profile_run`), then counts `total -
    free` from `torch.cuda.mem_get_info`: the weights, what the caching allocator kept reserved
    (its peak: the forward's or the sampler's, one after the other) and all non-torch memory:

    * the forward's peak: the MLP's up-projection output and its activation (2 x intermediate for a
      plain MLP, 3 x for a gated one, / tp) and `ACT_HIDDEN_BUFFERS` hidden-size buffers per token;
    * the sampler's: the final hidden states of all tokens, plus per (sequence, vocab) entry
      `V0_SAMPLER_ACT_COPIES` tensors in the activations' dtype and `V0_SAMPLER_INT_BYTES` (the
      logits are gathered whole on the driver rank, whose count the engine takes: vocab not / tp);
      the fp32 probabilities and log-probabilities that follow need less (4 + 4 + two fp32 copies);
    * `V0_NON_TORCH_BYTES`: the CUDA context and NCCL buffers `total - free` counts; not with
      `non_torch=False`, vLLM <= 0.2.4's rule (v0.2.3 `Worker.profile_num_available_blocks`:
      `total_memory x utilization - torch.cuda.max_memory_allocated()`, with `total_memory` from
      `get_device_properties`; `mem_get_info` came with vllm-project/vllm#2031, 2023-12-12, in 0.2.5).
    CUDA graphs are captured after the cache is allocated in v0, so they reserve nothing here.
    """
    act, h = model.act_dtype_bytes, model.hidden_size
    per_token = (model.num_mlp_matrices * model.intermediate_size // tp + ACT_HIDDEN_BUFFERS * h) * act
    if model.is_moe:  # the experts' up-projection outputs for the k routed (+ shared) experts of a token
        moe = (model.num_mlp_matrices * model.moe_intermediate_size // tp + ACT_HIDDEN_BUFFERS * h) * act
        moe *= model.num_experts_per_tok + model.num_shared_experts
        per_token = max(moe, per_token) if model.num_dense_layers else moe
    forward = max_num_batched_tokens * per_token
    per_entry = V0_SAMPLER_ACT_COPIES * act + V0_SAMPLER_INT_BYTES
    sampler = max_num_batched_tokens * h * act + max_num_seqs * model.vocab_size * per_entry
    return max(forward, sampler) + (V0_NON_TORCH_BYTES if non_torch else 0)


def profiling_reserve_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int = 2048, max_num_seqs: int = 256,
                            profiling: str = "v1") -> int:
    """The reserve of the engine generation's profiling: "v1" (`activation_reserve_bytes`), "v0" or
    "v0-peak" (`v0_activation_reserve_bytes`, with and without the non-torch memory)."""
    if profiling in ("v0", "v0-peak"):
        return v0_activation_reserve_bytes(model, tp, max_num_batched_tokens, max_num_seqs,
                                           non_torch=profiling == "v0")
    if profiling != "v1":
        raise ConfigError(f"hardware.memory_profiling: {profiling!r} is not allowed; choose one of "
                          f"{', '.join(MEMORY_PROFILES)}")
    return activation_reserve_bytes(model, tp, max_num_batched_tokens, max_num_seqs)


def kv_cache_bytes(model: ModelSpec, hardware: HardwareConfig, max_num_batched_tokens: int = 2048,
                   max_num_seqs: int = 256, extra_params: int = 0) -> int:
    """Bytes per GPU left for the KV cache; a clear error when the weights do not fit.
    `extra_params`: weights served beside the model (a speculative proposer's)."""
    ep = getattr(hardware, "ep", 1)
    check_parallelism(model, hardware.tp, ep)
    gpu = hardware.gpu_spec()
    budget = gpu.memory_bytes * hardware.gpu_memory_utilization
    weights = weight_bytes_per_gpu(model, hardware.tp, ep, extra_params)
    reserve = profiling_reserve_bytes(model, hardware.tp, max_num_batched_tokens, max_num_seqs,
                                      getattr(hardware, "memory_profiling", "v1"))
    free = budget - weights - reserve
    if free <= 0:
        raise ConfigError(
            f"hardware.tp: {model.name} needs {weights / GiB:.1f} GiB of weights + {reserve / GiB:.1f} GiB of "
            f"activations per GPU at tp={hardware.tp}, but {gpu.name} x gpu_memory_utilization="
            f"{hardware.gpu_memory_utilization} gives {budget / GiB:.1f} GiB; raise hardware.tp, pick a larger "
            "hardware.gpu or a smaller model.name"
        )
    return int(free)


def num_gpu_blocks(model: ModelSpec, hardware: HardwareConfig, block_size: int = 16,
                   max_num_batched_tokens: int = 2048, max_num_seqs: int = 256, extra_params: int = 0) -> int:
    """KV blocks per GPU: `hardware.num_gpu_blocks` when given, else what fits in memory."""
    if hardware.num_gpu_blocks is not None:
        check_parallelism(model, hardware.tp, getattr(hardware, "ep", 1))
        return hardware.num_gpu_blocks
    free = kv_cache_bytes(model, hardware, max_num_batched_tokens, max_num_seqs, extra_params)
    blocks = free // bytes_per_block(model, hardware.tp, block_size)
    if blocks < 1:
        raise ConfigError(f"hardware.gpu_memory_utilization: leaves no room for one KV block of {model.name} "
                          f"on {hardware.gpu}")
    return int(blocks)


def num_cpu_blocks(model: ModelSpec, hardware: HardwareConfig, block_size: int = 16) -> int:
    """CPU swap blocks: `swap_space_gb` GiB per GPU divided by one block's per-GPU bytes."""
    return int(hardware.swap_space_gb * GiB // bytes_per_block(model, hardware.tp, block_size))

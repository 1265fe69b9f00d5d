"""On a CUDA GPU: the flash-attn path and the torch path give the same tokens (run when a GPU is lent).

float32 weights keep argmax ties out of the comparison; bf16 runs check agreement of the attention
outputs within dtype tolerance instead.
"""
import math

import pytest
import torch

from engine_factories import make_plan, make_prompt, make_request
from gpu_backend.attention import flash_available
from gpu_backend.engine import Engine, EngineConfig
from gpu_backend.input_batch import build_input_batch
from policies import CacheConfig, SchedulerConfig

pytestmark = pytest.mark.gpu

PROMPTS = [make_prompt(n, seed=300 + n) for n in (23, 5, 300, 17, 130, 64)]


def serve(model, backend: str, device: str, block_size: int, dtype: str = "float32") -> list[list[int]]:
    config = EngineConfig(model=model.config, dtype=dtype, attention_backend=backend,
                          scheduler=SchedulerConfig(policy="chunked", max_num_batched_tokens=96, max_model_len=512),
                          cache=CacheConfig(block_size=block_size, num_gpu_blocks=max(64, 4096 // block_size)))
    engine = Engine(config, device, model=model.to(device))
    reqs = [make_request(i, p, 16) for i, p in enumerate(PROMPTS)]
    for r in reqs:
        engine.add_request(r)
    engine.run_until_done()
    assert engine.scheduler.block_manager.num_used_gpu_blocks == 0
    return [r.output_token_ids for r in reqs]


def test_cuda_torch_path_matches_cpu(tiny_model):
    import copy

    cpu = serve(copy.deepcopy(tiny_model), "torch", "cpu", 16)
    assert serve(copy.deepcopy(tiny_model), "torch", "cuda", 16) == cpu


@pytest.mark.skipif(not flash_available(), reason="flash-attn is not installed")
@pytest.mark.parametrize("block_size", [16, 256])
def test_flash_and_torch_paths_give_the_same_tokens(tiny_model, block_size):
    import copy

    torch_tokens = serve(copy.deepcopy(tiny_model), "torch", "cuda", block_size)
    assert serve(copy.deepcopy(tiny_model), "flash", "cuda", block_size) == torch_tokens


@pytest.mark.skipif(not flash_available(), reason="flash-attn is not installed")
@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("shapes", [[(300, 300), (520, 1), (40, 17), (900, 1), (260, 100)],  # mixed: varlen
                                    [(520, 1), (33, 1), (900, 1)]])  # decode only: with_kvcache when paged
def test_flash_attention_outputs_match_torch_in_bf16(block_size, shapes):
    from gpu_backend.attention.flash_backend import FlashAttentionBackend
    from gpu_backend.attention.torch_backend import TorchAttentionBackend

    gen = torch.Generator().manual_seed(0)
    hq, hkv, d, num_blocks = 8, 2, 64, 64
    seqs, k_new, v_new, blocks = [], [], [], iter(torch.randperm(num_blocks, generator=gen).tolist())
    for i, (ctx, n) in enumerate(shapes):
        r = make_request(i, [3] * ctx, block_table=[next(blocks) for _ in range(math.ceil(ctx / block_size))])
        seqs.append((r, n, ctx - n, True))
    k_cache = torch.randn(num_blocks, block_size, hkv, d, generator=gen).to("cuda", torch.bfloat16)
    v_cache = torch.randn(num_blocks, block_size, hkv, d, generator=gen).to("cuda", torch.bfloat16)
    batch = build_input_batch(make_plan(*seqs), block_size, "cuda")
    T = batch.meta.num_tokens
    q = torch.randn(T, hq, d, generator=gen).to("cuda", torch.bfloat16)
    k = torch.randn(T, hkv, d, generator=gen).to("cuda", torch.bfloat16)
    v = torch.randn(T, hkv, d, generator=gen).to("cuda", torch.bfloat16)
    ref = TorchAttentionBackend().forward(q, k, v, k_cache.clone(), v_cache.clone(), batch.meta, d ** -0.5)
    out = FlashAttentionBackend().forward(q, k, v, k_cache.clone(), v_cache.clone(), batch.meta, d ** -0.5)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)

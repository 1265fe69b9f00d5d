"""The torch paged-attention backend against dense attention written out by hand."""
import math
import random

import pytest
import torch

from engine_factories import make_plan, make_request
from gpu_backend.attention import select_backend
from gpu_backend.attention.torch_backend import TorchAttentionBackend
from gpu_backend.input_batch import build_input_batch
from policies import ConfigError


def dense_reference(q, k_ctx, v_ctx, start):
    """q [n, Hq, D] at positions start.., k/v [ctx, Hkv, D]: softmax(q k^T / sqrt(D)) v, causal, GQA by repeat."""
    group = q.shape[1] // k_ctx.shape[1]
    k = k_ctx.repeat_interleave(group, dim=1)
    v = v_ctx.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k.double()) / math.sqrt(q.shape[-1])
    qpos = torch.arange(start, start + q.shape[0])[:, None]
    scores = scores.masked_fill(torch.arange(k.shape[0])[None, :] > qpos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.double()).float()


@pytest.mark.parametrize("seed", range(3))
def test_mixed_batch_matches_dense_attention(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    bs, num_blocks, hq, hkv, d = 4, 64, 4, 2, 8
    k_cache = torch.full((num_blocks, bs, hkv, d), float("nan"))  # stale slots are NaN: must never be read
    v_cache = torch.full((num_blocks, bs, hkv, d), float("nan"))
    free = list(range(num_blocks))
    rng.shuffle(free)
    seqs, history = [], {}
    for i in range(6):
        ctx = rng.randint(1, 30)
        n = 1 if i % 2 else rng.randint(1, ctx)  # decodes and prefill chunks (some with a cached prefix)
        r = make_request(i, [3] * ctx, block_table=[free.pop() for _ in range((ctx + bs - 1) // bs)])
        start = ctx - n
        k_all, v_all = torch.randn(ctx, hkv, d, generator=gen), torch.randn(ctx, hkv, d, generator=gen)
        for p in range(start):  # the cached prefix, written by "earlier steps"
            k_cache[r.block_table[p // bs], p % bs] = k_all[p]
            v_cache[r.block_table[p // bs], p % bs] = v_all[p]
        seqs.append((r, n, start, True))
        history[i] = (k_all, v_all, start)
    batch = build_input_batch(make_plan(*seqs), bs)
    T = batch.meta.num_tokens
    q = torch.randn(T, hq, d, generator=gen)
    k_new = torch.cat([history[i][0][history[i][2]:] for i in range(6)])
    v_new = torch.cat([history[i][1][history[i][2]:] for i in range(6)])
    out = TorchAttentionBackend().forward(q, k_new, v_new, k_cache, v_cache, batch.meta, 1 / math.sqrt(d))
    assert not out.isnan().any()
    cu = batch.meta.cu_seqlens_q_np
    for i in range(6):
        k_all, v_all, start = history[i]
        ref = dense_reference(q[cu[i]:cu[i + 1]], k_all, v_all, start)
        torch.testing.assert_close(out[cu[i]:cu[i + 1]], ref, rtol=1e-4, atol=1e-5)


def test_backend_selection():
    assert select_backend("cpu").name == "torch"
    with pytest.raises(ConfigError, match="^engine.attention_backend"):
        select_backend("cpu", "flash")
    with pytest.raises(ConfigError, match="^engine.attention_backend"):
        select_backend("cpu", "xformers")


def test_flash_key_slots_follow_the_block_tables():
    """The contiguous-gather index of the flash backend (block sizes FA2 cannot page), checked on CPU."""
    from gpu_backend.attention.flash_backend import FlashAttentionBackend

    bs = 4
    reqs = [make_request(0, [3] * 9, block_table=[7, 2, 5]), make_request(1, [3] * 4, block_table=[1]),
            make_request(2, [3] * 6, block_table=[0, 3])]
    batch = build_input_batch(make_plan((reqs[0], 2, 7, True), (reqs[1], 1, 3, True), (reqs[2], 6, 0, True)), bs)
    expected = [r.block_table[p // bs] * bs + p % bs for r in reqs for p in range(r.num_prompt_tokens)]
    assert FlashAttentionBackend.key_slots(batch.meta).tolist() == expected

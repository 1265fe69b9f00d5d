"""`TorchAttentionBackend`: paged attention in pure torch (CPU, or CUDA without flash-attn).

Decodes are batched: their blocks are gathered into a padded `[Bd, max_ctx, Hkv, D]` tensor, the
padding zeroed (stale slots may hold anything, even NaN) and masked, and one SDPA call serves them
all. Prefill chunks go one sequence at a time: gather the sequence's context by its block table,
then SDPA with a bottom-right causal mask (query i of a chunk starting at c sees keys j <= c + i).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """Scatter the new tokens' K/V into their slots: caches [N, B, Hkv, D], k/v [T, Hkv, D]."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)


class TorchAttentionBackend:
    """Gather-by-block-table + `scaled_dot_product_attention` (see module docstring)."""

    name = "torch"

    def forward(self, q, k, v, k_cache, v_cache, meta, scale: float) -> torch.Tensor:
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        out = torch.empty_like(q)  # [T, Hq, D]
        if meta.decode_token_idx.numel():
            out[meta.decode_token_idx] = self._decode(q[meta.decode_token_idx], k_cache, v_cache, meta, scale)
        bs = meta.block_size
        for i in meta.prefill_seq_idx_np.tolist():
            a, b = int(meta.cu_seqlens_q_np[i]), int(meta.cu_seqlens_q_np[i + 1])
            ctx = int(meta.seq_lens_np[i])
            blocks = meta.block_tables[i, : (ctx + bs - 1) // bs].long()
            ks = k_cache[blocks].flatten(0, 1)[:ctx]  # [ctx, Hkv, D]
            vs = v_cache[blocks].flatten(0, 1)[:ctx]
            qs = q[a:b]  # [n, Hq, D]
            start = ctx - (b - a)
            if start == 0:
                mask, causal = None, True
            else:  # bottom-right causal: query i sees keys j <= start + i
                qpos = torch.arange(start, ctx, device=q.device)[:, None]
                mask, causal = torch.arange(ctx, device=q.device)[None, :] <= qpos, False  # [n, ctx]
            o = F.scaled_dot_product_attention(
                qs.transpose(0, 1)[None], ks.transpose(0, 1)[None], vs.transpose(0, 1)[None],
                attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True)  # [1, Hq, n, D]
            out[a:b] = o[0].transpose(0, 1)
        return out

    @staticmethod
    def _decode(qd, k_cache, v_cache, meta, scale) -> torch.Tensor:
        # qd: [Bd, Hq, D]; one query per sequence, attending to its whole context
        idx = meta.decode_seq_idx
        seq_lens = meta.seq_lens[idx].long()  # [Bd]
        max_blocks = (int(meta.seq_lens_np[meta.query_lens_np == 1].max()) + meta.block_size - 1) // meta.block_size
        tables = meta.block_tables[idx, :max_blocks].long()  # [Bd, nb]
        kd = k_cache[tables].flatten(1, 2)  # [Bd, nb*B, Hkv, D]
        vd = v_cache[tables].flatten(1, 2)
        valid = torch.arange(kd.shape[1], device=qd.device)[None, :] < seq_lens[:, None]  # [Bd, L]
        # zero the slots past each context: masked scores of NaN garbage would still poison softmax
        kd = kd.masked_fill(~valid[:, :, None, None], 0)
        vd = vd.masked_fill(~valid[:, :, None, None], 0)
        o = F.scaled_dot_product_attention(
            qd[:, :, None, :], kd.transpose(1, 2), vd.transpose(1, 2),
            attn_mask=valid[:, None, None, :], scale=scale, enable_gqa=True)  # [Bd, Hq, 1, D]
        return o[:, :, 0, :]

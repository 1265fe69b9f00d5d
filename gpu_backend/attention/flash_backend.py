"""`FlashAttentionBackend`: flash-attn's varlen kernel over the paged cache (CUDA only).

One `flash_attn_varlen_func` call serves the whole ragged batch, prefill chunks and decodes alike
(causal masks are bottom-right aligned, so a chunk sees its cached prefix); a decode-only batch goes
to `flash_attn_with_kvcache`, the decode kernel (as nano-vllm does). FA2 reads a paged cache through
`block_table` only when the block size is a multiple of 256; for other block sizes the context is
first gathered into a contiguous `[total_k, Hkv, D]` tensor by slot index (varlen only).
"""
from __future__ import annotations

import torch

from gpu_backend.attention.torch_backend import write_kv


class FlashAttentionBackend:
    """flash-attn varlen attention (see module docstring)."""

    name = "flash"

    def __init__(self) -> None:
        from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

        self._varlen = flash_attn_varlen_func
        self._with_kvcache = flash_attn_with_kvcache

    def forward(self, q, k, v, k_cache, v_cache, meta, scale: float) -> torch.Tensor:
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        common = dict(cu_seqlens_q=meta.cu_seqlens_q, cu_seqlens_k=meta.cu_seqlens_k,
                      max_seqlen_q=meta.max_seqlen_q, max_seqlen_k=meta.max_seqlen_k,
                      softmax_scale=scale, causal=True)
        if meta.block_size % 256 == 0:
            if meta.max_seqlen_q == 1:  # decodes only: one query per sequence, whole cache
                out = self._with_kvcache(q[:, None], k_cache, v_cache, cache_seqlens=meta.seq_lens,
                                         block_table=meta.block_tables, softmax_scale=scale, causal=True)
                return out[:, 0]  # [B, 1, Hq, D] -> [T=B, Hq, D]
            return self._varlen(q, k_cache, v_cache, block_table=meta.block_tables, **common)
        slots = self.key_slots(meta)  # [total_k]
        num_kv_heads, head_dim = k_cache.shape[-2:]
        kc = k_cache.view(-1, num_kv_heads, head_dim)[slots]  # [total_k, Hkv, D]
        vc = v_cache.view(-1, num_kv_heads, head_dim)[slots]
        return self._varlen(q, kc, vc, **common)

    @staticmethod
    def key_slots(meta) -> torch.Tensor:
        """Cache slot of every context position of every sequence, in `cu_seqlens_k` order."""
        total_k = int(meta.seq_lens_np.sum())
        device = meta.seq_lens.device
        seq_of_key = torch.repeat_interleave(torch.arange(meta.num_seqs, device=device), meta.seq_lens.long(),
                                             output_size=total_k)  # [total_k]
        pos = torch.arange(total_k, device=device) - meta.cu_seqlens_k[:-1].long()[seq_of_key]
        return meta.block_tables.long()[seq_of_key, pos // meta.block_size] * meta.block_size + pos % meta.block_size

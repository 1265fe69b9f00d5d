"""`InputBatch`: one step's ragged batch, assembled from a `BatchPlan` with no padding.

For the plan's live sequences (in plan order) it builds, vectorized with numpy:

- `input_ids [T]`, `positions [T]`: the flat tokens of every chunk (T = all scheduled tokens);
- `AttentionMetadata` (flash-attn's varlen layout, slot mapping, block tables; see that class);
- `sample_indices [R]`: the rows the LM head scores: each sampling sequence's last token, and for a
  verify sequence (speculative decoding: its last known token, then its drafts) every one of its
  1 + drafts rows; `sample_last [S]` indexes each sampling sequence's last row among them.

Host-side copies (`*_np`) stay with the metadata so the torch backend can loop without syncs.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np
import torch

from policies import BatchPlan, ScheduledSeq


@dataclass
class AttentionMetadata:
    """Where each new token's K/V goes and what each query attends to.

    `cu_seqlens_q [B+1]`, `cu_seqlens_k [B+1]` (int32, flash-attn's layout), `seq_lens [B]`
    (context after the step), `max_seqlen_q/k`, `slot_mapping [T]` (where each new token's K/V goes:
    `block_id * block_size + offset`) and `block_tables [B, max_blocks]` (int32, padded with block 0
    past a row's length; attention masks by `seq_lens`, so padding is never read). A chunk computing
    positions [c, c + n) of a request attends to its cached keys [0, c) plus itself causally
    (bottom-right aligned, as flash-attn does); a decode (n = 1) attends to the whole cache.
    """

    num_seqs: int
    num_tokens: int
    block_size: int
    slot_mapping: torch.Tensor  # [T] int64
    cu_seqlens_q: torch.Tensor  # [B+1] int32
    cu_seqlens_k: torch.Tensor  # [B+1] int32
    seq_lens: torch.Tensor  # [B] int32, context length after the step
    block_tables: torch.Tensor  # [B, max_blocks] int32
    max_seqlen_q: int
    max_seqlen_k: int
    # host copies (numpy) for backends that loop over sequences
    query_lens_np: np.ndarray
    seq_lens_np: np.ndarray
    cu_seqlens_q_np: np.ndarray
    block_tables_np: np.ndarray
    # decodes (query length 1) batched together; everything else is a prefill chunk
    decode_seq_idx: torch.Tensor  # [Bd] int64 (their rows in the batch)
    decode_token_idx: torch.Tensor  # [Bd] int64 (their token index in the flat batch)
    prefill_seq_idx_np: np.ndarray


@dataclass
class InputBatch:
    """Flat tokens, positions, attention metadata and the rows to sample for one step."""

    seqs: list[ScheduledSeq]
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    meta: AttentionMetadata
    sample_indices: torch.Tensor  # [R] int64, R = S + drafts verified
    sample_seqs: list[ScheduledSeq]
    sample_last: torch.Tensor | None = None  # [S] int64 into the R scored rows; None when R = S
    sample_first: list[int] | None = None  # each sampling sequence's first scored row (verify steps)


def _seq_token_ids(seq: ScheduledSeq) -> list[int]:
    r = seq.request
    start = seq.num_computed_tokens
    ids = r.token_ids(start, start + seq.num_tokens)
    if ids is None:
        raise ValueError(f"request {r.req_id}: prompt_token_ids is None; the engine needs token ids")
    return ids


def build_input_batch(plan: BatchPlan, block_size: int, device: torch.device | str = "cpu") -> InputBatch | None:
    """The ragged batch of `plan`'s live sequences, or None if it has none (e.g. a swap-only step)."""
    seqs = [s for s in plan.seqs if not s.is_padding]
    num_seqs = len(seqs)
    if num_seqs == 0:
        return None
    device = torch.device(device)
    spec = plan.spec_token_ids
    # one Python pass over the sequences; everything after it is numpy on whole arrays
    query_list, start_list, sample_list, ids, flat_blocks, needed_list = [], [], [], [], [], []
    draft_list = []  # drafts per sequence (verify sequences: their rows are all scored)
    for s in seqs:
        r, n, c = s.request, s.num_tokens, s.num_computed_tokens
        query_list.append(n)
        start_list.append(c)
        sample_list.append(s.samples)
        drafts = spec.get(r.req_id) if spec else None
        if drafts:  # the last known token(s), then the drafts to verify
            ids.extend(r.token_ids(c, c + n - len(drafts)))
            ids.extend(drafts)
            draft_list.append(len(drafts))
        elif n == 1 and c >= r.num_prompt_tokens:  # decode fast path: the last sampled token
            ids.append(r.output_token_ids[c - r.num_prompt_tokens])
            draft_list.append(0)
        else:
            ids.extend(_seq_token_ids(s))
            draft_list.append(0)
        needed = (c + n + block_size - 1) // block_size
        table = r.block_table
        if len(table) < needed:
            raise RuntimeError(f"request {r.req_id}: block table has {len(table)} blocks, "
                               f"context {c + n} needs {needed}")
        flat_blocks.extend(table[:needed])
        needed_list.append(needed)
    query_lens = np.array(query_list, np.int64)
    starts = np.array(start_list, np.int64)
    needed = np.array(needed_list, np.int64)
    seq_lens = starts + query_lens
    cu_q = np.zeros(num_seqs + 1, np.int64)
    np.cumsum(query_lens, out=cu_q[1:])
    cu_k = np.zeros(num_seqs + 1, np.int64)
    np.cumsum(seq_lens, out=cu_k[1:])
    num_tokens = int(cu_q[-1])
    max_blocks = int(needed.max())
    block_tables = np.zeros((num_seqs, max_blocks), np.int64)
    # the first `needed` blocks of each table, scattered into the padded matrix in one shot
    block_tables[np.arange(max_blocks)[None, :] < needed[:, None]] = flat_blocks

    seq_of_token = np.repeat(np.arange(num_seqs), query_lens)  # [T]
    positions = np.arange(num_tokens) - cu_q[:-1][seq_of_token] + starts[seq_of_token]  # [T]
    slot_mapping = block_tables[seq_of_token, positions // block_size] * block_size + positions % block_size
    input_ids = np.array(ids, np.int64)

    is_decode = query_lens == 1
    decode_seq_idx = np.flatnonzero(is_decode)
    samples = np.array(sample_list, bool)
    sample_rows = np.flatnonzero(samples)

    def dev(a: np.ndarray, dtype=torch.int64) -> torch.Tensor:
        return torch.from_numpy(a).to(device=device, dtype=dtype, non_blocking=True)

    meta = AttentionMetadata(
        num_seqs=num_seqs, num_tokens=num_tokens, block_size=block_size,
        slot_mapping=dev(slot_mapping), cu_seqlens_q=dev(cu_q, torch.int32), cu_seqlens_k=dev(cu_k, torch.int32),
        seq_lens=dev(seq_lens, torch.int32), block_tables=dev(block_tables, torch.int32),
        max_seqlen_q=int(query_lens.max()), max_seqlen_k=int(seq_lens.max()),
        query_lens_np=query_lens, seq_lens_np=seq_lens, cu_seqlens_q_np=cu_q, block_tables_np=block_tables,
        decode_seq_idx=dev(decode_seq_idx), decode_token_idx=dev(cu_q[:-1][decode_seq_idx]),
        prefill_seq_idx_np=np.flatnonzero(~is_decode),
    )
    last_rows = cu_q[1:][sample_rows] - 1
    sample_seqs = [seqs[i] for i in sample_rows.tolist()]
    if not spec:
        return InputBatch(seqs=seqs, input_ids=dev(input_ids), positions=dev(positions), meta=meta,
                          sample_indices=dev(last_rows), sample_seqs=sample_seqs)
    num_drafts = np.array(draft_list, np.int64)[sample_rows]
    counts = num_drafts + 1  # rows scored per sampling sequence
    rows = np.repeat(last_rows - num_drafts, counts) + (np.arange(int(counts.sum())) - np.repeat(
        np.cumsum(counts) - counts, counts))
    last = np.cumsum(counts) - 1
    return InputBatch(seqs=seqs, input_ids=dev(input_ids), positions=dev(positions), meta=meta,
                      sample_indices=dev(rows), sample_seqs=sample_seqs, sample_last=dev(last),
                      sample_first=(last - num_drafts).tolist())

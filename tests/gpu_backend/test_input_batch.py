"""Batch assembly against a per-token Python reference, for random mixed plans."""
import random

import pytest

from engine_factories import make_plan, make_request
from gpu_backend.input_batch import build_input_batch
from policies import BatchPlan, ScheduledSeq


def random_plan(rng: random.Random, block_size: int, num_seqs: int) -> BatchPlan:
    blocks = list(range(1000))
    rng.shuffle(blocks)
    seqs = []
    for i in range(num_seqs):
        prompt = [rng.randrange(3, 2000) for _ in range(rng.randint(1, 70))]
        r = make_request(i, prompt, max_tokens=50)
        for _ in range(rng.randint(0, 20)):
            r.record_token(rng.randrange(3, 2000), 0.0)
        kind = rng.choice(["decode", "chunk", "whole"])
        if kind == "decode" and r.num_output_tokens:
            c, n = r.num_tokens - 1, 1
        elif kind == "chunk":
            c = rng.randint(0, r.num_tokens - 1)
            n = rng.randint(1, r.num_tokens - c)
        else:
            c, n = 0, r.num_tokens
        num_blocks = (c + n + block_size - 1) // block_size + rng.randint(0, 2)  # tables may run ahead
        r.block_table = [blocks.pop() for _ in range(num_blocks)]
        seqs.append(ScheduledSeq(r, n, c, c + n == r.num_tokens))
    return BatchPlan(0, tuple(seqs))


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_per_token_reference(seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 4, 16])
    plan = random_plan(rng, block_size, rng.randint(1, 12))
    batch = build_input_batch(plan, block_size)
    ids, pos, slots, cu_q, cu_k, samples = [], [], [], [0], [0], []
    for s in plan.seqs:
        r = s.request
        all_ids = list(r.prompt_token_ids) + r.output_token_ids
        for p in range(s.num_computed_tokens, s.num_computed_tokens + s.num_tokens):
            ids.append(all_ids[p])
            pos.append(p)
            slots.append(r.block_table[p // block_size] * block_size + p % block_size)
        cu_q.append(cu_q[-1] + s.num_tokens)
        cu_k.append(cu_k[-1] + s.num_computed_tokens + s.num_tokens)
        if s.samples:
            samples.append(cu_q[-1] - 1)
    m = batch.meta
    assert batch.input_ids.tolist() == ids
    assert batch.positions.tolist() == pos
    assert m.slot_mapping.tolist() == slots
    assert m.cu_seqlens_q.tolist() == cu_q and m.cu_seqlens_k.tolist() == cu_k
    assert batch.sample_indices.tolist() == samples
    for i, s in enumerate(plan.seqs):
        n = (s.context_len + block_size - 1) // block_size
        assert m.block_tables[i, :n].tolist() == s.request.block_table[:n]
    assert m.max_seqlen_q == max(s.num_tokens for s in plan.seqs)
    assert m.max_seqlen_k == max(s.context_len for s in plan.seqs)
    decodes = [i for i, s in enumerate(plan.seqs) if s.num_tokens == 1]
    assert m.decode_seq_idx.tolist() == decodes
    assert m.decode_token_idx.tolist() == [cu_q[i] for i in decodes]


def test_padding_sequences_are_not_computed():
    r, pad = make_request(0, [5, 6, 7], block_table=[3]), make_request(1, [9], block_table=[])
    plan = BatchPlan(0, (ScheduledSeq(r, 3, 0, True), ScheduledSeq(pad, 1, 1, False, is_padding=True)))
    assert build_input_batch(plan, 16).input_ids.tolist() == [5, 6, 7]
    assert build_input_batch(BatchPlan(1, (ScheduledSeq(pad, 1, 1, False, is_padding=True),)), 16) is None


def test_a_block_table_too_short_for_the_context_is_an_error():
    r = make_request(0, list(range(3, 40)), block_table=[1, 2])
    with pytest.raises(RuntimeError, match="block table"):
        build_input_batch(make_plan((r, 37, 0, True)), 16)


def test_requests_without_token_ids_are_refused():
    from policies import Request

    r = Request(0, 0.0, 4, 2)
    r.block_table = [0]
    with pytest.raises(ValueError, match="prompt_token_ids"):
        build_input_batch(make_plan((r, 4, 0, True)), 16)

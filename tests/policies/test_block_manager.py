"""BlockManager: allocation, ref counts, LRU free queue, watermark, swap, prefix cache."""
from __future__ import annotations

import pytest

from policies import Request
from policies.block_manager import BlockManager


def make_bm(num_gpu_blocks=8, block_size=4, num_cpu_blocks=0, watermark=0.0, prefix=False) -> BlockManager:
    return BlockManager(num_gpu_blocks, block_size, num_cpu_blocks, watermark, prefix)


def make_req(req_id=0, prompt=10, ids=None, max_tokens=4) -> Request:
    return Request(req_id, 0.0, prompt, max_tokens, prompt_token_ids=ids)


def prefill(bm: BlockManager, req: Request, n: int) -> None:
    """Allocate `n` tokens for `req` and compute them (the step ran: their KV is written)."""
    bm.allocate(req, n)
    req.num_computed_tokens += n


def test_allocate_rounds_up_and_free_returns_every_block():
    bm = make_bm()
    r = make_req(prompt=10)
    assert bm.allocate_slots(r, 10)
    assert len(r.block_table) == 3 and bm.num_free_gpu_blocks == 5
    r.num_computed_tokens = 10
    assert bm.append_slots(r, 2)  # 12 tokens still fit in 3 blocks
    assert len(r.block_table) == 3
    r.num_computed_tokens = 12
    assert bm.append_slot(r)
    assert len(r.block_table) == 4
    bm.check_invariants()
    bm.free(r)
    assert r.block_table == [] and bm.num_free_gpu_blocks == 8 and bm.usage == 0.0
    bm.check_invariants()


def test_allocation_failure_changes_nothing():
    bm = make_bm(num_gpu_blocks=4)
    a, b = make_req(0, prompt=12), make_req(1, prompt=8)
    assert bm.allocate_slots(a, 12)
    assert not bm.allocate_slots(b, 8)
    assert b.block_table == [] and bm.num_free_gpu_blocks == 1
    bm.check_invariants()


def test_watermark_guards_admission_only():
    bm = make_bm(num_gpu_blocks=10, watermark=0.2)  # 2 blocks kept free for admissions
    a = make_req(0, prompt=28)
    assert not bm.can_allocate(a, 36, use_watermark=True)  # 9 blocks: would leave 1 < 2
    assert bm.allocate_slots(a, 32, use_watermark=True)  # 8 blocks: leaves exactly 2
    a.num_computed_tokens = 32
    assert bm.append_slot(a)  # growth of a running request ignores the watermark
    assert bm.num_free_gpu_blocks == 1
    assert not bm.can_ever_fit(4 * 9) and bm.can_ever_fit(4 * 8)


def test_freed_blocks_are_reused_lru():
    bm = make_bm(num_gpu_blocks=4)
    a = make_req(0, prompt=8)
    bm.allocate(a, 8)
    first = list(a.block_table)
    bm.free(a)
    b = make_req(1, prompt=8)
    bm.allocate(b, 8)
    assert set(b.block_table) == set(first)  # unhashed freed blocks go to the head: reused first


def test_swap_out_and_in_move_exactly_the_computed_blocks():
    bm = make_bm(num_gpu_blocks=6, num_cpu_blocks=4)
    r = make_req(0, prompt=10)
    bm.allocate(r, 12)  # 3 blocks, but only 10 tokens computed so far -> 3 blocks hold KV
    r.num_computed_tokens = 10
    gpu = list(r.block_table)
    out = bm.swap_out(r)
    assert [g for g, _ in out] == gpu and len(set(c for _, c in out)) == 3
    assert r.block_table == [] and bm.num_free_gpu_blocks == 6 and bm.num_free_cpu_blocks == 1
    bm.check_invariants()
    back = bm.swap_in(r)
    assert [c for c, _ in back] == [c for _, c in out]
    assert [g for _, g in back] == r.block_table and bm.num_free_cpu_blocks == 4
    bm.check_invariants()


def test_swap_out_needs_cpu_space():
    bm = make_bm(num_gpu_blocks=6, num_cpu_blocks=2)
    r = make_req(0, prompt=10)
    bm.allocate(r, 10)
    r.num_computed_tokens = 10
    assert not bm.can_swap_out(r)
    with pytest.raises(RuntimeError):
        bm.swap_out(r)


def test_prefix_cache_hits_full_blocks_and_shares_them():
    bm = make_bm(num_gpu_blocks=16, prefix=True)
    ids = list(range(100, 110))  # 10 tokens: 2 full blocks + 2
    a = make_req(0, 10, ids)
    assert bm.get_computed_blocks(a) == ([], 0)
    bm.allocate(a, 10)
    b = make_req(1, 10, list(ids))
    blocks, hit = bm.get_computed_blocks(b)
    assert blocks == a.block_table[:2] and hit == 8
    assert bm.allocate_slots(b, 2, blocks)
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert bm.ref_counts[a.block_table[0]] == 2
    bm.check_invariants()
    bm.free(a)
    assert bm.ref_counts[b.block_table[0]] == 1
    bm.check_invariants()


def test_full_hit_still_recomputes_the_last_token():
    bm = make_bm(num_gpu_blocks=16, prefix=True)
    ids = list(range(8))  # exactly 2 full blocks
    a = make_req(0, 8, ids)
    bm.allocate(a, 8)
    _, hit = bm.get_computed_blocks(make_req(1, 8, list(ids)))
    assert hit == 4  # the second block holds the last token: not a hit


def test_different_content_never_hits_and_parent_chains_matter():
    bm = make_bm(num_gpu_blocks=16, prefix=True)
    a = make_req(0, 9, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    bm.allocate(a, 9)
    # same second block, different first block: the chained hash must not match block 2
    b = make_req(1, 9, [0, 2, 3, 4, 5, 6, 7, 8, 9])
    assert bm.get_computed_blocks(b) == ([], 0)


def test_freed_cached_blocks_stay_findable_until_evicted_lru():
    bm = make_bm(num_gpu_blocks=4, prefix=True)
    a = make_req(0, 9, list(range(9)))
    prefill(bm, a, 9)  # 3 blocks, 2 of them cached
    bm.free(a)
    assert bm.num_free_gpu_blocks == 4 and bm.num_cached_blocks == 2
    again = make_req(1, 9, list(range(9)))
    blocks, hit = bm.get_computed_blocks(again)
    assert hit == 8
    # a newcomer needing all 4 blocks evicts the cached ones
    other = make_req(2, 16, list(range(50, 66)))
    bm.allocate(other, 16)
    assert bm.num_cached_blocks == 4 - 0 and bm.get_computed_blocks(make_req(3, 9, list(range(9)))) == ([], 0)
    bm.check_invariants()


def test_freed_blocks_go_to_the_tail_hashed_or_not():
    # vLLM 0.11-0.22 (BlockPool.free_blocks: append_n of every freed block). 4 blocks: a's 2 cached
    # ones are freed, then b's cached one and its partial one (no hash) behind them. c's block is the
    # LRU head: a's second block, not b's partial one (a later vLLM, #42656, would take that)
    bm = make_bm(num_gpu_blocks=4, prefix=True)
    a, b = make_req(0, 8, list(range(8))), make_req(1, 6, list(range(100, 106)))
    prefill(bm, a, 8)
    prefill(bm, b, 6)
    bm.free(a)
    bm.free(b)
    bm.allocate(make_req(2, 4, list(range(200, 204))), 4)
    assert bm.get_computed_blocks(make_req(3, 9, list(range(9))))[1] == 4
    assert bm.get_computed_blocks(make_req(4, 7, list(range(100, 107))))[1] == 4


def test_counters_and_hit_rate():
    bm = make_bm(prefix=True)
    bm.record_prefix_lookup(10, 8)
    bm.record_prefix_lookup(10, 0)
    assert bm.prefix_cache_hit_rate == pytest.approx(0.4)


def test_blocks_registered_ahead_of_their_kv_leave_the_cache_with_a_preempted_request():
    """A chunk's full blocks are offered to the prefix cache when allocated (vLLM v1: a request
    admitted later in the same step may share them, its KV written in the same forward pass). A
    request that lets go of them before that step ran (preempted in it) takes them out again:
    nobody writes their KV. Blocks it did compute stay findable; a block another request already
    shares stays with it, and `lends_uncomputed` says so (the scheduler must not preempt then)."""
    bm = make_bm(num_gpu_blocks=16, prefix=True)
    ids = list(range(100, 116))  # 4 full blocks
    a = make_req(0, 16, ids)
    prefill(bm, a, 8)  # blocks 0-1 computed
    bm.allocate(a, 8)  # blocks 2-3 registered for the next chunk, not yet computed
    assert bm.get_computed_blocks(make_req(1, 16, list(ids)))[1] == 12  # they are findable now
    assert not bm.lends_uncomputed(a)
    bm.free(a)  # preempted before the chunk ran
    bm.check_invariants()
    assert bm.get_computed_blocks(make_req(2, 16, list(ids)))[1] == 8  # only what was computed

    a = make_req(3, 16, ids)
    blocks, hit = bm.get_computed_blocks(a)
    bm.allocate(a, 16 - hit, blocks)
    a.num_computed_tokens = hit  # the 2 computed blocks are hits; a registers blocks 2-3 ahead
    b = make_req(4, 14, ids[:14])
    blocks, hit = bm.get_computed_blocks(b)
    assert hit == 12
    bm.allocate(b, 2, blocks)  # shares a's block 2, whose KV a writes in this step
    b.num_computed_tokens = hit
    assert bm.lends_uncomputed(a) and not bm.lends_uncomputed(b)
    bm.free(b)
    assert not bm.lends_uncomputed(a)
    bm.check_invariants()


def test_check_invariants_catches_a_leak():
    bm = make_bm()
    r = make_req()
    bm.allocate(r, 10)
    r.block_table.pop()  # a block no table references but that is not free
    with pytest.raises(AssertionError):
        bm.check_invariants()


def test_a_freed_requests_tail_block_is_evicted_first():
    bm = make_bm(num_gpu_blocks=3, block_size=4, prefix=True)
    a = make_req(0, 12, list(range(12)))
    prefill(bm, a, 12)  # 3 full blocks, all cached
    bm.free(a)  # freed in reverse order: the tail block is at the LRU head
    bm.allocate(make_req(1, 4), 4)  # takes one block: evicts a's last block
    again = make_req(2, 13, list(range(12)) + [99])
    assert bm.get_computed_blocks(again)[1] == 8  # the first two blocks survived
    bm.check_invariants()


def test_append_blocks_gives_the_blocks_step_by_step_allocation_would():
    """One block per entry, in the order given, the same blocks one-token `allocate_slots` calls
    take (the LRU head; cached content evicted); short of blocks it raises and changes nothing."""
    def prepared():
        bm = make_bm(num_gpu_blocks=8, prefix=True)
        a, b, c = make_req(0, prompt=4), make_req(1, prompt=6), make_req(2, prompt=8, ids=list(range(8)))
        for r in (a, b, c):
            assert bm.allocate_slots(r, r.num_prompt_tokens)
            r.num_computed_tokens = r.num_prompt_tokens
        bm.free(c)  # two cached blocks at the tail of the free queue, evictable
        return bm, a, b

    bm, a, b = prepared()
    ref, ra, rb = prepared()
    assert bm.num_cached_blocks == 2
    order = [0, 1, 0, 0]
    bm.append_blocks([(a, b)[i] for i in order])
    for i in order:
        r = (ra, rb)[i]
        assert ref.allocate_slots(r, len(r.block_table) * ref.block_size - r.num_computed_tokens + 1)
    assert (a.block_table, b.block_table) == (ra.block_table, rb.block_table)
    assert list(bm.free_queue) == list(ref.free_queue) and bm.ref_counts == ref.ref_counts
    assert bm.num_cached_blocks == ref.num_cached_blocks == 1  # one cached block handed out: evicted
    bm.check_invariants()
    with pytest.raises(RuntimeError, match="2 blocks asked for, 1 free"):
        bm.append_blocks([a, b])
    assert len(a.block_table) == 4 and bm.num_free_gpu_blocks == 1
    bm.check_invariants()



def test_a_count_only_requests_blocks_go_where_a_unique_prompts_would():
    """A request without token ids holds content nobody shares: freed, its full computed blocks are kept
    (the tail) and found again by itself alone, as a request with unique ids; freed once finished, they
    go where such a request's would (the tail), without hashing: nobody looks them up."""
    def freed(with_ids: bool):
        bm = make_bm(num_gpu_blocks=12, prefix=True)
        back = make_req(0, 9, list(range(100, 109)) if with_ids else None)  # preempted: it comes back
        done = make_req(1, 14, list(range(200, 214)) if with_ids else None)  # finished
        prefill(bm, back, 9)
        prefill(bm, done, 14)
        bm.free(back)
        bm.free(done, finished=True)
        bm.check_invariants()
        back.num_computed_tokens = 0
        return list(bm.free_queue), bm.get_computed_blocks(back), bm.num_cached_blocks

    queue, (blocks, hit), num_cached = freed(with_ids=False)
    assert (queue, (blocks, hit)) == freed(with_ids=True)[:2]
    # every freed block goes to the tail (vLLM <= 0.22): done's 4 (its partial last one too) at the
    # very tail, then back's 3, whose 2 full ones it finds again
    assert hit == 8 and queue[4:6] == blocks
    assert num_cached == 2  # the finished one's blocks are placed, not hashed

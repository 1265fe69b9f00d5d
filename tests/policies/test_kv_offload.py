"""The KV offload tier: LRU and pins, the two transfer queues, and the scheduler's loads and stores
(native: the request waits for its load; lmcache: it loads in the step that admits it)."""
from __future__ import annotations

import pytest

from policies import ConfigError, StepResult
from policies.kv_offload import OffloadTier, offload_blocks
from policy_factories import make_requests, make_scheduler, run, step


def make_tier(num_blocks=4, backend="native", s_per_block=0.0, block_size=4):
    return OffloadTier(num_blocks, block_size, backend, s_per_block)


def test_lookup_counts_the_landed_consecutive_run_after_the_gpu_hit():
    tier = make_tier(s_per_block=1.0)
    picked = tier.start_store([11, 12, 13])
    assert [i for i, _ in picked] == [0, 1, 2]
    assert tier.lookup([11, 12, 13], 0, now=100.0) == 0  # not landed before its step ended
    done = tier.finish_store([11, 12, 13], now=5.0)
    assert done == 8.0  # three blocks of 1 s queued on the device -> host link
    assert tier.lookup([11, 12, 13], 0, now=7.9) == 0 and tier.lookup([11, 12, 13], 0, now=8.0) == 3
    assert tier.lookup([11, 12, 13], 1, now=8.0) == 2  # after one GPU hit
    assert tier.lookup([11, 99, 13], 0, now=8.0) == 1  # the run stops at the first miss
    tier.check_invariants()


def test_stores_skip_present_blocks_and_evict_the_least_recently_used_unpinned():
    tier = make_tier(num_blocks=3)
    tier.finish_store([1, 2, 3], 0.0) if tier.start_store([1, 2, 3]) else None
    tier.start_load([1], 0.0)  # pinned by a load in flight: never evicted
    tier.lookup([2], 0, 0.0)
    picked = tier.start_store([2, 4])  # 2 is present (touched); 4 evicts the LRU unpinned one: 3
    assert [i for i, _ in picked] == [1]
    assert set(tier.entries) == {1, 2, 4} and tier.num_evicted_blocks == 1
    tier.finish_store([4], 0.0)
    assert tier.start_store([5, 6, 7]) is None  # native: all or none; 1 is pinned, 2 evictable
    assert [i for i, _ in tier.start_store([5, 6])] == [0, 1] and tier.num_evicted_blocks == 3
    assert 1 in tier.entries  # still pinned
    tier.finish_load([1])
    tier.finish_store([5, 6], 0.0)
    tier.check_invariants()


def test_full_of_pinned_blocks_stores_nothing():
    for backend, nothing in (("native", None), ("lmcache", [])):  # native: offered again later
        tier = make_tier(num_blocks=2, backend=backend)
        tier.start_store([1, 2])  # pinned until finish_store
        assert tier.start_store([3]) == nothing
        tier.check_invariants()


def test_a_held_store_is_found_and_evicted_only_once_released():
    tier = make_tier(num_blocks=2, s_per_block=1.0)
    tier.start_store([1, 2])
    tier.hold([1, 2])
    tier.finish_store([1, 2], now=5.0)  # copies land at 7
    assert tier.lookup([1, 2], 0, now=100.0) == 0 and tier.start_store([3]) is None
    tier.release([1, 2], now=6.0)
    assert tier.lookup([1, 2], 0, now=6.5) == 0 and tier.lookup([1, 2], 0, now=7.0) == 2
    assert tier.start_store([3]) and tier.num_evicted_blocks == 1
    tier.check_invariants()


def test_loads_queue_on_the_host_to_device_link_and_lmcache_loads_in_the_step():
    native, lm = make_tier(s_per_block=0.5), make_tier(backend="lmcache", s_per_block=0.5, block_size=64)
    for tier in (native, lm):
        tier.start_store([1, 2, 3, 4])
        tier.finish_store([1, 2, 3, 4], 0.0)
    assert native.start_load([1, 2], 10.0)[1] == 11.0
    assert native.start_load([3], 10.5)[1] == 11.5  # behind the first load
    assert lm.start_load([1, 2], 10.0)[1] == 10.0  # its copy time is the step's
    assert lm.step_seconds(2, 1) == 1.5 and native.step_seconds(2, 1) == 0.0


def test_lmcache_hits_whole_chunks_only():
    tier = OffloadTier(64, 64, "lmcache")  # 256-token chunks = 4 blocks of 64
    hashes = list(range(1, 9))
    tier.start_store(hashes[:6])
    tier.finish_store(hashes[:6], 0.0)
    assert tier.chunk_blocks == 4
    assert tier.lookup(hashes, 0, 1.0) == 4  # 6 present: one whole chunk
    assert tier.lookup(hashes, 1, 1.0) == 3  # the GPU hit one block: the rest of the chunk


def test_size_in_gib_and_bad_settings():
    assert offload_blocks(1.0, 2**20) == 1024 and offload_blocks(0, 2**20) == 0
    with pytest.raises(ConfigError, match=r"^cache\.offload_backend"):
        OffloadTier(4, 16, "disk")
    with pytest.raises(ConfigError, match=r"^cache\.offload_size_gb: the CPU tier is a prefix cache"):
        make_scheduler(num_offload_blocks=8, enable_prefix_caching=False)


PREFIX = list(range(1, 33))  # 8 blocks of 4 tokens


def evicting_workload():
    """Two prefixes in turn, one request at a time, on a GPU pool that holds one prompt: the first
    prefix's cached blocks are gone when it comes back."""
    other = [1000 + t for t in PREFIX]
    return (make_requests(1, prompt=36, max_tokens=3, prefix=PREFIX, start_id=0)
            + make_requests(1, prompt=36, max_tokens=3, prefix=other, start_id=1, arrival=1.0)
            + make_requests(1, prompt=36, max_tokens=3, prefix=PREFIX, start_id=2, arrival=2.0))


@pytest.mark.parametrize("backend", ["native", "lmcache"])
def test_an_evicted_prefix_is_loaded_back_from_the_cpu_tier(backend):
    block_size = 4 if backend == "native" else 64
    # a pool of exactly one request's blocks (+1: v1's null block): the second prompt evicts every
    # block of the first
    sched = make_scheduler(policy="vllm", num_gpu_blocks=(10 if backend == "native" else 5) + 1, block_size=block_size,
                           num_offload_blocks=32, offload_backend=backend, max_num_batched_tokens=64,
                           max_model_len=512)
    reqs = evicting_workload() if backend == "native" else [
        *make_requests(1, prompt=300, max_tokens=3, prefix=list(range(1, 300)), start_id=0),
        *make_requests(1, prompt=300, max_tokens=3, prefix=list(range(5000, 5300)), start_id=1, arrival=1.0),
        *make_requests(1, prompt=300, max_tokens=3, prefix=list(range(1, 300)), start_id=2, arrival=2.0)]
    plans = run(sched, reqs, on_step=lambda plan, now: sched.block_manager.check_invariants())
    first, _, again = reqs
    assert first.num_cpu_cached_tokens == 0 and again.num_cached_tokens == 0  # the GPU cache lost it
    whole = 32 if backend == "native" else 256
    assert again.num_cpu_cached_tokens == whole
    loads = [p for p in plans if p.offload_load_blocks]
    assert sum(len(p.offload_load_blocks) for p in loads) * block_size == whole
    if backend == "native":  # the load is issued in a plan of its own; the request computes after it
        assert not any(s.request is again for p in loads for s in p.seqs)
    else:  # loaded and computed in one step
        assert any(s.request is again and s.num_computed_tokens == whole for p in loads for s in p.seqs)
    stored = sum(len(p.offload_store_blocks) for p in plans)
    assert stored == sched.block_manager.offload.num_stored_blocks > 0
    assert all(r.finish_reason.value == "length" for r in reqs)


def test_a_native_load_holds_the_request_until_it_lands():
    """With 1 s a block on the link a load of n blocks lands n s after it starts: the request waits
    (counted as waiting, holding its GPU blocks), the scheduler says when to wake up, and the other
    requests are not held up."""
    # +1: v1's null block
    sched = make_scheduler(policy="vllm", num_gpu_blocks=11 + 1, block_size=4, num_offload_blocks=32,
                           offload_s_per_block=1.0, max_num_batched_tokens=64)
    a, b, again = evicting_workload()
    run(sched, [a, b])
    sched.add_request(again, 100.0)
    plan = sched.schedule(100.0)
    gpu_hit = again.num_cached_tokens // 4
    n = len(plan.offload_load_blocks)
    assert n == 8 - gpu_hit > 0 and not plan.seqs  # the prefix's 8 blocks, over the two tiers
    assert sched.num_waiting == 1 and sched.num_running == 0 and len(again.block_table) == 8
    sched.update(plan, StepResult(0.0), 100.0)
    assert sched.next_wakeup() == 100.0 + n
    bystander = make_requests(1, prompt=8, max_tokens=3, start_id=9)[0]
    sched.add_request(bystander, 100.0)
    now = 100.0
    while now + 0.5 < 100.0 + n:
        plan, _ = step(sched, now, duration=0.5)
        assert again not in [s.request for s in plan.seqs]
        now += 0.5
    assert bystander.finish_reason.value == "length" and sched.num_waiting == 1
    plan = sched.schedule(100.0 + n)
    assert [s.request for s in plan.seqs] == [again] and plan.seqs[0].num_computed_tokens == 32
    assert again.num_cpu_cached_tokens == 4 * n
    sched.block_manager.check_invariants()


def test_abort_while_loading_frees_its_blocks():
    # +1: v1's null block
    sched = make_scheduler(policy="vllm", num_gpu_blocks=10 + 1, block_size=4, num_offload_blocks=32,
                           offload_s_per_block=1.0, max_num_batched_tokens=64)
    a, b, again = evicting_workload()
    run(sched, [a, b])
    sched.add_request(again, 100.0)
    step(sched, 100.0, duration=0.0)
    assert again.req_id in sched.loading
    sched.abort_request(again.req_id, 101.0)
    assert not sched.loading and again.finish_reason.value == "aborted" and not again.block_table
    assert not sched.block_manager.offload.pins and not sched.has_unfinished()
    sched.block_manager.check_invariants()


def test_a_request_deferred_behind_a_load_of_its_blocks_holds_up_no_one_else():
    """vLLM's OffloadingConnector defers a request whose CPU hits another request is still loading
    (get_num_new_matched_tokens -> None); the scheduler skips it for this step and keeps scanning the
    waiting queue, and the deferred request keeps its place at the head."""
    sched = make_scheduler(policy="vllm", num_gpu_blocks=12, block_size=4, num_offload_blocks=32,
                           offload_s_per_block=1.0, max_num_batched_tokens=64)
    a, b, again = evicting_workload()
    run(sched, [a, b])
    twin = make_requests(1, prompt=36, max_tokens=3, prefix=PREFIX, start_id=5)[0]
    bystander = make_requests(1, prompt=8, max_tokens=3, start_id=9)[0]
    for req in (again, twin, bystander):
        sched.add_request(req, 100.0)
    plan = sched.schedule(100.0)
    assert again.req_id in sched.loading and twin.num_computed_tokens == 0  # twin waits for again's load
    assert [s.request for s in plan.seqs] == [bystander]  # admitted past the deferred twin
    assert sched.waiting.peek() is twin
    sched.block_manager.check_invariants()


def test_a_full_native_tier_evicts_a_prefix_from_its_tail():
    """vLLM's CPU LRU touches a request's blocks last-to-first (`touch` walks them reversed), so the
    head of a prefix is the most recently used and a full tier gives up its tail first: a prefix that
    comes back still finds its first blocks, where evicting from the head would leave nothing
    reachable (a lookup stops at the first miss)."""
    sched = make_scheduler(policy="vllm", num_gpu_blocks=11, block_size=4, num_offload_blocks=12,
                           max_num_batched_tokens=64)
    a, b, again = evicting_workload()  # 9 full blocks each; b's evict 6 of a's from the tier
    run(sched, [a, b, again], on_step=lambda plan, now: sched.block_manager.check_invariants())
    assert sched.block_manager.offload.num_evicted_blocks >= 6 and again.num_cached_tokens == 0
    assert again.num_cpu_cached_tokens == 3 * 4  # a's first three blocks survived


def test_native_stores_of_a_running_request_are_held_until_it_ends():
    """vLLM's connector completes a request's stores (its CPU blocks become evictable and findable)
    only once the request has finished or been preempted, and `prepare_store` stores all of a step's
    new blocks or none (retried the next step). Two prompts running together on a tier that holds one:
    the first one's blocks stay, the second one's are not stored, as vLLM's tier ends up."""
    sched = make_scheduler(policy="vllm", num_gpu_blocks=40, block_size=4, num_offload_blocks=12,
                           max_num_batched_tokens=128)
    a, b, again = evicting_workload()
    b.arrival_time = 0.0
    tier = sched.block_manager.offload
    held = []
    run(sched, [a, b], on_step=lambda plan, now: (sched.block_manager.check_invariants(),
                                                  held.append(tier.lookup(a.block_hashes, 0, now))))
    assert held[0] == 0  # a's blocks are stored but not findable while a runs
    assert tier.num_stored_blocks == 9 and tier.num_evicted_blocks == 0  # b's 9 did not fit beside them
    assert sched.block_manager.offload_lookup(again, 0, now=100.0) == 8  # a's prefix, findable once a ended


def test_native_loads_leave_the_blocks_a_landed_load_still_needs():
    """Two requests whose prefixes are only in the CPU tier arrive together on a pool of two blocks,
    each needing both. Were both loads admitted, each would hold one block it cannot give back (a load
    is not preemptible) and neither could go on. vLLM admits a load only into the free blocks the
    prompts in flight do not still need (`_inflight_prefill_reserved_blocks`): the second waits for
    the first to finish, then loads in turn."""
    sched = make_scheduler(policy="vllm", num_gpu_blocks=2 + 1, block_size=4, num_offload_blocks=8,
                           max_num_batched_tokens=64, max_model_len=64)  # +1: v1's null block
    prefixes = [[100 * g + t for t in range(4)] for g in range(3)]  # one full block each
    first = [make_requests(1, prompt=7, max_tokens=1, prefix=p, start_id=g, arrival=float(g))[0]
             for g, p in enumerate(prefixes)]  # the third evicts the first two from the GPU cache
    again = [make_requests(1, prompt=7, max_tokens=1, prefix=p, start_id=5 + g, arrival=5.0)[0]
             for g, p in enumerate(prefixes[:2])]
    run(sched, first + again, on_step=lambda plan, now: sched.block_manager.check_invariants())
    assert all(r.finish_reason.value == "length" for r in again)
    assert [r.num_cpu_cached_tokens for r in again] == [4, 4]  # both loaded, one after the other


def test_a_request_preempted_for_recompute_waits_behind_a_landed_load():
    """vLLM keeps landed loads in its `skipped_waiting` queue, scheduled before `waiting` under fcfs,
    so a request preempted for recompute (prepended to `waiting`) never gets in front of them. Here a
    decode preempts itself while a landed load holds half the pool: in front of the load, its
    recompute would not fit the blocks left and the scan would stop there with nothing running."""
    sched = make_scheduler(policy="vllm", num_gpu_blocks=4 + 1, block_size=4, num_offload_blocks=8,
                           max_num_batched_tokens=64, max_model_len=64)  # +1: v1's null block
    prefix = list(range(1, 9))  # two full blocks
    stored = make_requests(1, prompt=8, max_tokens=1, prefix=prefix, start_id=0)[0]
    evicting = make_requests(1, prompt=16, max_tokens=1, prefix=[500 + t for t in range(16)], start_id=1,
                             arrival=1.0)[0]
    decode = make_requests(1, prompt=4, max_tokens=12, prefix=[900, 901, 902, 903], start_id=2, arrival=2.0)[0]
    load = make_requests(1, prompt=13, max_tokens=1, prefix=prefix, start_id=3, arrival=2.015)[0]
    run(sched, [stored, evicting, decode, load], on_step=lambda plan, now: sched.block_manager.check_invariants())
    assert load.num_cpu_cached_tokens == 8 and decode.num_preemptions == 1
    assert load.finish_time < decode.finish_time  # it went on before the preempted decode came back


def test_a_refused_store_offered_again_is_never_inside_a_decode_stretch():
    """The step loop offers a request's refused native stores again at every step; once another
    request ends and releases its held stores they fit, in the next step. A decode stretch replays
    steps without offering anything (`Scheduler.decode_horizon`), so none may cover that step: a
    stretch would store them one step late, with the next block (`simulate(fast_decode=True)` and
    step by step disagreed on the steps' store counts)."""
    sched = make_scheduler(policy="vllm", num_gpu_blocks=40, block_size=4, num_offload_blocks=12,
                           max_num_batched_tokens=128)
    other = [1000 + t for t in PREFIX]
    a = make_requests(1, prompt=36, max_tokens=2, prefix=PREFIX, start_id=0)[0]  # ends at its 2nd step
    b = make_requests(1, prompt=36, max_tokens=20, prefix=other, start_id=1)[0]  # refused beside a's 9
    horizons, stores = [0], []

    def on_plan(plan):
        stores.append(len(plan.offload_store_blocks))
        assert not (horizons[-1] and plan.offload_store_blocks), f"step {plan.step_id} stores inside a stretch"

    run(sched, [a, b], on_plan=on_plan, on_step=lambda plan, now: horizons.append(sched.decode_horizon()))
    assert stores[:3] == [9, 0, 9]  # b's 9 blocks wait for a's to be released, then go in the next step

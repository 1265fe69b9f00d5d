"""The engine under every policy against transformers, token for token; invariants after each run.

Each scenario serves a handful of prompts through `Engine` with the real `Scheduler` and checks:
greedy outputs equal `LlamaForCausalLM` run one prompt at a time; every KV block is free at the
end; every request ended; and the KV tensors (NaN-filled at start) were written only at the slots
the plans' block tables allot to the scheduled tokens (or in whole blocks swapped back in).
"""
import threading

import pytest
import torch

from engine_factories import make_prompt, make_request
from gpu_backend.engine import Engine, EngineConfig
from gpu_backend.sampling_params import SamplingParams
from policies import CacheConfig, SchedulerConfig


def make_engine(model, policy="chunked", num_gpu_blocks=256, num_cpu_blocks=0, block_size=16, prefix=False,
                num_offload_blocks=0, offload_backend="native", **sched) -> Engine:
    sched.setdefault("max_model_len", 512)
    config = EngineConfig(model=model.config, scheduler=SchedulerConfig(policy=policy, **sched),
                          cache=CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks,
                                            num_cpu_blocks=num_cpu_blocks, enable_prefix_caching=prefix,
                                            num_offload_blocks=num_offload_blocks, offload_backend=offload_backend))
    engine = Engine(config, "cpu", model=model)
    engine.kv_cache.fill_(float("nan"))
    engine.expected_slots = set()  # (block, offset) the plans allot; filled by the wrapper below
    engine.swapped_in_blocks = set()
    execute = engine.runner.execute

    def recording_execute(plan):
        bs = engine.kv_cache.block_size
        engine.swapped_in_blocks.update(dst for _, dst in plan.swap_in_blocks)
        engine.swapped_in_blocks.update(dst for _, dst in plan.offload_load_blocks)  # whole blocks too
        for s in plan.seqs:
            if not s.is_padding:
                table = s.request.block_table
                engine.expected_slots.update((table[p // bs], p % bs) for p in range(s.num_computed_tokens, s.context_len))
        return execute(plan)

    engine.runner.execute = recording_execute
    return engine


def serve(engine, prompts, max_tokens=10, **kw) -> list:
    reqs = [make_request(i, p, max_tokens, **kw) for i, p in enumerate(prompts)]
    for r in reqs:
        engine.add_request(r)
    engine.run_until_done()
    return reqs


def check_invariants(engine, reqs) -> None:
    bm = engine.scheduler.block_manager
    assert bm.num_free_gpu_blocks == bm.num_gpu_blocks, "blocks leaked"
    assert not engine.scheduler.has_unfinished()
    assert all(r.is_finished for r in reqs)
    written = ~engine.kv_cache.buffer.isnan().all(-1).all(-1)  # [L, 2, N, B]: slot touched anywhere
    allowed = torch.zeros_like(written[0, 0])
    for b, o in engine.expected_slots:
        allowed[b, o] = True
    for b in engine.swapped_in_blocks:  # swap-in copies whole blocks, stale tails included
        allowed[b, :] = True
    stray = written & ~allowed
    assert not stray.any(), f"KV written outside allotted slots: {stray.nonzero()[:5].tolist()}"


PROMPTS = [make_prompt(n, seed=100 + n) for n in (23, 5, 41, 17, 30, 12)]


def check_against_reference(hf_ref, reqs, prompts=PROMPTS) -> None:
    for r, p in zip(reqs, prompts):
        assert r.finish_reason.value == "length"
        hf_ref.assert_same_greedy(p, r.output_token_ids)


def test_continuous(tiny_model, hf_ref):
    engine = make_engine(tiny_model, "continuous")
    reqs = serve(engine, PROMPTS)
    check_against_reference(hf_ref, reqs)
    check_invariants(engine, reqs)


@pytest.mark.parametrize("budget", [7, 16, 64])
def test_chunked_budgets_including_smaller_than_a_prompt(tiny_model, hf_ref, budget):
    engine = make_engine(tiny_model, "chunked", max_num_batched_tokens=budget, max_num_seqs=4)
    reqs = serve(engine, PROMPTS)
    check_against_reference(hf_ref, reqs)
    check_invariants(engine, reqs)
    steps = engine.result().steps
    assert (steps["num_prefill_tokens"] + steps["num_decode_tokens"]).max() <= budget
    if budget < max(map(len, PROMPTS)):
        assert len(steps) > len(PROMPTS)  # prompts really were split


@pytest.mark.parametrize("mode", ["recompute", "swap", "hybrid"])
def test_forced_preemption(tiny_model, hf_ref, mode):
    # 6 requests of up to 41 + 16 tokens in 4-token blocks need ~70 blocks; give 20
    engine = make_engine(tiny_model, "chunked", num_gpu_blocks=20, block_size=4, num_cpu_blocks=64,
                         preemption=mode, max_num_batched_tokens=64, hybrid_swap_threshold=4)
    reqs = serve(engine, PROMPTS, max_tokens=16)
    check_against_reference(hf_ref, reqs)
    check_invariants(engine, reqs)
    counters = {"recompute": ["num_recomputes"], "swap": ["num_swaps"], "hybrid": ["num_recomputes", "num_swaps"]}
    assert sum(getattr(r, c) for r in reqs for c in counters[mode]) > 0, f"no {mode} preemption happened"
    for r in reqs:  # preemption intervals on the engine's clock: one each, in order, no token inside
        assert len(r.preemption_intervals) == r.num_preemptions
        bounds = [r.arrival_time] + [t for interval in r.preemption_intervals for t in interval] + [r.finish_time]
        assert bounds == sorted(bounds) and not any(a < t < b for a, b in r.preemption_intervals for t in r.token_times)
    table = engine.result().requests
    assert (table["preemption_intervals"] != "[]").sum() == sum(r.num_preemptions > 0 for r in reqs)


def test_a_step_that_swaps_in_and_then_swaps_out_into_the_freed_cpu_blocks(tiny_model, hf_ref):
    # chunked + priority queue + swap: a step swaps a request back in, then admitting a more urgent
    # arrival swaps another one out into the CPU blocks that swap-in just freed (BatchPlan: swap-in first)
    engine = make_engine(tiny_model, "chunked", num_gpu_blocks=20, block_size=4, num_cpu_blocks=64, queue="priority",
                         preemption="swap", max_num_batched_tokens=32, max_num_seqs=2, max_model_len=256)
    reused = []
    engine.step_hooks.append(lambda plan, result: reused.extend(
        {c for c, _ in plan.swap_in_blocks} & {c for _, c in plan.swap_out_blocks}))
    # (arrival step, req_id, prompt length, max_tokens, priority)
    arrivals = [(1, 0, 23, 12, 1), (1, 1, 27, 14, 2), (4, 2, 30, 15, 3), (15, 3, 14, 18, 2), (16, 4, 22, 20, 1),
                (18, 5, 5, 8, 2), (25, 6, 26, 11, 1), (29, 7, 8, 9, 3)]
    reqs, prompts = [], []
    for step in range(500):
        for _, i, n, max_tokens, priority in (a for a in arrivals if a[0] == step):
            prompts.append(make_prompt(n, seed=300 + i))
            reqs.append(make_request(i, prompts[-1], max_tokens, priority=priority))
            engine.add_request(reqs[-1])
        engine.step()
        if step > arrivals[-1][0] and not engine.has_unfinished():
            break
    assert reused, "the scenario no longer swaps in and out through the same CPU block in one step"
    check_against_reference(hf_ref, reqs, prompts)
    check_invariants(engine, reqs)


def test_shared_prefix_with_prefix_caching(tiny_model, hf_ref):
    prefix = make_prompt(40, seed=7)
    prompts = [prefix + make_prompt(n, seed=200 + n) for n in (3, 9, 14, 6)]
    prompts.append(list(prompts[0]))  # a full hit: only the uncached tail (at least the last token) is computed
    engine = make_engine(tiny_model, "chunked", prefix=True, block_size=8)
    first = serve(engine, prompts[:1])  # warm the cache, then the rest share its full blocks
    rest = [make_request(i + 1, p, 10) for i, p in enumerate(prompts[1:])]
    for r in rest:
        engine.add_request(r)
    engine.run_until_done()
    reqs = first + rest
    check_against_reference(hf_ref, reqs, prompts)
    assert all(r.num_cached_tokens >= 32 for r in rest), [r.num_cached_tokens for r in rest]
    check_invariants(engine, reqs)


@pytest.mark.parametrize("backend, prefix_len, block_size", [("native", 40, 8), ("lmcache", 264, 8)])
def test_cpu_offload_tier_loads_evicted_prefixes_token_exact(tiny_model, hf_ref, backend, prefix_len, block_size):
    """Two prefixes take turns on a GPU pool too small to keep both cached: each comes back from the
    CPU tier (loaded into fresh GPU blocks, native after its load lands, lmcache in the step), and the
    greedy tokens still equal the reference's."""
    a, b = make_prompt(prefix_len, seed=11), make_prompt(prefix_len, seed=12)
    prompts = [a + make_prompt(5, seed=301), b + make_prompt(7, seed=302), a + make_prompt(4, seed=303),
               b + make_prompt(6, seed=304), a + make_prompt(9, seed=305)]
    per_request = -(-(prefix_len + 9 + 8) // block_size)
    engine = make_engine(tiny_model, "chunked", num_gpu_blocks=per_request + 3, block_size=block_size, prefix=True,
                         num_offload_blocks=4 * per_request, offload_backend=backend)
    reqs = []
    for i, p in enumerate(prompts):  # one at a time: each evicts the other prefix from the GPU cache
        reqs += serve_one(engine, i, p, 8)
    check_against_reference(hf_ref, reqs, prompts)
    loaded = [r.num_cpu_cached_tokens for r in reqs]
    assert loaded[:2] == [0, 0] and all(n > 0 for n in loaded[2:]), loaded
    # the prefix's full blocks come back whole across the two tiers (lmcache: its whole 256-token chunk)
    whole = 256 if backend == "lmcache" else prefix_len // block_size * block_size
    assert all(r.num_cached_tokens + r.num_cpu_cached_tokens == whole for r in reqs[2:]), \
        [(r.num_cached_tokens, r.num_cpu_cached_tokens) for r in reqs]
    tier = engine.scheduler.block_manager.offload
    assert tier.num_loaded_blocks * block_size == sum(loaded)
    stored = sum(len(s) for s in engine.offload_stores)
    assert stored == tier.num_stored_blocks > 0
    tier.check_invariants()
    check_invariants(engine, reqs)


def serve_one(engine, req_id, prompt, max_tokens):
    if not hasattr(engine, "offload_stores"):
        engine.offload_stores = []
        engine.step_hooks.append(lambda plan, result: engine.offload_stores.append(plan.offload_store_blocks))
    r = make_request(req_id, prompt, max_tokens)
    engine.add_request(r)
    engine.run_until_done()
    return [r]


def test_static_policy(tiny_model, hf_ref):
    engine = make_engine(tiny_model, "static", max_num_seqs=3)
    reqs = serve(engine, PROMPTS, max_tokens=6)
    check_against_reference(hf_ref, reqs)
    check_invariants(engine, reqs)


def test_abort_mid_flight_frees_blocks_and_reports(tiny_model):
    engine = make_engine(tiny_model, "chunked")
    outputs = []
    reqs = [make_request(i, p, 30) for i, p in enumerate(PROMPTS[:3])]
    for r in reqs:
        engine.add_request(r, outputs.append)
    for _ in range(4):
        engine.step()
    assert engine.scheduler.block_manager.num_used_gpu_blocks > 0
    engine.abort(1)
    engine.run_until_done()
    assert reqs[1].finish_reason.value == "aborted" and reqs[1].num_output_tokens < 30
    assert [r.finish_reason.value for r in (reqs[0], reqs[2])] == ["length", "length"]
    assert engine.scheduler.block_manager.num_free_gpu_blocks == engine.scheduler.block_manager.num_gpu_blocks
    finals = [o for o in outputs if o.finished]
    assert sorted(o.req_id for o in finals) == [0, 1, 2]
    for r in reqs:  # the streamed tokens are exactly the request's output
        assert [t for o in outputs if o.req_id == r.req_id for t in o.new_token_ids] == r.output_token_ids


def test_eos_stops_unless_ignored(tiny_model, hf_ref):
    prompt = PROMPTS[0]
    ref = hf_ref.greedy(prompt, 10)
    stop = ref[3]
    params = SamplingParams(stop_token_ids=(stop,))
    engine = make_engine(tiny_model)
    [r] = serve(engine, [prompt], max_tokens=10, ignore_eos=False, sampling=params)
    assert r.finish_reason.value == "stop" and r.output_token_ids == ref[:ref.index(stop) + 1]


def test_seeded_sampling_does_not_depend_on_the_batch(tiny_model):
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=1234)
    alone = serve(make_engine(tiny_model), [PROMPTS[2]], max_tokens=12, sampling=params)[0].output_token_ids
    others = [SamplingParams(temperature=0.8, seed=i) for i in range(3)]
    engine = make_engine(tiny_model, max_num_batched_tokens=16)
    reqs = [make_request(i, p, 12, sampling=s) for i, (p, s) in enumerate(zip(PROMPTS[:4], others[:2] + [params] + others[2:]))]
    for r in reqs:
        engine.add_request(r)
    engine.run_until_done()
    assert reqs[2].output_token_ids == alone


def test_background_thread_streams_outputs(tiny_model, hf_ref):
    engine = make_engine(tiny_model)
    done = threading.Event()
    outputs = []

    def on_output(out):
        outputs.append(out)
        if out.finished:
            done.set()

    engine.start()
    try:
        r = make_request("a", PROMPTS[1], 8, arrival_time=engine.now())
        engine.add_request(r, on_output)
        assert done.wait(30)
    finally:
        engine.stop()
    assert [t for o in outputs for t in o.new_token_ids] == r.output_token_ids
    assert all(a.time <= b.time for a, b in zip(outputs, outputs[1:]))
    hf_ref.assert_same_greedy(PROMPTS[1], r.output_token_ids)
    stats = engine.stats()
    assert stats["num_running"] == stats["num_waiting"] == 0 and stats["num_used_gpu_blocks"] == 0


def test_token_ids_outside_the_vocab_are_refused(tiny_model):
    engine = make_engine(tiny_model)
    with pytest.raises(ValueError, match="prompt_token_ids"):
        engine.add_request(make_request(0, [5, tiny_model.config.vocab_size]))


def test_a_second_live_request_of_one_id_is_refused_and_the_first_goes_on(tiny_model, hf_ref):
    """Before, the second took over the first's stream and the scheduler refused it at the next step
    (on a served engine's loop, which then died for every client); an id is free again once ended."""
    engine = make_engine(tiny_model)
    first = make_request("x", PROMPTS[0], max_tokens=6)
    engine.add_request(first)
    with pytest.raises(ValueError, match="'x': a request of this id is still live"):
        engine.add_request(make_request("x", PROMPTS[1], max_tokens=6))
    engine.step()  # now live in the scheduler, no longer in the ingress: still refused
    with pytest.raises(ValueError, match="still live"):
        engine.add_request(make_request("x", PROMPTS[1], max_tokens=6))
    engine.run_until_done()
    hf_ref.assert_same_greedy(PROMPTS[0], first.output_token_ids)
    again = make_request("x", PROMPTS[1], max_tokens=6)
    engine.add_request(again)  # the first has ended: its id may be used again
    engine.run_until_done()
    assert again.num_output_tokens == 6


def test_reject_reason_says_what_the_scheduler_would_refuse_without_queueing_it(tiny_model):
    engine = make_engine(tiny_model, num_gpu_blocks=4)  # 64 tokens of KV
    assert engine.reject_reason(make_request("fits", list(range(3, 13)), max_tokens=8)) is None
    why = engine.reject_reason(make_request("big", list(range(3, 13)), max_tokens=200))
    assert why.startswith("needs 14 KV blocks for 209 tokens but the GPU has 4")
    assert not engine.has_unfinished()  # asking queues nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch sees a CUDA device")
def test_cuda_without_a_cuda_device_is_refused_in_one_line():
    from gpu_backend.engine import check_device
    from policies import ConfigError

    assert check_device("cpu").type == "cpu"
    with pytest.raises(ConfigError, match="^--device: cuda was asked for but torch sees no CUDA device; "
                                          "choose one of cpu$"):
        check_device("cuda")


def test_concurrent_ingress_from_many_threads(tiny_model):
    engine = make_engine(tiny_model, max_num_seqs=8)
    finished = []
    lock = threading.Lock()

    def on_output(out):
        if out.finished:
            with lock:
                finished.append(out.req_id)

    def client(k):
        for j in range(5):
            engine.add_request(make_request(f"{k}-{j}", make_prompt(4 + j, seed=k * 10 + j), 3,
                                            arrival_time=engine.now()), on_output)

    engine.start()
    try:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = engine.now() + 60
        while len(finished) < 20 and engine.now() < deadline:
            threading.Event().wait(0.02)
    finally:
        engine.stop()
    assert sorted(finished) == sorted(f"{k}-{j}" for k in range(4) for j in range(5))
    assert len(engine.recorder.requests) == 20
    stats = engine.stats()
    assert stats["num_used_gpu_blocks"] == 0 and stats["num_requests"] == 20


def test_a_failing_step_on_the_background_thread_ends_every_request(tiny_model):
    engine = make_engine(tiny_model)
    finals = []
    done = threading.Event()

    def boom(plan):
        raise RuntimeError("device lost")

    engine.runner.execute = boom
    assert not engine.is_alive()
    engine.start()
    try:
        assert engine.is_alive()
        engine.add_request(make_request(0, PROMPTS[0], 4), lambda o: (finals.append(o), o.finished and done.set()))
        assert done.wait(30)
        engine._thread.join(10)
        assert not engine.is_alive()  # what the server's /health reports as 503
    finally:
        engine.stop()
    assert isinstance(engine.error, RuntimeError)
    assert [(o.finished, o.finish_reason) for o in finals] == [(True, "aborted")]
    assert engine.scheduler.block_manager.num_used_gpu_blocks == 0


def test_requests_added_after_the_engine_failed_end_at_once(tiny_model):
    engine = make_engine(tiny_model)
    engine.runner.execute = lambda plan: (_ for _ in ()).throw(RuntimeError("device lost"))
    engine.start()
    try:
        first = threading.Event()
        engine.add_request(make_request(0, PROMPTS[0], 4), lambda o: o.finished and first.set())
        assert first.wait(30)
        engine._thread.join(10)
        late = []
        engine.add_request(make_request(1, PROMPTS[1], 4), late.append)  # no engine thread will ever see it
    finally:
        engine.stop()
    assert [(o.req_id, o.finished, o.finish_reason, o.new_token_ids) for o in late] == [(1, True, "aborted", [])]
    assert sorted(engine.result().requests["finish_reason"]) == ["aborted", "aborted"]
    assert engine.result().requests["reject_reason"].str.startswith("engine error").all()


def test_a_request_finished_by_the_failing_step_still_gets_its_final_output(tiny_model):
    engine = make_engine(tiny_model)
    engine.step_hooks.append(lambda plan, result: 1 / 0)  # fails after update() ended the request
    finals = []
    done = threading.Event()
    engine.start()
    try:
        engine.add_request(make_request(0, PROMPTS[0], 1), lambda o: (finals.append(o), o.finished and done.set()))
        assert done.wait(30), "the client of a request finished in the failing step was never told"
    finally:
        engine.stop()
    assert isinstance(engine.error, ZeroDivisionError)
    assert [(o.finished, o.finish_reason) for o in finals] == [(True, "length")]


def test_result_from_another_thread_while_the_engine_runs(tiny_model):
    import sys

    engine = make_engine(tiny_model, max_num_seqs=4)  # a few hundred steps
    errors, stop = [], threading.Event()

    def read_results():
        while not stop.is_set():
            try:
                res = engine.result()
                assert len(res.steps) <= engine.num_steps
            except Exception as exc:  # e.g. table columns of different lengths
                errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches anywhere: a torn snapshot shows up at once
    engine.start()
    readers = [threading.Thread(target=read_results, daemon=True) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        done = [threading.Event() for _ in range(40)]
        for i, ev in enumerate(done):
            engine.add_request(make_request(i, make_prompt(8, seed=i), 20), lambda o, ev=ev: o.finished and ev.set())
        assert all(ev.wait(60) for ev in done)
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)
        engine.stop()
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert len(engine.result().requests) == 40


def test_warm_up_leaves_no_trace(tiny_model, hf_ref):
    engine = make_engine(tiny_model, num_gpu_blocks=8, block_size=4)
    engine.warm_up()
    assert engine.num_steps == 0 and not engine.recorder.requests and not engine.recorder.steps
    assert engine.scheduler.block_manager.num_used_gpu_blocks == 0
    reqs = serve(engine, PROMPTS[1:2], max_tokens=6)
    check_against_reference(hf_ref, reqs, PROMPTS[1:2])


def test_requests_the_scheduler_ends_without_sampling_get_a_final_output(tiny_model):
    # e.g. a scheduler rejecting a request while scheduling: here one ends behind the engine's back
    engine = make_engine(tiny_model)
    outputs = []
    a, b = make_request("a", PROMPTS[0], 20), make_request("b", PROMPTS[1], 5)
    for r in (a, b):
        engine.add_request(r, outputs.append)
    schedule = engine.scheduler.schedule

    def rejecting_schedule(now):
        if engine.num_steps == 2:
            engine.scheduler.abort_request("a", now)
        return schedule(now)

    engine.scheduler.schedule = rejecting_schedule
    engine.run_until_done()
    finals = {o.req_id: o.finish_reason for o in outputs if o.finished}
    assert finals == {"a": "aborted", "b": "length"}
    assert engine.scheduler.block_manager.num_used_gpu_blocks == 0


def test_a_callback_that_raises_does_not_stop_the_engine_for_others(tiny_model, hf_ref):
    engine = make_engine(tiny_model)
    good, calls = [], []

    def broken(output):
        calls.append(output)
        raise RuntimeError("client went away badly")

    engine.add_request(make_request("bad", PROMPTS[0], 6), broken)
    engine.add_request(make_request("good", PROMPTS[1], 6), good.append)
    engine.run_until_done()
    assert len(calls) == 1  # dropped after it raised
    assert good[-1].finished and sum(len(o.new_token_ids) for o in good) == 6
    assert all(r.is_finished for r in engine.recorder.requests)
    assert engine.scheduler.block_manager.num_used_gpu_blocks == 0


class Ticks:
    """An engine clock that moves 0.1 ms a reading: the same calls give the same times, run after run."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1e-4
        return self.t


def ticking_engine(model, stream_to=None, **kw) -> Engine:
    """`make_engine` on a `Ticks` clock, streaming its records (batches of 3 requests, 7 steps) into
    `stream_to` when given."""
    engine = make_engine(model, max_num_seqs=4, **kw)
    engine.clock = engine.runner.clock = Ticks()
    engine._t0 = 0.0
    if stream_to is not None:
        engine.stream_records(stream_to, request_batch=3, step_batch=7)
    return engine


def test_streamed_records_are_the_in_memory_ones(tiny_model, tmp_path):
    """The same requests on the same clock: write_records of a streaming engine, mid-run (requests
    still running) and at the end, writes the tables and summary `result().save` writes (rows in
    the order requests ended)."""
    import json

    import pandas as pd

    def drive(engine, out):
        for i in range(20):
            engine.add_request(make_request(i, make_prompt(6 + i % 5, seed=i), 4 + i % 6, arrival_time=engine.now()))
            engine.step()
            if i == 12:
                engine.write_records(out / "mid")
        engine.run_until_done()
        engine.write_records(out / "end")

    drive(ticking_engine(tiny_model), tmp_path / "old")
    drive(ticking_engine(tiny_model, tmp_path / "spool"), tmp_path / "new")
    for when in ("mid", "end"):
        old, new = tmp_path / "old" / when, tmp_path / "new" / when
        for name in ("requests.csv", "steps.csv") + (("requests.parquet", "steps.parquet")
                                                    if (old / "steps.parquet").exists() else ()):
            read = pd.read_csv if name.endswith(".csv") else pd.read_parquet
            want, got = read(old / name), read(new / name)
            if name.startswith("requests"):
                want, got = (t.sort_values("req_id").reset_index(drop=True) for t in (want, got))
            pd.testing.assert_frame_equal(got, want, check_dtype=False)
        assert_summaries_match(json.loads((new / "summary.json").read_text()),
                               json.loads((old / "summary.json").read_text()))
    mid = pd.read_csv(tmp_path / "new" / "mid" / "requests.csv")
    assert len(mid) == 13 and (mid["finish_reason"] == "unfinished").any()


def assert_summaries_match(got, want, key: str = "") -> None:
    """Summaries equal key for key, floats to rounding (a streamed one sums batch by batch)."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), key
        for k in want:
            assert_summaries_match(got[k], want[k], f"{key}.{k}")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15, nan_ok=True), key
    else:
        assert got == want, key


def alive(cls) -> int:
    import gc

    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is cls)


def test_a_streaming_engine_holds_what_is_live_not_what_finished(tiny_model, tmp_path):
    """N requests through an engine that streams its records: the Request and StepRecord objects
    alive stay within what runs (4 at a time) plus a batch of each, however large N; an engine
    keeping its records in memory holds every one."""
    from policies import Request
    from records.results import StepRecord

    def serve_waves(engine, num_waves: int) -> list[tuple[int, int]]:
        held = []
        for wave in range(num_waves):
            for i in range(4):
                engine.add_request(make_request(f"{wave}-{i}", make_prompt(5 + i, seed=i), 3))
            engine.run_until_done()
            if wave % 4 == 3:  # (a count walks every object in the process: not after every wave)
                held.append((alive(Request), alive(StepRecord)))
        return held

    base = (alive(Request), alive(StepRecord))
    streamed = serve_waves(ticking_engine(tiny_model, tmp_path / "spool"), 12)  # 48 requests, 4 at a time
    assert max(r for r, _ in streamed) - base[0] <= 4 + 3  # in flight + a request batch
    assert max(s for _, s in streamed) - base[1] <= 7 + 1  # a step batch + engine.last_step
    kept = serve_waves(ticking_engine(tiny_model), 12)
    assert kept[-1][0] - base[0] >= 48 and kept[-1][1] - base[1] >= 3 * 12  # O(N): every request and step


def test_a_streaming_engine_refuses_result_and_a_late_switch(tiny_model, tmp_path):
    engine = ticking_engine(tiny_model, tmp_path / "spool")
    with pytest.raises(RuntimeError, match="write_records"):
        engine.result()
    engine = ticking_engine(tiny_model)
    serve(engine, PROMPTS[:1], max_tokens=2)
    with pytest.raises(RuntimeError, match="before the first request"):
        engine.stream_records(tmp_path / "spool2")
    streaming = ticking_engine(tiny_model, tmp_path / "spool3")
    spool = next((tmp_path / "spool3").iterdir())
    assert spool.name.startswith(".servesim-spool-")
    streaming.close_records()
    assert not spool.exists()

"""Micro-benchmarks of the engine's ops: clocks, a tiny calibration run end to end, CLI errors."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from calibrate.bench import calibrate, clock_for, time_call  # noqa: E402
from calibrate_helpers import MICRO, micro_grid  # noqa: E402
from servesim.commands.calibrate import run as cli_run  # noqa: E402
from sim.latency.profiled import REQUIRED_OPS, Profile, ProfiledLatencyModel  # noqa: E402

@pytest.fixture(scope="module")
def micro_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("micro") / "config.json"
    path.write_text(json.dumps(MICRO))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return calibrate(path, "cpu", progress=False, grid=micro_grid()), path
    finally:
        torch.set_num_threads(threads)


def test_time_call_times_every_repeat_after_warmup():
    calls = []
    times = time_call(lambda: calls.append(1), warmup=2, repeats=5, device=torch.device("cpu"))
    assert len(calls) == 7 and len(times) == 5 and all(t >= 0 for t in times)


def test_single_threaded_cpu_runs_use_thread_cpu_time():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert clock_for(torch.device("cpu"))[1] == "thread_cpu"
        torch.set_num_threads(2)
        assert clock_for(torch.device("cpu"))[1] == "wall"
    finally:
        torch.set_num_threads(threads)


def test_a_calibration_run_yields_a_complete_loadable_profile(micro_profile, tmp_path):
    profile, config_path = micro_profile
    assert set(REQUIRED_OPS) <= set(profile.ops)
    assert {"step_overhead", "swap_out", "swap_in", "sampler", "rotary"} <= set(profile.ops)
    for name, op in profile.ops.items():
        assert op.points and "median_abs_pct" in op.fit_error, name
    meta = profile.meta
    assert meta["source"] == "calibrate" and meta["torch_version"] == torch.__version__
    assert meta["attention_includes_kv_write"] and meta["clock"] == "thread_cpu"
    assert profile.model["hidden_size"] == 64 and profile.model["dtype"] == "float32"
    # raw points: one row per timed call (warm-ups excluded), every grid shape present
    assert len(profile.ops["qkv_proj"].points) == 3 * 3
    assert sorted({p[0] for p in profile.ops["qkv_proj"].points}) == [1.0, 8.0, 64.0]
    loaded = Profile.load(profile.save(tmp_path / "micro.json"))
    lm = ProfiledLatencyModel(loaded, model={**MICRO, "tensor_parallel_size": 1, "head_dim": 16})
    assert lm.missing_ops == ("all_reduce",)


def test_a_bigger_op_takes_longer(micro_profile):
    profile, _ = micro_profile
    gemm = profile.ops["gate_up_proj"].curve
    assert gemm(64) >= gemm(1)
    dec = profile.ops["attn_decode"].curve
    assert dec(4, 128) >= dec(1, 32)


def test_measure_mode_needs_model_and_out():
    import argparse

    args = argparse.Namespace(action=None, model=None, out=None, device="cpu", quick=True, threads=1,
                              no_progress=True)
    with pytest.raises(ValueError, match="^--model: measure mode needs"):
        cli_run(args)



def test_cold_weights_rotate_over_one_step_of_weight_traffic(tmp_path):
    from calibrate.bench import COLD_BYTES_CAP, OpBench
    from gpu_backend.model_config import ModelConfig

    (tmp_path / "config.json").write_text(json.dumps(MICRO))
    bench = OpBench(ModelConfig.from_json(tmp_path / "config.json"), "cpu")
    module = bench.ops["gate_up"]
    own = sum(p.numel() * p.element_size() for p in module.parameters())
    f = bench.cold(module)
    copies = f.copies
    # enough distinct weight tensors to cover the model's weight bytes (a step's traffic), not more
    assert len({c.weight.data_ptr() for c in copies}) == len(copies)
    assert len(copies) * own >= min(bench.weight_bytes, COLD_BYTES_CAP) > (len(copies) - 1) * own
    assert len(copies) >= 2  # the model has more weights than this one GEMM
    # calls cycle through every copy, and each computes exactly what the module does
    x = bench.rand(3, bench.config.hidden_size)
    with torch.inference_mode():
        ref = module(x)
        assert all(torch.equal(f(x), ref) for _ in range(2 * len(copies)))


def test_a_run_between_the_engine_halves_is_bracketed_and_not_counted(tmp_path):
    import time

    path = tmp_path / "config.json"
    path.write_text(json.dumps(MICRO))
    calls = []

    def between():
        calls.append(time.perf_counter())
        time.sleep(0.3)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        profile = calibrate(path, "cpu", progress=False, grid=micro_grid(), between=between)
        total = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 1
    assert profile.meta["bracketed_s"] >= 0.3
    assert profile.meta["calibration_s"] <= total - 0.25  # the bracketed run is not calibration time (0.1 s rounding)
    # engine steps on both sides of it: the first half's group (1 request) and the second half's (3)
    fit = profile.meta["engine_step_fit"]
    assert fit["num_steps"] > 0 and set(fit["configurations"]) == {"chunked-16", "chunked-64", "chunked-256", "continuous-512"}
    assert isinstance(profile.meta["bracket_drift_pct"], float)  # both halves measured


def test_bracket_drift_is_the_slowdown_of_the_second_half_against_the_profile(micro_profile):
    from calibrate.bench import _decode_seqs, bracket_drift_pct
    from policies import BatchPlan

    profile, _ = micro_profile
    model = ProfiledLatencyModel(profile)
    plans = [BatchPlan(i, tuple(_decode_seqs(b, kv, 16))) for i, (b, kv) in enumerate([(1, 40), (3, 200), (8, 500)])]
    before = [("c", p, model.step_time(p) * f, False) for p, f in zip(plans, (1.0, 1.02, 0.98))]
    after = [("c", p, model.step_time(p) * 1.2 * f, False) for p, f in zip(plans, (1.0, 1.02, 0.98))]
    # a step after an idle pause does not count, however slow
    after.append(("c", plans[0], model.step_time(plans[0]) * 5, True))
    assert bracket_drift_pct(profile, before, after) == pytest.approx(20.0, abs=0.15)
    assert bracket_drift_pct(profile, after, before) == pytest.approx(-16.7, abs=0.15)
    assert bracket_drift_pct(profile, before, []) is None


@pytest.mark.parametrize("max_len", [300, 1024, 2048])
def test_grids_reach_the_longest_prompt_and_context_and_never_pass_them(max_len):
    from calibrate.bench import Grid

    for mode in ("quick", "full"):
        g = Grid.make(mode, max_len=max_len)
        assert (max_len, max_len) in g.prefill  # a whole prompt of max_len, one chunk (continuous, static)
        assert max(L for _, L in g.decode) == max_len
        assert all(ctx <= max_len for _, ctx in g.prefill) and all(L <= max_len for _, L in g.decode)
    smoke, quick = Grid.make("smoke", max_len=max_len), Grid.make("quick", max_len=max_len)
    assert len(smoke.prefill) + len(smoke.decode) < (len(quick.prefill) + len(quick.decode)) / 3
    with pytest.raises(ValueError, match="grid"):
        Grid.make("tiny")


def test_the_after_prefill_probe_keeps_the_decode_batch_and_cycles_through_the_sizes(tmp_path):
    """Every kept cycle: one prefill of a probe size (those up to half the model's length), then
    decode-only steps of the same decoders, k counting up to the cycle's end; each size as often."""
    from calibrate.bench import OpBench, measure_after_prefill
    from calibrate.engine_steps import AFTER_PREFILL_CYCLE, AFTER_PREFILL_SIZES
    from gpu_backend.model_config import ModelConfig

    (tmp_path / "config.json").write_text(json.dumps(MICRO))
    bench = OpBench(ModelConfig.from_json(tmp_path / "config.json"), "cpu")
    records = measure_after_prefill(bench, repeats=2, progress=False)
    sizes = [n for n in AFTER_PREFILL_SIZES if n <= MICRO["max_position_embeddings"] // 2]
    assert len(records) == 2 * len(sizes) * AFTER_PREFILL_CYCLE and all(t > 0 for *_, t in records)
    for i in range(0, len(records), AFTER_PREFILL_CYCLE):
        cycle = records[i:i + AFTER_PREFILL_CYCLE]
        assert [k for _, k, _ in cycle] == list(range(AFTER_PREFILL_CYCLE))
        assert len({n for n, _, _ in cycle}) == 1 and cycle[0][0] in sizes
    assert sorted(n for n, k, _ in records if k == 0) == sorted(sizes * 2)

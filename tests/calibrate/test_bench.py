"""A tiny calibration run end to end, a run bracketed by its engine halves, CLI errors."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from calibrate.bench import calibrate  # noqa: E402
from calibrate_helpers import MICRO, micro_grid  # noqa: E402
from policies import ConfigError  # noqa: E402
from servesim.commands.calibrate import run as cli_run  # noqa: E402
from sim.latency.profile import REQUIRED_OPS, Profile  # noqa: E402
from sim.latency.profiled import ProfiledLatencyModel  # noqa: E402


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
    from calibrate.op_bench import _decode_seqs
    from calibrate.engine_bench import bracket_drift_pct
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


def test_an_fp8_checkpoint_is_refused_before_the_engine_is_built(tmp_path):
    # the engine runs 16- or 32-bit weights: its GEMMs timed as an FP8 checkpoint's would mislabel the profile
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MICRO, "quantization_config": {"quant_method": "fp8"}}))
    with pytest.raises(ConfigError, match=r"^model: .* has fp8 weights, which the engine does not run"):
        calibrate(path, "cpu", progress=False, grid=micro_grid(), probe=False)

"""The speed probe (calibrate.speed_probe): readings, the speed they give, and what it divides out."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate.speed_probe import SpeedProbe  # noqa: E402
from calibrate_helpers import MICRO  # noqa: E402
from gpu_backend.engine import Engine, EngineConfig  # noqa: E402
from gpu_backend.model import build_model  # noqa: E402
from gpu_backend.model_config import ModelConfig  # noqa: E402
from policies import CacheConfig, Request, SchedulerConfig  # noqa: E402


@pytest.fixture(scope="module")
def micro_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("micro") / "config.json"
    path.write_text(json.dumps(MICRO))
    return build_model(ModelConfig.from_json(path), seed=0)


def probe_with(readings, window: int = 3) -> SpeedProbe:
    """A probe holding hand-made (time, seconds, context) readings."""
    probe = SpeedProbe.__new__(SpeedProbe)
    probe.readings, probe.window, probe.interval_s = list(readings), window, 0.1
    return probe


def test_the_speed_is_the_median_of_the_nearest_readings_over_the_reference():
    # the machine runs the reference step in 1 ms, then in 1.2 ms from t = 10 s on; one outlier
    readings = [(float(t), 0.001 if t < 10 else 0.0012, "steps") for t in range(20)]
    readings[3] = (3.0, 0.005, "steps")
    probe = probe_with(readings, window=3)
    speed = probe.speed_at([0.5, 3.0, 5.0, 15.0, 25.0], reference=0.001)
    assert speed[0] == pytest.approx(1.0) and speed[1] == pytest.approx(1.0)  # the outlier is outvoted
    assert speed[2] == pytest.approx(1.0)
    assert speed[3] == pytest.approx(1.2) and speed[4] == pytest.approx(1.2)  # past the end: the last window


def test_readings_of_another_context_do_not_move_the_speed():
    readings = [(float(t), 0.001, "steps") for t in range(10)] + [(t + 0.5, 0.003, "ops") for t in range(10)]
    probe = probe_with(sorted(readings), window=5)
    assert np.allclose(probe.speed_at([1.0, 5.0, 9.0], 0.001), 1.0)
    assert np.allclose(probe.speed_at([1.0, 5.0], 0.001, context="ops"), 3.0)
    assert probe.level(context="ops") == pytest.approx(0.003)
    assert probe.level(2.0, 4.0) == pytest.approx(0.001)
    assert probe.level(2.0, 4.0, outside=True) == pytest.approx(0.001)


def test_the_scatter_is_each_readings_distance_from_the_speed_around_it():
    steady = probe_with([(float(t), 0.001, "steps") for t in range(20)])
    assert steady.scatter() == pytest.approx(0.0)
    # a drift is followed by the window, so it is no scatter: 1.0 ms to 1.2 ms over 100 readings
    drift = probe_with([(float(t), 0.001 * (1 + 0.002 * t), "steps") for t in range(100)])
    assert drift.scatter() < 0.5
    # alternating 1.0 / 1.2 ms: each reading sits between two of the other kind (window 3)
    jitter = probe_with([(float(t), 0.001 if t % 2 else 0.0012, "steps") for t in range(40)])
    assert 15.0 < jitter.scatter() < 21.0
    # within a window of time, or outside it; too few readings: None
    mixed = probe_with([(float(t), 0.001 if t < 20 or t % 2 else 0.0012, "steps") for t in range(40)])
    assert mixed.scatter(0.0, 18.0) == pytest.approx(0.0)
    assert mixed.scatter(0.0, 18.0, outside=True) > 15.0
    assert probe_with([(0.0, 0.001, "steps")]).scatter() is None
    summary = mixed.summary(0.001, 21.0, 39.0)
    assert summary["run_scatter_pct"] > 15.0 and summary["calibration_scatter_pct"] < 5.0


def test_without_readings_or_reference_the_speed_is_one():
    assert np.allclose(probe_with([]).speed_at([1.0, 2.0], 0.001), 1.0)
    assert np.allclose(probe_with([(0.0, 0.002, "steps")]).speed_at([1.0], None), 1.0)


def test_without_a_reference_the_summary_gives_no_run_speed():
    # a profile made without the probe has no reference: a run speed of 1.0 would be a reading of nothing
    probe = probe_with([(float(t), 0.001 if t % 2 else 0.0012, "steps") for t in range(40)])
    summary = probe.summary(None, 0.0, 39.0)
    assert summary["reference_s"] is None and "run_median" not in summary and "run_num_readings" not in summary
    assert summary["run_scatter_pct"] > 15.0  # the scatter needs no reference
    assert probe.summary(0.001, 0.0, 39.0)["run_median"] > 1.0


def test_normalizing_divides_a_slow_stretch_out_of_steps_and_op_points():
    # a machine 25% slower from t = 5 s: the probe and every step or op timed then are slowed alike
    slow = lambda t: 1.25 if t >= 5 else 1.0  # noqa: E731
    readings = [(t / 2, 0.002 * slow(t / 2), c) for t in range(20) for c in ("steps", "ops")]
    probe = probe_with(readings, window=3)
    true = [0.010, 0.004, 0.020, 0.007]
    at = [1.0, 2.0, 7.0, 9.0]
    steps = [("cfg", None, s * slow(a), False, a) for s, a in zip(true, at)]
    normalized = probe.normalize_steps(steps, reference=0.002)
    assert [s[2] for s in normalized] == pytest.approx(true)
    assert [(s[0], s[3], s[4]) for s in normalized] == [(s[0], s[3], s[4]) for s in steps]
    # op timings against the median reading among the op benchmarks (half of them slow here): the
    # slow stretch is divided out, and what is left is one factor the in-step scales carry
    points = {"qkv_proj": [[8.0, s * slow(a)] for s, a in zip(true, at)]}
    out = probe.normalize_points(points, {"qkv_proj": at})
    assert [r[1] for r in out["qkv_proj"]] == pytest.approx([t * 0.00225 / 0.002 for t in true])
    assert [r[0] for r in out["qkv_proj"]] == [8.0] * 4


def test_a_real_probe_reads_at_most_every_interval(micro_model):
    probe = SpeedProbe(micro_model, "cpu", clock=time.thread_time, interval_s=60.0)
    spent = probe.maybe_read()
    assert spent > 0 and len(probe.readings) == 1
    assert probe.maybe_read() == 0.0 and len(probe.readings) == 1  # within the interval: nothing
    probe.read("ops")
    (t0, s0, c0), (t1, s1, c1) = probe.readings
    assert t1 > t0 and s0 > 0 and s1 > 0 and (c0, c1) == ("steps", "ops")
    summary = probe.summary(s0, t0 - 1, t1 + 1)
    assert summary["run_num_readings"] == 1 and summary["reference_s"] == s0


def _engine(model) -> Engine:
    cfg = EngineConfig(model=model.config, scheduler=SchedulerConfig(policy="chunked", max_num_batched_tokens=32,
                                                                      max_num_seqs=4, max_model_len=256),
                       cache=CacheConfig(block_size=16, num_gpu_blocks=64))
    return Engine(cfg, "cpu", model=model)


def _tokens(engine, prompts) -> dict:
    out = {}
    for i, p in enumerate(prompts):
        engine.add_request(Request(f"r{i}", 0.0, len(p), 6, prompt_token_ids=p),
                           on_output=lambda o, i=i: out.setdefault(i, []).extend(o.new_token_ids))
    engine.run_until_done()
    return out


def test_reading_the_probe_between_steps_leaves_the_engine_s_results_alone(micro_model):
    """The probe runs the engine's model on a KV cache of its own: the engine's tokens are the same."""
    prompts = [[5 + i + j % 7 for j in range(20 + 9 * i)] for i in range(3)]
    plain = _tokens(_engine(micro_model), prompts)
    engine = _engine(micro_model)
    probe = SpeedProbe(micro_model, "cpu", clock=time.thread_time, interval_s=0.0)
    engine.step_hooks.append(lambda plan, result: probe.read())
    probed = _tokens(engine, prompts)
    assert len(probe.readings) >= 6
    assert probed == plain and all(len(t) == 6 for t in plain.values())

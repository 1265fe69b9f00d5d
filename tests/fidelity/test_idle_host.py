"""Idle-engine host time: measured from requests alone in the engine, never used on its own run."""
from __future__ import annotations

import numpy as np
import pytest
from fidelity_helpers import MODEL, make_requests, write_exp_config, write_spans

from fidelity.host_overhead import HostOverhead, HostOverheadLatencyModel
from fidelity.idle_host import (VLLM_V1_H100, IdleHostLayer, alone, frontend_gaps, idle_host_times,
                                    measure_layer)
from fidelity.predict import compute_prior, host_prior, predict_run
from fidelity.run_folders import find_runs
from fidelity.runs import RealRun, ServerArgs
from fidelity.sources.vllm_server import load_server_run


class NoHost:
    """The roofline's GPU time without its own host constants (the 'kernel data' of these tests)."""

    def __init__(self, config):
        from sim.latency import build_latency_model
        from sim.latency.roofline import RooflineConstants

        self.lm = build_latency_model(config.model.spec(), config.hardware, 16,
                                      RooflineConstants(step_overhead_s=0.0, per_seq_overhead_s=0.0))

    def step_time(self, plan):
        return self.lm.step_time(plan)


def _measured_with_host(tmp_path, host_s: float, async_scheduling: bool = False):
    """A run whose requests arrive far apart (alone in the engine), measured with `host_s` per step."""
    from sim.config import load_config
    from fidelity.from_run import config_dict_for_run
    from fidelity.replay import ReplayWorkload
    from sim.runner import simulate

    req = make_requests(12, rate=0.2, seed=4)
    folder = write_exp_config(tmp_path / "idle", gpu="H100", async_scheduling=async_scheduling)
    run = RealRun("idle", "hand-made", folder, ServerArgs(model=MODEL, gpu="H100", max_model_len=4096,
                                                          max_num_batched_tokens=2048, max_num_seqs=64,
                                                          async_scheduling=async_scheduling),
                  req.assign(prefix_group=-1, num_prefix_tokens=0))
    config = load_config(config_dict_for_run(run))
    gpu = NoHost(config)
    res = simulate(config, latency_model=HostOverheadLatencyModel(gpu, HostOverhead(schedule_s=host_s)),
                   workload=ReplayWorkload(run.requests))
    p = res.requests.set_index(res.requests["req_id"].astype(str)).loc[req["req_id"]]
    write_spans(folder, req, p["ttft_s"].to_numpy(), p["e2e_s"].to_numpy())
    return load_server_run(folder), gpu


def test_host_time_of_requests_alone_is_recovered(tmp_path):
    run, gpu = _measured_with_host(tmp_path, 0.8e-3)
    assert alone(run.requests).sum() >= 10
    h = idle_host_times(run, gpu)
    assert len(h) >= 10
    assert np.median(h) == pytest.approx(0.8e-3, rel=0.05)


def test_an_async_engine_hides_its_host_time_so_none_is_measured(tmp_path):
    """With async scheduling a lone request's steps take max(GPU, host): its TPOT is the GPU's, and
    reading host time off it would measure nothing, so nothing is read."""
    run, gpu = _measured_with_host(tmp_path, 0.8e-3, async_scheduling=True)
    serial, _ = _measured_with_host(tmp_path / "serial", 0.8e-3)
    assert run.requests["tpot_s"].median() < serial.requests["tpot_s"].median() - 0.5e-3  # the host time hid
    assert len(idle_host_times(serial, gpu)) >= 10
    assert len(idle_host_times(run, gpu)) == 0


def test_overlapping_requests_are_not_used():
    import pandas as pd

    req = pd.DataFrame({"arrival_time": [0.0, 1.0, 1.5, 5.0], "e2e_s": [0.5, 1.0, 0.2, 0.1]})
    assert alone(req).tolist() == [True, False, False, True]


def test_a_run_is_never_predicted_with_its_own_measurement():
    layer = IdleHostLayer({"a": 1e-3, "b": 2e-3, "c": 10e-3})
    assert layer.host_s_for("c") == pytest.approx(1.5e-3)
    assert layer.host_s_for("unseen") == pytest.approx(2e-3)
    assert IdleHostLayer({"a": 1e-3}).host_s_for("a") is None


def test_host_prior_by_engine_and_gpu(tmp_path):
    from sim.latency.roofline import RooflineConstants

    layer = IdleHostLayer.load(VLLM_V1_H100)
    v1 = RealRun("unseen", "x", tmp_path, ServerArgs(model=MODEL, gpu="H100"), make_requests(2))
    assert host_prior("aiconfigurator", v1).schedule_s == pytest.approx(layer.host_s_for(None))
    assert host_prior("aiconfigurator", v1).frontend_s == pytest.approx(layer.frontend_s_for(None))
    assert compute_prior(v1) == pytest.approx(layer.compute_factor_for(None))
    assert compute_prior(v1, measured=False) == 1.0
    name = sorted(layer.per_run)[0]
    shipped = RealRun(name, "x", tmp_path, ServerArgs(model=MODEL, gpu="H100"), make_requests(2))
    assert host_prior("aiconfigurator", shipped).schedule_s == pytest.approx(layer.host_s_for(name))
    other_gpu = RealRun("a100", "x", tmp_path, ServerArgs(model=MODEL, gpu="A100"), make_requests(2))
    assert host_prior("aiconfigurator", other_gpu).schedule_s == RooflineConstants().step_overhead_s
    assert host_prior("layer-profile", v1) == HostOverhead()


def test_shipped_layer_is_reproduced_from_the_runs(shared_data):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    runs = find_runs(shared_data / "groundtruth" / "vllm-0.11-jan2026")
    fresh = measure_layer(runs)
    shipped = IdleHostLayer.load(VLLM_V1_H100)
    assert fresh.per_run == pytest.approx(shipped.per_run, rel=1e-3)
    assert fresh.frontend_per_run == pytest.approx(shipped.frontend_per_run, rel=1e-3)
    # handing a request to the engine core and its first token back: milliseconds
    assert all(2e-4 < v < 1e-2 for v in fresh.frontend_per_run.values())
    assert fresh.compute_factor_per_run == pytest.approx(shipped.compute_factor_per_run, rel=1e-3)
    # a busy H100's sustained clock under its power limit: compute-bound work somewhat slower, not 2x
    assert len(fresh.compute_factor_per_run) >= 3
    assert all(1.0 < v < 1.3 for v in fresh.compute_factor_per_run.values())
    # a v1 engine's host work between CUDA-graph decode steps: a fraction of a millisecond, not tens
    assert all(1e-4 < v < 2e-3 for v in fresh.per_run.values())


def test_prediction_records_the_prior_it_used(tmp_path):
    run, _ = _measured_with_host(tmp_path, 0.5e-3)
    pred = predict_run(run, gpu_model="roofline")
    assert pred.overhead == HostOverhead()  # the roofline carries its own host constants


def test_frontend_gap_is_taken_from_requests_alone(tmp_path):
    # alone: 2 ms outside queue + prefill; overlapping ones also wait for the step they arrived in
    import pandas as pd

    req = make_requests(8, rate=1.0, seed=1)
    arrival = np.array([0.0, 10.0, 20.0, 20.1, 20.2, 40.0, 50.0, 60.0])
    e2e = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    ttft = np.full(8, 0.2)
    folder = write_exp_config(tmp_path / "gaps", gpu="H100")
    path = write_spans(folder, req.assign(arrival_time=arrival), ttft, e2e)
    df = pd.read_csv(path)
    overlapping = np.isin(np.arange(8), [2, 3, 4])
    df["time_in_prefill_s"] = np.where(overlapping, 0.18, 0.198)  # gap 20 ms vs 2 ms
    df.to_csv(path, index=False)
    gaps = frontend_gaps(load_server_run(folder))
    assert len(gaps) == 5
    assert gaps == pytest.approx(np.full(5, 0.002))


@pytest.mark.parametrize("text, match", [("{cut", "not valid JSON"), ("[]", "does not hold a JSON object"),
                                         ('{"format": "other"}', "is not a")])
def test_a_broken_layer_file_is_one_error_naming_the_host_layer(tmp_path, text, match):
    path = tmp_path / "layer.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^host layer: .*{match}"):
        IdleHostLayer.load(path)
    assert IdleHostLayer.load(IdleHostLayer.load(VLLM_V1_H100).save(path)) == IdleHostLayer.load(VLLM_V1_H100)

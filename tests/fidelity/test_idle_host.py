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
    # the two runs a client timed too: milliseconds per request plus a tokenizer's microseconds per token
    assert len(fresh.client_frontend_per_run) == 2
    for run, (intercept, per_token) in fresh.client_frontend_per_run.items():
        assert (intercept, per_token) == pytest.approx(shipped.client_frontend_per_run[run], rel=1e-3)
        assert 1e-3 < intercept < 1e-2 and 2e-7 < per_token < 1e-5
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


def _client_timed_folder(tmp_path, beyond_s, warm_up_s=0.025):
    """Spans of requests alone (and three overlapping ones) with guidellm's client rows whose TTFT
    exceeds the span's by `beyond_s(prompt tokens)`; the first request also pays `warm_up_s`."""
    import pandas as pd

    req = make_requests(14, seed=2, prompt=(500, 4000))
    arrival = np.arange(14) * 10.0
    arrival[[5, 6, 7]] = [50.0, 50.1, 50.2]  # these three overlap: their gaps also hold a step wait
    folder = write_exp_config(tmp_path / "client", gpu="H100")
    ttft, e2e = np.full(14, 0.3), np.full(14, 2.0)
    write_spans(folder, req.assign(req_id=[f"cmpl-{i}-0" for i in range(14)], arrival_time=arrival), ttft, e2e)
    beyond = beyond_s(req["num_prompt_tokens"].to_numpy(float))
    beyond[0] += warm_up_s
    beyond[[5, 6, 7]] += 0.5
    status = ["successful"] * 13 + ["errored"]
    beyond[13] += 5.0  # a failed request's times say nothing
    pd.DataFrame({"status": status, "response_id": [f"cmpl-{i}" for i in range(14)],
                  "ttft_ms": (ttft + beyond) * 1e3}).to_csv(folder / "guidellm_per_request.csv", index=False)
    return load_server_run(folder), req


def test_the_clients_ttft_beyond_the_span_is_a_line_over_prompt_tokens(tmp_path):
    from fidelity.idle_host import client_gaps, client_line

    run, req = _client_timed_folder(tmp_path, lambda n: 0.0035 + 1.8e-6 * n)
    tokens, beyond = client_gaps(run)
    assert len(beyond) == 10  # the overlapping three and the failed one are left out
    intercept, slope = client_line(tokens, beyond)
    # the warm-up request does not tilt it (a least-squares line would)
    assert (intercept, slope) == pytest.approx((0.0035, 1.8e-6), rel=1e-6)
    lsq_slope, lsq_intercept = np.polyfit(tokens, beyond, 1)
    assert abs(lsq_intercept - 0.0035) > 1e-3
    layer = measure_layer([run])
    assert layer.client_frontend_per_run[run.name] == pytest.approx((0.0035, 1.8e-6), rel=1e-6)
    (run.path / "guidellm_per_request.csv").unlink()  # spans alone: no client times to compare
    assert client_gaps(run)[1].size == 0 and measure_layer([run]).client_frontend_per_run == {}


def test_client_lines_are_medians_over_other_runs_and_read_back(tmp_path):
    layer = IdleHostLayer({"a": 1e-3}, client_frontend_per_run={"a": (3e-3, 1e-6), "b": (5e-3, 3e-6),
                                                                 "c": (4e-3, 2e-6)})
    assert layer.client_frontend_for("a") == pytest.approx((4.5e-3, 2.5e-6))
    assert layer.client_frontend_for(None) == pytest.approx((4e-3, 2e-6))
    assert IdleHostLayer({"a": 1e-3}).client_frontend_for(None) is None
    path = layer.save(tmp_path / "layer.json")
    assert IdleHostLayer.load(path).client_frontend_per_run == layer.client_frontend_per_run
    import json
    data = json.loads(path.read_text())
    data["client_frontend_per_run"]["a"] = [3e-3]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"^host layer.client_frontend_per_run.a: .*expected \[seconds"):
        IdleHostLayer.load(path)


def test_a_client_timed_v1_run_gets_a_real_api_servers_front_end(tmp_path):
    """Source-out: a vLLM v1 H100 run timed at its client takes the layer's span gap plus its client
    line (a real vLLM API server's, measured on another source); one timed at the server only the
    span gap; a run of the layer's own source our serve stack's."""
    from fidelity.predict import source_out_prior

    layer = IdleHostLayer.load(VLLM_V1_H100)
    intercept, per_token = layer.client_frontend_for(None)
    server = ServerArgs(model=MODEL, gpu="H100")
    client = RealRun("unseen", "other", tmp_path, server, make_requests(2), measured_by="inference-perf-summary")
    prior, evidence = source_out_prior("aiconfigurator", client)
    assert prior.frontend_s == pytest.approx(layer.frontend_s_for(None) + intercept)
    assert prior.frontend_per_token_s == pytest.approx(per_token)
    assert any("a vLLM API server's" in e for e in evidence)
    spans = RealRun("unseen", "other", tmp_path, server, make_requests(2), measured_by="vllm-spans")
    prior, _ = source_out_prior("aiconfigurator", spans)
    assert (prior.frontend_s, prior.frontend_per_token_s) == (pytest.approx(layer.frontend_s_for(None)), 0.0)
    own = RealRun(sorted(layer.per_run)[0], layer.source, tmp_path, server, make_requests(2), measured_by="vllm-spans")
    prior, evidence = source_out_prior("aiconfigurator", own)
    assert any("our serve stack" in e for e in evidence) and prior.frontend_per_token_s == 0.0


def test_the_front_end_per_prompt_token_adds_to_ttft_and_e2e_only():
    import pandas as pd

    from fidelity.host_overhead import apply_frontend

    req = pd.DataFrame({"num_prompt_tokens": [100, 1000], "ttft_s": [0.1, 0.2], "e2e_s": [1.0, 2.0],
                        "tpot_s": [0.01, 0.02]})
    out = apply_frontend(req, HostOverhead(frontend_s=0.003, frontend_per_token_s=2e-6))
    assert out["ttft_s"].tolist() == pytest.approx([0.1032, 0.205])
    assert (out["e2e_s"] - req["e2e_s"]).tolist() == pytest.approx([0.0032, 0.005])
    assert out["tpot_s"].tolist() == req["tpot_s"].tolist()

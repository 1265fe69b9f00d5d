"""Runs like the ones the issue is checked on, but not shipped: H100 vLLM runs of other models and
tensor-parallel degrees under an inference-perf shared_prefix profile (multi-turn chat, two
constant-rate stages), in inference-perf's output layout and in the vLLM-spans layout.

The "measurements" in these folders are made up by servesim's own roofline simulation: the tests
check plumbing and physics (every request accounted for, TP and MoE move step times the right
way), never accuracy.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from fidelity_helpers import ISSUE_PROFILE, write_exp_config, write_spans

from servesim.cli import main
from fidelity.predict import predict_run
from fidelity.runs import RealRun, ServerArgs
from fidelity.sources.vllm_server import load_server_run

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"
T0 = 1.75e9  # a unix time: inference-perf records absolute times


def small_profile(multi_turn: bool = True) -> dict:
    """The issue's profile with short stages (two rates) so that a test simulates ~70 sends."""
    p = copy.deepcopy(ISSUE_PROFILE)
    p["data"]["shared_prefix"].update(enable_multi_turn_chat=multi_turn, question_len=300, output_len=40)
    p["load"]["stages"] = [{"rate": 2, "duration": 10}, {"rate": 5, "duration": 10}]
    return p


def make_unseen_run(folder, model: str, tp: int, layout: str, multi_turn: bool = True):
    """A run folder: exp-config.yaml + profile.yaml + measurements simulated with the roofline."""
    server = {"tensor_parallelism": tp, "max_num_batched_tokens": 2048, "max_num_seqs": 128, "max_model_len": 8192}
    write_exp_config(folder, model=model, **server)
    profile = small_profile(multi_turn)
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    args = ServerArgs(model=model, gpu="H100", tensor_parallel_size=tp, max_model_len=8192,
                      max_num_batched_tokens=2048, max_num_seqs=128)
    empty = pd.DataFrame(columns=["req_id", "arrival_time", "num_prompt_tokens", "num_output_tokens"])
    made_up = predict_run(RealRun(folder.name, "made-up", folder, args, empty, profile), gpu_model="roofline")
    req = made_up.requests.sort_values("arrival_time").reset_index(drop=True)
    req = req[req["first_token_time"].notna()]
    if layout == "inference-perf":
        entries = []
        for r in req.itertuples():
            start = T0 + r.arrival_time
            n = int(r.num_output_tokens)
            times = list(np.linspace(start + r.ttft_s, start + r.e2e_s, n))
            entries.append({"start_time": start, "end_time": start + r.e2e_s, "request": {"prompt": "..."},
                            "info": {"request_metrics": {"text": {"input_tokens": int(r.num_prompt_tokens)}},
                                     "response_metrics": {"output_tokens": n, "output_token_times": times}},
                            "error": None})
        (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps(entries))
        (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({"successes": {"latency": {
            "time_to_first_token": {"mean": float(req["ttft_s"].mean())},
            "time_per_output_token": {"mean": float(req["tpot_s"].mean())},
            "request_latency": {"mean": float(req["e2e_s"].mean())}}}}))
    else:
        spans = req.rename(columns={"num_prompt_tokens": "num_prompt_tokens"})
        write_spans(folder, spans.assign(req_id=spans["req_id"].astype(str)), req["ttft_s"].to_numpy(),
                    req["e2e_s"].to_numpy())
    return folder, req


@pytest.fixture(scope="module")
def aiconfigurator():
    return pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")


@pytest.mark.parametrize("model,tp,layout", [
    (LLAMA_70B, 2, "inference-perf"), (LLAMA_70B, 4, "spans"), (LLAMA_70B, 8, "inference-perf"),
    (MIXTRAL, 2, "spans"), (QWEN_7B, 1, "inference-perf")])
def test_simulate_from_run_and_reproduce_finish_with_every_request(tmp_path, aiconfigurator, model, tp, layout):
    folder, made_up = make_unseen_run(tmp_path / "runs" / f"tp{tp}", model, tp, layout)
    run = load_server_run(folder)
    assert run.num_requests == len(made_up)
    out = tmp_path / "sim"
    assert main(["simulate", "--from-run", str(folder), "--set", "hardware.gpu=H100", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] > 0
    assert summary["num_finished"] + summary["num_rejected"] == summary["num_requests"]
    assert 'latency = "profiled"' in (out / "config.toml").read_text()  # the measured per-op data
    rep = tmp_path / "rep"
    assert main(["reproduce", str(tmp_path / "runs"), "--out", str(rep), "--fit", "none", "--quiet"]) == 0
    table = pd.read_csv(rep / "report.csv")
    assert set(table["gpu_model"]) == {"aiconfigurator"}
    assert np.isfinite(table["predicted"]).all() and (table["predicted"] > 0).all()
    # the multi-turn sessions are regenerated by inference-perf's generator, not replayed
    assert set(table["workload"]) == {"profile"}


def _tpot(model: str, tp: int, tmp_path) -> float:
    folder, _ = make_unseen_run(tmp_path / f"{model.split('/')[-1]}-tp{tp}", model, tp, "spans", multi_turn=False)
    pred = predict_run(load_server_run(folder), gpu_model="aiconfigurator")
    assert pred.gpu_model == "aiconfigurator"
    assert len(pred.requests) == load_server_run(folder).num_requests  # every request accounted for
    return pred.means()["tpot_s"]


def test_tensor_parallelism_reduces_the_tpot_of_a_large_model(tmp_path, aiconfigurator):
    tpots = [_tpot(LLAMA_70B, tp, tmp_path) for tp in (2, 4, 8)]
    assert tpots[0] > tpots[1] > tpots[2]
    # all-reduces and per-step costs that do not shrink: less than linear speed-up
    assert tpots[2] > tpots[0] / 4


def _decode_step(dims: dict, tp: int, num_seqs: int) -> float:
    from calibrate.importers import import_profile
    from fidelity.sources.splitwise import decode_plan
    from sim.latency.profiled import ProfiledLatencyModel

    profile = import_profile("aiconfigurator", "H100", dims, tp, host="none")
    return ProfiledLatencyModel(profile).step_time(decode_plan(num_seqs, 1024))


def test_moe_costs_between_its_active_and_total_parameters(aiconfigurator):
    from calibrate.model_dims import dims_of_spec
    from specs.model_catalog import get_model

    moe = dims_of_spec(get_model("Mixtral-8x7B"), 2)
    dense = {k: v for k, v in moe.items() if k not in ("num_experts", "num_experts_per_tok")}
    inter = moe["intermediate_size"]
    active = dict(dense, intermediate_size=moe["num_experts_per_tok"] * inter)  # the 2 experts a token uses
    total = dict(dense, intermediate_size=moe["num_experts"] * inter)  # all 8 experts' weights
    t_moe, t_active, t_total = (_decode_step(d, 2, 1) for d in (moe, active, total))
    assert t_active < t_moe < t_total
    # a batch spreads its tokens over every expert: the MoE reads (nearly) all weights
    assert _decode_step(moe, 2, 64) > 0.8 * _decode_step(total, 2, 64) - 1e-9


def test_inference_perf_default_per_request_entries_have_no_computed_metrics(tmp_path):
    # inference-perf writes computed_metrics only when asked (off by default): timings from info
    folder = write_exp_config(tmp_path / "ip")
    entries = [{"start_time": 100.0 + i, "end_time": 102.0 + i,
                "info": {"request_metrics": {"text": {"input_tokens": 400 + i}},
                         "response_metrics": {"output_tokens": 11,
                                              "output_token_times": list(100.0 + i + 0.25 + 0.05 * np.arange(11))}},
                "error": None} for i in range(4)]
    entries.append({"start_time": 99.0, "end_time": 99.5, "info": {}, "error": {"error_type": "timeout"}})
    (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps(entries))
    run = load_server_run(folder)
    assert run.num_requests == 4
    assert run.requests["num_prompt_tokens"].tolist() == [400, 401, 402, 403]
    assert run.measured() == pytest.approx({"ttft_s": 0.25, "tpot_s": 0.05, "e2e_s": 2.0})


def test_single_turn_shared_prefix_replay_shares_each_groups_system_prompt(tmp_path):
    folder, _ = make_unseen_run(tmp_path / "single", "meta-llama/Llama-3.1-8B-Instruct", 1, "spans", multi_turn=False)
    run = load_server_run(folder)
    sp = ISSUE_PROFILE["data"]["shared_prefix"]
    assert sorted(run.requests["prefix_group"].unique()) == list(range(sp["num_unique_system_prompts"]))
    assert (run.requests["num_prefix_tokens"] == sp["system_prompt_len"]).all()


@pytest.mark.parametrize("layout", ["spans", "inference-perf"])
def test_simulate_from_run_predicts_what_reproduce_predicts(tmp_path, aiconfigurator, layout):
    # one GPU model, one host time and one front end for both commands: the same means (a client-timed
    # run's front end holds the client line of the idle-host layer, per request and prompt token)
    from fidelity.from_run import config_from_run
    from fidelity.predict import host_prior
    from sim.runner import simulate

    folder, _ = make_unseen_run(tmp_path / "both", QWEN_7B, 1, layout, multi_turn=False)
    config = config_from_run(folder, ["hardware.gpu=H100"])
    assert config.hardware.latency == "profiled"
    prior = host_prior("aiconfigurator", load_server_run(folder), "H100")
    assert (prior.frontend_per_token_s > 0) == (layout == "inference-perf")
    assert config.frontend.request_overhead_s == pytest.approx(prior.frontend_s)
    assert config.frontend.tokenize_s_per_token == pytest.approx(prior.frontend_per_token_s)
    via_config = simulate(config).requests
    via_reproduce = predict_run(load_server_run(folder)).requests
    assert len(via_config) == len(via_reproduce)
    # the config's trace deals requests to the prefix groups at random, the replay in turn: the
    # first-use misses of the 8 system prompts fall on different requests (a lost prefix was +18%)
    for m in ("ttft_s", "e2e_s"):
        assert via_config[m].mean() == pytest.approx(via_reproduce[m].mean(), rel=0.03)

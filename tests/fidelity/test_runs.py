"""Real-run loaders: the shipped ground truth (skipped when absent) and hand-made run folders."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fidelity_helpers import make_requests, write_exp_config, write_spans

from fidelity.run_folders import find_runs
from fidelity.sources.vllm_server import load_server_run, read_yaml, server_args_from_exp_config


@pytest.fixture(scope="module")
def groundtruth_runs(shared_data):
    return {r.name: r for r in find_runs(shared_data / "groundtruth")}


def test_every_shipped_vllm_run_is_found(groundtruth_runs):
    sources = pd.Series([r.source for r in groundtruth_runs.values()]).value_counts().to_dict()
    # README tables: 4 vLLM 0.11 runs, 4 LLMServingSim vLLM 0.19 runs, 8 DistServe vLLM runs (not its 29 DistServe runs)
    assert sources == {"vllm-0.11-jan2026": 4, "llmservingsim-vllm-0.19": 4, "distserve-a100-opt13b": 8}


def test_llmservingsim_means_match_its_published_summary(groundtruth_runs, shared_data):
    # summary.txt was computed by LLMServingSim from the same timestamps: our definitions must agree
    run = groundtruth_runs["RTX4090/Llama-3.1-8B"]
    text = (run.path / "validation" / "summary.txt").read_text().splitlines()
    vllm_col = {line.split()[0] + " " + line.split()[1]: float(line.split()[2]) for line in text
                if line.split()[:2] in (["TTFT", "Mean"], ["TPOT", "Mean"], ["Latency", "Mean"])}
    m = run.measured()
    # summary.txt prints ms with one decimal
    assert m["ttft_s"] * 1e3 == pytest.approx(vllm_col["TTFT Mean"], abs=0.051)
    assert m["tpot_s"] * 1e3 == pytest.approx(vllm_col["TPOT Mean"], abs=0.051)
    assert m["e2e_s"] * 1e3 == pytest.approx(vllm_col["Latency Mean"], rel=2e-3)


def test_distserve_means_match_the_files_own_summary(groundtruth_runs):
    for name in ("vllm-100-1", "vllm-400-4"):
        run = groundtruth_runs[name]
        summary = {line.split(":")[0].strip(): float(line.split(":")[1]) for line in
                   run.path.read_text().splitlines()[2:-1]}
        assert run.num_requests == summary["num_requests"]
        assert run.measured()["ttft_s"] * 1e3 == pytest.approx(summary["avg_ttft_ms"], rel=1e-6)
        assert run.measured()["tpot_s"] * 1e3 == pytest.approx(summary["avg_tpot_ms"], rel=1e-6)


def test_vllm011_server_args_and_prefix_from_the_folder(groundtruth_runs):
    run = groundtruth_runs["jan20-codellama-prefill-1"]
    exp = read_yaml(run.path / "exp-config.yaml")
    assert (run.server.max_num_batched_tokens, run.server.max_num_seqs, run.server.max_model_len) == (
        exp["max_num_batched_tokens"], exp["max_num_seqs"], exp["max_model_len"])
    assert run.server.engine_version == "0.11"
    # vllm.log: "GPU KV cache size: 44,640 tokens" -> blocks of 16
    assert run.server.num_gpu_blocks == 44640 // 16
    prefix = read_yaml(run.path / "profile.yaml")["data"]["prefix_tokens"]
    assert (run.requests["num_prefix_tokens"] == np.minimum(prefix, run.requests["num_prompt_tokens"] - 1)).all()
    spans = pd.read_csv(run.path / "per_request_server_spans.csv")
    assert run.num_requests == len(spans) and run.requests["arrival_time"].min() == 0.0
    assert run.requests["arrival_time"].is_monotonic_increasing


def test_hand_made_spans_folder_round_trips(tmp_path):
    req = make_requests(10, seed=3)
    ttft = np.linspace(0.1, 0.5, 10)
    e2e = ttft + 0.02 * (req["num_output_tokens"].to_numpy() - 1)
    folder = write_exp_config(tmp_path / "run-a", gpu="H100")
    write_spans(folder, req, ttft, e2e)
    run = load_server_run(folder)
    assert run.server.gpu == "H100" and run.server.max_num_seqs == 64
    assert run.requests["tpot_s"].to_numpy() == pytest.approx(np.full(10, 0.02))
    assert run.measured()["ttft_s"] == pytest.approx(ttft.mean())
    assert run.requests["arrival_time"].to_numpy() == pytest.approx(
        req["arrival_time"].to_numpy() - req["arrival_time"].iloc[0], abs=1e-6)


def test_summary_only_inference_perf_folder(tmp_path):
    folder = write_exp_config(tmp_path / "run-b")
    (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({"successes": {"latency": {
        "time_to_first_token": {"mean": 0.25}, "time_per_output_token": {"mean": 0.02},
        "request_latency": {"mean": 4.0}}, "output_len": {"mean": 101}}}))
    run = load_server_run(folder)
    # the summary's TPOT is per streamed chunk: the scored one is per token, of the means
    assert run.measured() == {"ttft_s": 0.25, "tpot_s": pytest.approx((4.0 - 0.25) / 100), "e2e_s": 4.0}
    assert not run.has_per_request and run.tpot_of_means and run.measured_by == "inference-perf-summary"


def test_a_summary_without_output_lengths_scores_no_tpot(tmp_path):
    folder = write_exp_config(tmp_path / "run-b2")
    (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({"successes": {"latency": {
        "time_to_first_token": {"mean": 0.25}, "time_per_output_token": {"mean": 0.02},
        "request_latency": {"mean": 4.0}}}}))
    assert np.isnan(load_server_run(folder).measured()["tpot_s"])


def test_folder_without_measurements_names_what_it_expects(tmp_path):
    folder = write_exp_config(tmp_path / "run-c")
    with pytest.raises(FileNotFoundError, match="per_request_server_spans.csv"):
        load_server_run(folder)
    assert load_server_run(folder, require_measurements=False).num_requests == 0


@pytest.mark.parametrize("bad, field", [({"tensor_parallelism": 0}, "exp-config.tensor_parallelism"),
                                         ({"max_num_seqs": "many"}, "exp-config.max_num_seqs")])
def test_bad_server_args_name_the_field(bad, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        server_args_from_exp_config({"model": "m", **bad})


def test_missing_model_names_the_field():
    with pytest.raises(ValueError, match="^exp-config.model"):
        server_args_from_exp_config({"tensor_parallelism": 1})


def test_guidellm_client_timings_agree_with_the_server_spans(groundtruth_runs):
    # the same run measured at the client (guidellm) and at the server (vLLM spans): the client sees
    # at least the server's latency, and TPOT (guidellm's ITL) nearly equal
    from fidelity.sources.guidellm_results import read_guidellm_requests

    run = groundtruth_runs["jan20-codellama-prefill-1"]
    client = read_guidellm_requests(run.path / "guidellm_per_request.csv").set_index("req_id")
    server = run.requests.assign(rid=run.requests["req_id"].str.rsplit("-", n=1).str[0]).set_index("rid")
    both = server.join(client, rsuffix="_client", how="inner")
    assert len(both) >= 0.9 * run.num_requests
    assert (both["e2e_s_client"] >= both["e2e_s"] - 1e-3).mean() > 0.95
    assert both["tpot_s_client"].mean() == pytest.approx(both["tpot_s"].mean(), rel=0.05)


def test_inference_perf_per_request_file(tmp_path):
    folder = write_exp_config(tmp_path / "ip")
    entries = [{"start_time": 100.0 + i, "end_time": 103.0 + i, "error": None, "computed_metrics": {
        "request_latency": 3.0, "time_to_first_token": 0.2, "time_per_output_token": 0.028,
        "input_tokens": 500 + i, "output_tokens": 101}} for i in range(5)]
    entries.append({"start_time": 99.0, "end_time": 99.1, "error": {"error_type": "400"}, "computed_metrics": None})
    (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps(entries))
    run = load_server_run(folder)
    assert run.num_requests == 5  # the failed request is not a measurement
    assert run.requests["num_prompt_tokens"].tolist() == [500, 501, 502, 503, 504]
    assert run.measured() == pytest.approx({"ttft_s": 0.2, "tpot_s": 0.028, "e2e_s": 3.0})
    assert run.requests["arrival_time"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]

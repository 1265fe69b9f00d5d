"""Real-run loaders: the shipped ground truth (skipped when absent) and hand-made run folders."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fidelity_helpers import make_measured_run, make_requests, write_exp_config, write_spans

from fidelity.run_folders import find_runs
from fidelity.runs import ServerArgs, engine_version, release
from fidelity.sources.vllm_server import load_server_run, scan_vllm_log, server_args_from_exp_config
from policies import ConfigError
from records.yaml_file import read_yaml


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
    assert run.server.engine_version == "0.11.0"  # vllm.log: "Initializing a V1 LLM engine (v0.11.0)"
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


# --- recorded values read as written, or refused in one line -----------------------------------
@pytest.mark.parametrize("written, read", [("false", False), ("False", False), ("no", False), ("0", False), (0, False),
                                           (False, False), ("TRUE", True), ("yes", True), ("1", True), (True, True)])
def test_a_true_false_server_arg_written_as_a_string_is_read_as_written(written, read):
    # bool("false") is True: a quoted false must not turn prefix caching, chunked prefill or async scheduling on
    server = server_args_from_exp_config({"model": "m", "enable_prefix_caching": written,
                                          "enable_chunked_prefill": written, "async_scheduling": written})
    assert (server.enable_prefix_caching, server.enable_chunked_prefill, server.async_scheduling) == (read,) * 3


@pytest.mark.parametrize("written", ["banana", "off-ish", 2, 0.5])
def test_a_true_false_server_arg_of_another_value_is_refused(written):
    with pytest.raises(ConfigError, match=rf"^exp-config.async_scheduling: expected true or false, got {written!r}$"):
        server_args_from_exp_config({"model": "m", "async_scheduling": written})


def test_an_unquoted_vllm_version_read_as_a_number_is_refused(tmp_path):
    folder = write_exp_config(tmp_path / "run", vllm_version=0.1)  # what YAML makes of `vllm_version: 0.10`
    (folder / "exp-config.yaml").write_text((folder / "exp-config.yaml").read_text().replace("0.1", "0.10"))
    assert read_yaml(folder / "exp-config.yaml")["vllm_version"] == 0.1
    with pytest.raises(ConfigError, match=r"^exp-config.vllm_version: 0.1 was read as a number.*quote it, e.g. '0.10'"):
        server_args_from_exp_config(read_yaml(folder / "exp-config.yaml"))


@pytest.mark.parametrize("written, read", [("0.10", "0.10"), ("v0.11.0", "0.11.0"), ("0.11.1.dev12+gabc", "0.11.1"),
                                           ("0.6.3.post1", "0.6.3"), (" 0.19 ", "0.19")])
def test_a_vllm_version_is_read_as_its_release(written, read):
    assert server_args_from_exp_config({"model": "m", "vllm_version": written}).engine_version == read


@pytest.mark.parametrize("written", ["banana", "0", "0.x", "11", "0.11.0.0.1"])
def test_a_vllm_version_that_is_no_release_is_refused_not_simulated_as_the_default(written):
    with pytest.raises(ConfigError, match=r"^exp-config.vllm_version: .* expected X.Y or X.Y.Z"):
        server_args_from_exp_config({"model": "m", "vllm_version": written})


def test_engine_version_and_release_read_only_releases():
    assert release(ServerArgs(model="m", engine_version="0.2.3")) == (0, 2, 3)
    assert release(ServerArgs(model="m", engine_version="0.11")) == (0, 11, 0)
    assert engine_version(ServerArgs(model="m", engine_version="0.12.0")) == "0.11"
    assert engine_version(ServerArgs(model="m", engine_version="1.0")) == "0.19"  # after every preset: the newest
    with pytest.raises(ConfigError, match="^engine_version: 'banana' is not a vLLM release; expected X.Y or X.Y.Z"):
        ServerArgs(model="m", engine_version="banana")
    with pytest.raises(ConfigError, match="^engine_version: expected X.Y or X.Y.Z, got 'v0.11.0'"):
        ServerArgs(model="m", engine_version="v0.11.0")  # a loader reads the run's spelling (recorded_release)


@pytest.mark.parametrize("line, version", [
    ("INFO 01-21 vllm.v1.engine.core: Initializing a V1 LLM engine (v0.11.0) with config: model='m'", "0.11.0"),
    ("INFO 10-01 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m'", "0.6.3"),
    ("INFO 10-01 api_server.py:527] vLLM API server version 0.6.3", "0.6.3"),
    ("INFO 10-01 api_server.py:527] vLLM API server version 0.5.4.post1", "0.5.4"),
], ids=["v1-banner", "v0-banner", "api-server", "post-release"])
def test_the_vllm_log_gives_the_release_of_v1_and_v0_engines(tmp_path, line, version):
    (tmp_path / "vllm.log").write_text(f"INFO starting\n{line}\nINFO # GPU blocks: 100\n")
    assert scan_vllm_log(tmp_path / "vllm.log")["engine_version"] == version


def test_a_release_exp_config_and_vllm_log_disagree_on_is_refused(tmp_path):
    log = "INFO vllm.v1.engine.core: Initializing a V1 LLM engine (v0.11.0) with config: model='m'\n"
    agree = make_measured_run(tmp_path / "agree", n=4)
    write_exp_config(agree, gpu="H100", vllm_version="0.11")
    (agree / "vllm.log").write_text(log)
    assert load_server_run(agree).server.engine_version == "0.11.0"  # the same release, to its patch
    differ = make_measured_run(tmp_path / "differ", n=4)
    write_exp_config(differ, gpu="H100", vllm_version="0.10")
    (differ / "vllm.log").write_text(log)
    with pytest.raises(ConfigError, match=r"^exp-config.vllm_version: '0.10', but vllm.log's engine reports 0.11.0"):
        load_server_run(differ)


@pytest.mark.parametrize("name", ["exp-config.yaml", "profile.yaml"])
def test_malformed_yaml_is_one_line_naming_the_file_and_where(tmp_path, name):
    folder = make_measured_run(tmp_path / "run", n=4)
    (folder / name).write_text("model: m\nfoo: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_server_run(folder)
    msg = str(info.value)
    assert msg.startswith(f"{folder / name}: not valid YAML at line 3, column 1") and "\n" not in msg


def test_a_kv_offloading_size_that_is_no_size_is_refused():
    with pytest.raises(ConfigError, match=r"^exp-config.kv_offloading_size: expected a size in GiB >= 0.*'lots'"):
        server_args_from_exp_config({"model": "m", "kv_offloading_size": "lots"})
    assert server_args_from_exp_config({"model": "m", "kv_offloading_size": "8"}).kv_offloading_size == 8.0


def _drop_ttft(df):
    return df.drop(columns=["ttft_s"])


def _text_in_row_2(df):
    return df.astype({"prompt_tokens": object}).assign(prompt_tokens=lambda d: d["prompt_tokens"].where(
        d.index != 1, "abc"))


@pytest.mark.parametrize("damage, message", [
    (_drop_ttft, r"missing column\(s\) ttft_s; expected the columns request_id, start_unix_ns, prompt_tokens"),
    (lambda df: None, r"empty; expected a CSV with the columns request_id"),
    (_text_in_row_2, r"row 2: prompt_tokens: expected a number, got 'abc'"),
    (lambda df: df.assign(completion_tokens=df["completion_tokens"].where(df.index != 2)),
     r"row 3 \(req_id 'r0-2'\): num_output_tokens: expected a whole number of tokens >= 0, got a blank cell"),
    (lambda df: pd.concat([df, df.iloc[[0]]], ignore_index=True),
     r"row 5: req_id: an earlier row has the same id \(one request measured twice\), got 'r0-0'"),
    (lambda df: df.assign(ttft_s=df["ttft_s"].where(df.index != 1, -0.5)),
     r"row 2 \(req_id 'r0-1'\): ttft_s: a latency cannot be negative, got -0.5"),
    (lambda df: df.assign(e2e_s=df["e2e_s"].where(df.index != 0, -1.0)), r"row 1 \(req_id 'r0-0'\): e2e_s: a latency"),
], ids=["missing-column", "empty", "text", "blank", "duplicate-id", "negative-ttft", "negative-e2e"])
def test_a_damaged_spans_file_is_refused_naming_the_file_and_what(tmp_path, damage, message):
    folder = make_measured_run(tmp_path / "run", n=4)
    spans = folder / "per_request_server_spans.csv"
    damaged = damage(pd.read_csv(spans))
    spans.write_text("") if damaged is None else damaged.to_csv(spans, index=False)
    with pytest.raises(ConfigError, match=f"^{spans}: {message}"):
        load_server_run(folder)


@pytest.mark.parametrize("text", ["", '{"successes": {"latency": '])
def test_an_empty_or_truncated_summary_is_refused_naming_the_file(tmp_path, text):
    folder = write_exp_config(tmp_path / "run")
    (folder / "summary_lifecycle_metrics.json").write_text(text)
    with pytest.raises(ConfigError, match=f"^inference-perf summary: {folder / 'summary_lifecycle_metrics.json'} is "
                                          "not valid JSON"):
        load_server_run(folder)

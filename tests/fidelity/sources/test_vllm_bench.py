"""`vllm bench serve` results (fidelity.sources.vllm_bench): read by content, send times replayed,
failures dropped, and a prediction of a run measured that way scored per token."""
from __future__ import annotations

import json

import numpy as np
import pytest
from fidelity_helpers import make_requests, roofline_truth, write_exp_config

from fidelity.metric_definitions import DEFINITIONS
from fidelity.reproduce import reproduce
from fidelity.run_folders import find_runs
from fidelity.sources.client_report import client_kind, load_json_object
from fidelity.sources.vllm_bench import read_vllm_bench, send_times
from policies import ConfigError


def write_bench_result(folder, requests, ttft, e2e, name="vllm-2.0qps-Llama-2-7b-hf-20261207-120000.json",
                       drop=(), failed=(), t0=1234.5):
    """A `vllm bench serve --save-result` JSON of `requests` (make_requests' columns) with the given
    per-request TTFT and E2E (s): even token gaps, the send times offset by a perf_counter origin `t0`.
    `drop`: lists left out (an older release's file); `failed`: indices the client saw fail."""
    n_out = requests["num_output_tokens"].to_numpy()
    itls = [[(e - t) / (k - 1)] * (k - 1) for t, e, k in zip(ttft, e2e, n_out)]
    data = {"date": "20261207-120000", "backend": "vllm", "model_id": "meta-llama/Llama-2-7b-hf",
            "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None, "completed": len(requests) - len(failed),
            "failed": len(failed), "mean_ttft_ms": float(np.mean(ttft)) * 1e3,
            "input_lens": requests["num_prompt_tokens"].tolist(), "output_lens": n_out.tolist(),
            "ttfts": [float(x) for x in ttft], "itls": itls, "latencies": [float(x) for x in e2e],
            "start_times": (t0 + requests["arrival_time"]).tolist(), "errors": [""] * len(requests)}
    for i in failed:  # what the client records for a failed request
        data["ttfts"][i], data["output_lens"][i], data["latencies"][i], data["itls"][i] = 0.0, 0, 0.0, []
        data["errors"][i] = "ClientPayloadError"
    for key in drop:
        data.pop(key)
    path = folder / name
    path.write_text(json.dumps(data))
    return path


def measured(requests, seed=0):
    rng = np.random.default_rng(seed)
    ttft = rng.uniform(0.02, 0.2, len(requests))
    return ttft, ttft + 0.012 * (requests["num_output_tokens"].to_numpy() - 1)


def test_a_bench_result_is_read_by_its_content_with_send_times_replayed(tmp_path):
    requests = make_requests(n=12, rate=2.0)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    path = write_bench_result(tmp_path, requests, ttft, e2e, failed=(3,))
    (tmp_path / "notes.json").write_text(json.dumps({"ttfts": "not a list"}))  # another JSON: not taken
    assert client_kind(load_json_object(path)) == "vllm-bench"
    assert client_kind(load_json_object(tmp_path / "notes.json")) is None
    [run] = find_runs(tmp_path)
    assert run.measured_by == "vllm-bench"
    got, keep = run.requests, [i for i in range(12) if i != 3]  # the failed request is dropped, and counted
    assert len(got) == 11 and run.summary["num_failures"] == 1
    assert any("1 failed request(s) left out" in note for note in run.assumed)
    np.testing.assert_allclose(got["arrival_time"], requests["arrival_time"][keep] - requests["arrival_time"][0])
    np.testing.assert_allclose(got["ttft_s"], ttft[keep])
    np.testing.assert_allclose(got["e2e_s"], e2e[keep])
    np.testing.assert_allclose(got["tpot_s"], 0.012)  # per token: (E2E - TTFT) / (n - 1)
    assert list(got["num_prompt_tokens"]) == list(requests["num_prompt_tokens"][keep])


def test_an_older_result_takes_e2e_from_its_itls_and_its_sends_from_the_clients_rule(tmp_path):
    requests = make_requests(n=6)
    ttft, e2e = measured(requests)
    path = write_bench_result(tmp_path, requests, ttft, e2e, drop=("latencies",))
    got, sends, cap, failed = read_vllm_bench(path)
    np.testing.assert_allclose(got["e2e_s"], e2e)  # TTFT + the token gaps
    assert sends is None and cap is None and failed == 0  # recorded
    path = write_bench_result(tmp_path, requests, ttft, e2e, drop=("start_times",))
    got, sends, cap, _ = read_vllm_bench(path)
    assert "as the client draws them" in sends and "2.0 req/s" in sends and cap is None
    assert got["arrival_time"].iloc[0] == 0 and got["arrival_time"].is_monotonic_increasing
    np.testing.assert_allclose(got["ttft_s"], ttft)  # the measurements stay in the file's order
    # sends that waited for a free slot: due as drawn, under the client's bound
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "max_concurrency": 8}))
    _, sends, cap, _ = read_vllm_bench(path)
    assert cap == 8 and "max_concurrency = 8 slots" in sends
    path.write_text(json.dumps({**data, "max_concurrency": 0}))
    with pytest.raises(ValueError, match="max_concurrency: expected a positive integer"):
        read_vllm_bench(path)
    path = write_bench_result(tmp_path, requests, ttft, e2e, drop=("latencies", "itls"))
    with pytest.raises(ValueError, match="neither latencies nor itls"):
        read_vllm_bench(path)


def test_made_up_send_times_follow_the_clients_arrival_process():
    assert not send_times(5, "inf").any()  # the default rate: everything at once
    gaps = np.diff(send_times(40_001, 4.0, 0.25))
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)  # 1 / request_rate
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)  # gamma shape 0.25: CV 1/sqrt(0.25)
    poisson = np.diff(send_times(40_001, 4.0, 1.0))
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, rel=0.05)
    with pytest.raises(ValueError, match="request_rate and burstiness"):
        send_times(3, 0.0)


def test_a_bench_run_at_full_concurrency_is_replayed_under_its_bound(tmp_path):
    """rate inf and max_concurrency 2 without start_times: every request due at once, sent two at a
    time; reproduce and `simulate --from-run` keep the bound."""
    from fidelity.predict import predict_run
    from fidelity.run_config import config_dict_for_run

    requests = make_requests(n=10)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    path = write_bench_result(tmp_path, requests, ttft, e2e, drop=("start_times",))
    path.write_text(json.dumps({**json.loads(path.read_text()), "request_rate": "inf", "max_concurrency": 2}))
    [run] = find_runs(tmp_path)
    assert run.client_max_concurrency == 2 and (run.requests["arrival_time"] == 0).all()
    assert config_dict_for_run(run)["workload"]["max_concurrency"] == 2
    sent = predict_run(run, gpu_model="roofline").requests.sort_values("arrival_time")
    assert (sent["arrival_time"].iloc[:2] == 0).all() and (sent["arrival_time"].iloc[2:] > 0).all()
    events = sorted([(t, 1) for t in sent["arrival_time"]] + [(t, -1) for t in sent["finish_time"]],
                    key=lambda e: (e[0], e[1]))
    assert max(np.cumsum([d for _, d in events])) == 2


def test_a_run_with_made_up_sends_says_so(tmp_path):
    from fidelity.client_workload import version_assumption

    requests = make_requests(n=6)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    write_bench_result(tmp_path, requests, ttft, e2e, drop=("start_times",))
    [run] = find_runs(tmp_path)
    assert run.has_per_request and "send times not recorded" in version_assumption(run)


def test_a_run_measured_by_vllm_bench_is_reproduced_and_scored_per_token(tmp_path):
    """Measurements that are servesim's own roofline prediction come back with ~0 error."""
    requests = make_requests(n=24, rate=4.0)
    folder = write_exp_config(tmp_path / "bench-run", gpu="H100", async_scheduling=False)
    write_bench_result(folder, requests, *roofline_truth(folder, requests))
    table = reproduce(find_runs(tmp_path), fit="none", gpu_model="roofline", progress=False).table
    assert set(table["metric"]) == {"ttft_s", "tpot_s", "e2e_s"}
    assert table["error"].abs().max() < 0.01
    assert all(row.definition == DEFINITIONS["vllm-bench"][row.metric] for row in table.itertuples())
    assert table.set_index("metric").loc["tpot_s", "definition"].startswith("per token")


def test_an_exp_config_without_a_model_takes_the_bench_results(tmp_path):
    requests = make_requests(n=6)
    ttft, e2e = measured(requests)
    (tmp_path / "exp-config.yaml").write_text("gpu: H100\ntensor_parallelism: 1\n")
    path = write_bench_result(tmp_path, requests, ttft, e2e)
    [run] = find_runs(tmp_path)
    assert run.server.model == "meta-llama/Llama-2-7b-hf"
    assert run.recorded_args["model"] == ("meta-llama/Llama-2-7b-hf", path.name)  # where it was read


def test_a_bound_the_replay_cannot_keep_is_listed_not_fatal(tmp_path):
    """Made-up sends under max_concurrency over two data-parallel engines: not modelled, so the run is
    listed with its reason, as any run that cannot be simulated."""
    from fidelity.predict import why_unpredictable

    requests = make_requests(n=6)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100", data_parallel_size=2)
    path = write_bench_result(tmp_path, requests, ttft, e2e, drop=("start_times",))
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_concurrency": 4}))
    [run] = find_runs(tmp_path)
    assert "max_concurrency over 2 data-parallel engines is not modelled" in why_unpredictable(run)


def test_failed_requests_are_counted_beside_the_served_ones(tmp_path):
    """Nothing is lost: a request the client saw fail has no timings to replay, so it is counted
    (served.csv's measured_failures) and said, with the slot it held under max_concurrency."""
    from fidelity.client_timeout import served_row
    from fidelity.predict import predict_run

    requests = make_requests(n=10)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    path = write_bench_result(tmp_path, requests, ttft, e2e, drop=("start_times",), failed=(2, 7))
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_concurrency": 4}))
    [run] = find_runs(tmp_path)
    assert len(run.requests) == 8 and run.summary["num_failures"] == 2
    note, = [n for n in run.assumed if "failed request" in n]
    assert "2 failed" in note and "max_concurrency" in note
    row = served_row(predict_run(run, gpu_model="roofline"))
    assert row["measured_failures"] == 2 and row["measured_successes"] == 8 and row["predicted_requests"] == 8


def test_an_empty_result_or_an_impossible_latency_names_the_file(tmp_path):
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(ConfigError, match=f"^vllm bench result: {tmp_path / 'empty.json'} is not valid JSON"):
        read_vllm_bench(tmp_path / "empty.json")
    requests = make_requests(n=4, rate=2.0)
    ttft, e2e = measured(requests)
    path = write_bench_result(tmp_path, requests, ttft, e2e - np.array([0, 0, 9.0, 0]))  # E2E < 0 in row 3
    with pytest.raises(ConfigError, match=f"^{path}: row 3 \\(req_id '2'\\): e2e_s: a latency cannot be negative"):
        read_vllm_bench(path)

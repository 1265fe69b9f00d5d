"""guidellm's own report (fidelity.sources.guidellm_results): read by its content in both layouts,
its sends replayed, its per-token ITL scored as TPOT, and a sampled report simulated from the profile
its arguments record, against its metrics' means."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fidelity_helpers import make_requests, roofline_truth, write_exp_config

from fidelity.engine_settings import MODELLED, NO_EFFECT, not_modelled, settings_table
from fidelity.metric_definitions import DEFINITIONS
from fidelity.reproduce import reproduce
from fidelity.run_folders import find_runs
from fidelity.sources.client_report import client_kind
from fidelity.sources.guidellm_results import (parse_data, prefix_from_guidellm, read_guidellm_report,
                                               read_guidellm_requests, report_args)
from policies import ConfigError

SYNTHETIC = "prompt_tokens=400,prompt_tokens_stdev=100,output_tokens=40,output_tokens_stdev=10"


def stats(requests, ttft, e2e, layout):
    """guidellm's per-request entries of `requests` (make_requests' columns) with these TTFT and E2E (s)."""
    out = []
    for i, (r, t, e) in enumerate(zip(requests.itertuples(), ttft, e2e)):
        start, n = 1_700_000_000.0 + r.arrival_time, int(r.num_output_tokens)
        entry = {"request_id": f"q{i}", "prompt_tokens": int(r.num_prompt_tokens), "output_tokens": n,
                 "request_latency": float(e), "time_to_first_token_ms": float(t) * 1e3,
                 "time_per_output_token_ms": float(e) / n * 1e3,  # guidellm's TPOT: not vLLM's
                 "inter_token_latency_ms": (float(e) - float(t)) / (n - 1) * 1e3}
        if layout == "0.3":
            entry.update(start_time=start, end_time=start + float(e))
        else:
            entry.update(response_id=f"cmpl-{i}", request_start_time=start,
                         info={"timings": {"request_start": start, "request_end": start + float(e)}})
        out.append(entry)
    return out


def metrics(ttft, e2e, n_out, n_prompt, successful, errored=0):
    summary = (lambda values, scale=1.0: {"successful": {"mean": float(np.mean(values)) * scale}})
    return {"time_to_first_token_ms": summary(ttft, 1e3), "request_latency": summary(e2e),
            "output_token_count": summary(n_out), "prompt_token_count": summary(n_prompt),
            "request_totals": {"successful": successful, "errored": errored, "incomplete": 0,
                               "total": successful + errored}}


def write_report(folder, requests, ttft, e2e, layout="0.6", name="benchmarks.json", profile="constant", rate=4.0,
                 data=SYNTHETIC, errored=0, keep=None, benchmarks=1, version="0.6.1"):
    """A guidellm report of `benchmarks` equal benchmarks of these requests; `keep`: how many of each
    benchmark's requests the report holds (a sample, `--sample-requests`); `errored`: failed sends
    per benchmark (in the totals and the errored list, without timings)."""
    n = len(requests)
    entries = stats(requests, ttft, e2e, layout)
    kept = entries[:keep] if keep is not None else entries
    m = metrics(ttft, e2e, requests["num_output_tokens"], requests["num_prompt_tokens"], n, errored)
    failed = [{"request_id": f"e{i}", "error": "ReadTimeout"} for i in range(errored)]
    totals = m.pop("request_totals")
    bench = []
    for k in range(benchmarks):
        if layout == "0.3":  # totals beside the metrics, the profile and data per benchmark
            kind = {"type_": "sweep", "sweep_size": rate} if profile == "sweep" else {
                "type_": "async", "strategy_type": profile, "rate": [rate], "initial_burst": True}
            b = {"type_": "generative_benchmark", "args": {"profile": {**kind, "random_seed": 7}, "max_number": n},
                 "run_stats": {}, "worker": {"backend_model": "None"}, "request_loader": {"data": data},
                 "request_totals": totals, "metrics": m}
        else:
            b = {"type_": "generative_benchmark", "config": {"strategy": {"type_": profile},
                                                              "warmup": {"percent": None, "value": None}},
                 "metrics": {**m, "request_totals": totals}}
        # each benchmark sends requests of its own (guidellm ids every request uniquely)
        own = [{**e, **{key: f"{e[key]}-b{k}" for key in ("request_id", "response_id") if key in e and k}} for e in kept]
        b["requests"] = {"successful": own, "errored": failed, "incomplete": [], "total": None}
        bench.append(b)
    report = {"benchmarks": bench}
    if layout != "0.3":
        report = {"metadata": {"version": 1, "guidellm_version": version},
                  "args": {"profile": profile, "rate": [rate] if rate else None, "max_requests": n,
                           "random_seed": 7, "data": [data], "model": None}, **report}
    path = folder / name
    path.write_text(json.dumps(report, indent=2))
    return path


def measured(requests, seed=0):
    rng = np.random.default_rng(seed)
    ttft = rng.uniform(0.02, 0.2, len(requests))
    return ttft, ttft + 0.012 * (requests["num_output_tokens"].to_numpy() - 1)


@pytest.mark.parametrize("layout", ["0.6", "0.3"])
def test_a_report_is_read_by_its_content_with_its_sends_and_per_token_itl(tmp_path, layout):
    requests = make_requests(n=10, rate=3.0)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    write_report(tmp_path, requests, ttft, e2e, layout=layout, name="sweep-results.json", errored=2)
    [run] = find_runs(tmp_path)
    assert run.measured_by == "guidellm" and run.measured_file.name == "sweep-results.json"
    got = run.requests
    sends = requests["arrival_time"] - requests["arrival_time"][0]
    np.testing.assert_allclose(got["arrival_time"], sends, atol=1e-6)  # epoch seconds: us resolution
    np.testing.assert_allclose(got["ttft_s"], ttft)
    np.testing.assert_allclose(got["e2e_s"], e2e)
    np.testing.assert_allclose(got["tpot_s"], 0.012)  # its ITL, not its TPOT (E2E / n)
    assert list(got["num_output_tokens"]) == list(requests["num_output_tokens"])
    assert any("2 errored or incomplete requests left out" in note for note in run.assumed)
    assert run.summary == {"num_failures": 2.0} and not run.tpot_of_means  # counted, not scored
    # no profile.yaml: the load its arguments record, with its release
    assert run.profile["rate-type"] == "constant" and run.profile["rate"] == 4.0
    assert run.profile["data"]["prompt_tokens"] == 400 and run.profile["random-seed"] == 7
    assert run.profile["client"]["version"] == ("0.6.1" if layout == "0.6" else "0.3")
    assert (layout == "0.3") == any("is 0.2-0.3's, read as 0.3" in note for note in run.assumed)


@pytest.mark.parametrize("layout", ["0.6", "0.3"])
def test_the_reports_client_arguments_are_each_listed_modelled_or_not(tmp_path, layout):
    """Issue 15: nothing a run records is silently ignored, the client's arguments included, also
    where another file holds the measurements."""
    requests = make_requests(n=6)
    write_exp_config(tmp_path, gpu="H100")
    path = write_report(tmp_path, requests, *measured(requests), layout=layout)
    report = json.loads(path.read_text())
    if layout == "0.6":
        report["args"].update(data_request_formatter="chat_completions", max_seconds=30, warmup=None,
                              frobnicate=1, output_dir="/out")
        report["benchmarks"][0]["config"]["backend"] = {"target": "http://x:8000", "timeout": 60.0}
    else:
        report["benchmarks"][0]["args"].update(max_duration=None, warmup_number=5)
    path.write_text(json.dumps(report))
    [run] = find_runs(tmp_path)
    rows = {r["setting"]: (r["status"], r["note"], r["recorded_in"]) for r in settings_table(run)
            if r["setting"].startswith("guidellm.")}
    recorded = report_args(report)
    assert set(rows) == {f"guidellm.{k}" for k in recorded} and all(r[2] == path.name for r in rows.values())
    assert rows["guidellm.profile"][0] == MODELLED
    off = set(not_modelled(run))
    if layout == "0.6":
        assert recorded["backend.timeout"] == 60.0
        assert {"guidellm.data_request_formatter=chat_completions", "guidellm.max_seconds=30",
                "guidellm.frobnicate=1", "guidellm.backend.timeout=60.0"} <= off
        assert "template tokens" in rows["guidellm.data_request_formatter"][1]
        assert rows["guidellm.warmup"][0] == rows["guidellm.output_dir"][0] == NO_EFFECT
        assert rows["guidellm.max_requests"][0] == rows["guidellm.random_seed"][0] == MODELLED
    else:
        assert rows["guidellm.max_number"][0] == MODELLED and rows["guidellm.max_duration"][0] == NO_EFFECT
        assert off == {"guidellm.warmup_number=5"}


def test_a_profile_yaml_is_kept_and_given_the_reports_release(tmp_path):
    requests = make_requests(n=6)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    (tmp_path / "profile.yaml").write_text("rate-type: constant\nrate: 2.0\nmax-requests: 6\n"
                                           "data:\n  prompt_tokens: 300\n  output_tokens: 30\n  prefix_tokens: 64\n")
    write_report(tmp_path, requests, ttft, e2e, version="0.5.4")
    [run] = find_runs(tmp_path)
    assert run.profile["rate"] == 2.0 and run.profile["client"] == {"version": "0.5.4"}
    assert (run.requests["num_prefix_tokens"] == 64).all()  # the profile's shared prefix


def test_guidellm_data_arguments_in_each_spelling():
    assert parse_data("prompt_tokens=256,output_tokens=128") == {"prompt_tokens": 256, "output_tokens": 128}
    assert parse_data('{"prompt_tokens": 8, "output_tokens": 2}')["output_tokens"] == 2
    assert parse_data("[{'prefix_tokens': 1024, 'prompt_tokens': 2048, 'output_tokens': 32}]")["prefix_tokens"] == 1024
    assert parse_data("data/prompts.jsonl") is None and parse_data("garage-bAInd/Open-Platypus") is None


def test_a_report_of_a_whole_sweep_is_known_and_other_json_is_not(tmp_path):
    requests = make_requests(n=4)
    path = write_report(tmp_path, requests, *measured(requests), profile="sweep", rate=5, benchmarks=3)
    assert client_kind(json.loads(path.read_text())) == "guidellm"
    assert client_kind({"benchmarks": []}) is None and client_kind({"ttfts": [1.0]}) is None
    report = read_guidellm_report(path)
    assert len(report.requests) == 12 and report.profile["rate-type"] == "sweep" and report.profile["rate"] == 5


def test_a_run_measured_by_a_guidellm_report_is_reproduced_and_scored_per_token(tmp_path):
    """Measurements that are servesim's own roofline prediction come back with ~0 error."""
    requests = make_requests(n=24, rate=4.0)
    folder = write_exp_config(tmp_path / "guidellm-run", gpu="H100", async_scheduling=False)
    write_report(folder, requests, *roofline_truth(folder, requests), data="data.jsonl")
    table = reproduce(find_runs(tmp_path), fit="none", gpu_model="roofline", progress=False).table
    assert set(table["metric"]) == {"ttft_s", "tpot_s", "e2e_s"}
    assert table["error"].abs().max() < 0.01
    assert all(row.definition == DEFINITIONS["guidellm"][row.metric] for row in table.itertuples())


def test_a_sampled_report_simulates_its_profile_against_its_metrics_means(tmp_path):
    """guidellm kept 5 of each benchmark's requests: the sends cannot be replayed, so the load its
    arguments record is simulated as guidellm drives it; measurements that are that simulation's
    own means come back with ~0 error, TPOT scored as the TPOT of the means."""
    from fidelity.host_overhead import HostOverhead
    from fidelity.predict import predict_run

    folder = write_exp_config(tmp_path / "sampled", gpu="H100", async_scheduling=False)
    dummy = make_requests(n=8)
    write_report(folder, dummy, *measured(dummy), profile="constant", rate=3.0, keep=5)
    [run] = find_runs(tmp_path)
    assert not run.has_per_request and run.tpot_of_means and run.summary["num_successes"] == 8
    assert any("kept 5 of 8 requests" in note for note in run.assumed)
    pred = predict_run(run, HostOverhead(), gpu_model="roofline")
    assert pred.workload == "guidellm" and len(pred.requests) == 8  # the profile's own requests
    sim = pred.requests
    write_report(folder, sim, sim["ttft_s"].to_numpy(), sim["e2e_s"].to_numpy(), profile="constant", rate=3.0,
                 keep=5)
    table = reproduce(find_runs(tmp_path), fit="none", gpu_model="roofline", progress=False).table
    assert table["error"].abs().max() < 0.01


def test_a_sampled_report_of_a_dataset_is_refused_with_the_reason(tmp_path):
    requests = make_requests(n=8)
    path = write_report(tmp_path, requests, *measured(requests), data="data/prompts.jsonl", keep=3)
    with pytest.raises(ValueError, match="sample-requests.*no synthetic load"):
        read_guidellm_report(path)


def test_a_replay_deals_the_prefix_buckets_in_their_proportions():
    profile = {"client": {"version": "0.7.3"}, "data": {
        "prompt_tokens": 400, "output_tokens": 40,
        "prefix_buckets": [{"bucket_weight": 50, "prefix_tokens": 256}, {"bucket_weight": 50, "prefix_count": 2,
                                                                         "prefix_tokens": 64}]}}
    requests = make_requests(n=400, prompt=(300, 900))
    got = prefix_from_guidellm(requests.assign(prefix_group=-1, num_prefix_tokens=0), profile)
    assert (got["num_prefix_tokens"] == 256).mean() == 0.5  # half the draws, dealt in turn
    assert sorted(got.loc[got["num_prefix_tokens"] == 64, "prefix_group"].unique()) == [1, 2]


def test_multi_turn_data_is_replayed_and_said_but_a_sample_of_it_is_refused(tmp_path):
    from fidelity.client_workload import check_workload

    requests = make_requests(n=8)
    write_exp_config(tmp_path / "mt", gpu="H100")
    write_report(tmp_path / "mt", requests, *measured(requests), data="prompt_tokens=400,output_tokens=40,turns=2")
    [run] = find_runs(tmp_path / "mt")
    assert run.has_per_request  # the recorded sends replay whatever the generator models
    line = " ".join(check_workload(run).lines())
    assert "not generated: profile.data.turns" in line and "recorded sends are replayed" in line
    path = write_report(tmp_path, requests, *measured(requests), data="prompt_tokens=400,output_tokens=40,turns=2",
                        keep=3)
    with pytest.raises(ValueError, match="sample-requests.*its load is not modelled .*profile.data.turns"):
        read_guidellm_report(path)


def test_a_client_csv_missing_a_column_or_a_number_names_the_file(tmp_path):
    path = tmp_path / "guidellm_per_request.csv"
    header = "response_id,status,request_start_time,prompt_tokens,output_tokens,ttft_ms,request_latency_s"
    path.write_text(header + "\nr1,success,10.0,100,20,50.0,1.0\n")
    with pytest.raises(ConfigError, match=f"^{path}: missing column\\(s\\) itl_ms; expected the columns"):
        read_guidellm_requests(path)
    path.write_text(header + ",itl_ms\nr1,success,10.0,100,20,50.0,1.0,5.0\nr2,success,11.0,many,20,50.0,1.0,5.0\n")
    with pytest.raises(ConfigError, match=f"^{path}: row 2: prompt_tokens: expected a number, got 'many'"):
        read_guidellm_requests(path)


@pytest.mark.parametrize("layout", ["0.6", "0.3"])
def test_a_sweep_of_poisson_strategies_is_read_as_one(tmp_path, layout):
    """The sub-strategy a sweep's report records (0.4-0.6 each benchmark's `config.profile.
    strategy_type`, 0.2-0.3 `args.profile.rate_type`; `args.profile` says only "sweep") reaches
    the profile, so a sampled report simulates poisson sends, not constant ones."""
    requests = make_requests(n=6)
    write_exp_config(tmp_path, gpu="H100")
    path = write_report(tmp_path, requests, *measured(requests), layout=layout, profile="sweep", rate=4)
    report = json.loads(path.read_text())
    for b in report["benchmarks"]:
        if layout == "0.3":
            b["args"]["profile"].update(strategy_type="constant", rate_type="poisson")  # 0.3 sweeps by rate_type
        else:
            b["config"]["profile"] = {"type_": "sweep", "sweep_size": 4, "strategy_type": "poisson"}
    path.write_text(json.dumps(report))
    [run] = find_runs(tmp_path)
    assert run.profile["rate-type"] == "sweep" and run.profile["strategy-type"] == "poisson"


def write_client_csv(folder, requests, ttft, e2e):
    """The per-request CSV a campaign makes of guidellm's report (`read_guidellm_requests`)."""
    n = requests["num_output_tokens"].to_numpy()
    pd.DataFrame({"request_start_time": 1_700_000_000.0 + requests["arrival_time"], "status": "successful",
                  "prompt_tokens": requests["num_prompt_tokens"], "output_tokens": n, "ttft_ms": ttft * 1e3,
                  "request_latency_s": e2e, "itl_ms": (e2e - ttft) / np.maximum(n - 1, 1) * 1e3}
                 ).to_csv(folder / "guidellm_per_request.csv", index=False)


@pytest.mark.parametrize("layout, release", [("0.3", "0.3"), ("0.4", "0.4"), ("0.6", "0.6.1")])
@pytest.mark.parametrize("measured_by_csv", [False, True])
def test_an_unrecorded_release_is_read_from_the_reports_layout_and_said(tmp_path, layout, release,
                                                                          measured_by_csv):
    """metadata.guidellm_version came in 0.5.0 (report.py, a37aa52c): a report without it in 0.4's
    layout (config, scheduler_state) is 0.4's, in 0.2-0.3's (args, run_stats) 0.3's; read so, and
    said, also where a per-request CSV made of the report is the measurement."""
    from fidelity.client_workload import check_workload, version_assumption

    requests = make_requests(n=6)
    ttft, e2e = measured(requests)
    write_exp_config(tmp_path, gpu="H100")
    (tmp_path / "profile.yaml").write_text("rate-type: constant\nrate: 2.0\nmax-requests: 6\n"
                                           "data:\n  prompt_tokens: 300\n  output_tokens: 30\n")
    path = write_report(tmp_path, requests, ttft, e2e, layout="0.3" if layout == "0.3" else "0.6",
                        version=release)
    if layout == "0.4":
        report = json.loads(path.read_text())
        del report["metadata"]
        path.write_text(json.dumps(report))
    if measured_by_csv:
        write_client_csv(tmp_path, requests, ttft, e2e)
    [run] = find_runs(tmp_path)
    assert run.measured_file.name == ("guidellm_per_request.csv" if measured_by_csv else path.name)
    assert run.profile["client"]["version"] == release
    assert check_workload(run).version == release
    said = version_assumption(run) or ""
    if layout == "0.6":
        assert "guidellm" not in said
    else:
        assert "guidellm release not recorded: the report's layout" in said and f"read as {release}" in said
        assert "client version not recorded: assumed" not in said


def test_reproduce_says_a_release_read_from_the_layout_in_its_output_and_report(tmp_path, capsys):
    from servesim.cli import main

    requests = make_requests(n=6)
    folder = write_exp_config(tmp_path / "gt" / "run0", gpu="H100")
    path = write_report(folder, requests, *measured(requests))
    report = json.loads(path.read_text())
    del report["metadata"]  # 0.4's report
    path.write_text(json.dumps(report))
    out = tmp_path / "r"
    assert main(["reproduce", str(tmp_path / "gt"), "--fit", "none", "--out", str(out), "--gpu-model", "roofline"]) == 0
    said = "is 0.4's, read as 0.4"
    assert said in capsys.readouterr().err
    assert said in (out / "report.md").read_text()

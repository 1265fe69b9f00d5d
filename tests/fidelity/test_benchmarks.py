"""fidelity.benchmarks: a guidellm sweep simulated from its profile, benchmark by benchmark beside
the report's own figures; a report that is the simulation itself comes back with no error."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pandas as pd
import pytest
import yaml
from fidelity_helpers import write_exp_config

from fidelity.benchmarks import COMPARED, benchmark_line, benchmark_rows, predicted_benchmarks, write_benchmarks
from fidelity.client_timeout import served_line, served_row
from fidelity.host_overhead import HostOverhead
from fidelity.predict import predict_run
from fidelity.run_folders import find_runs
from fidelity.runs import RealRun, ServerArgs

PROFILE = {"rate-type": "sweep", "rate": 4, "max-requests": 8, "random-seed": 3,
           "data": {"prompt_tokens": 300, "prompt_tokens_stdev": 60, "output_tokens": 30, "output_tokens_stdev": 8}}


def entry(r, t0=1_700_000_000.0):
    n = int(r.num_output_tokens)
    return {"request_id": str(r.req_id), "request_start_time": t0 + r.arrival_time, "prompt_tokens": int(r.num_prompt_tokens),
            "output_tokens": n, "request_latency": float(r.e2e_s), "time_to_first_token_ms": 1e3 * float(r.ttft_s),
            "inter_token_latency_ms": 1e3 * float(r.tpot_s) if n > 1 else None}


def write_sweep_report(folder, requests, errored=0):
    """A 0.6-layout report of a simulated sweep's requests (`phase`, `strategy` columns), each
    benchmark's duration from the last answer of the one before it to its own; `errored` failures
    in the last one."""
    benchmarks, start = [], 0.0
    for phase, g in requests.groupby("phase"):
        last = len(benchmarks) == requests["phase"].nunique() - 1
        failed = errored if last else 0
        end = float((g["arrival_time"] + g["e2e_s"]).max())  # each starts when the one before it ended
        duration, start = end - start, end
        benchmarks.append({
            "config": {"strategy": {"type_": g["strategy"].iloc[0]}},
            "metrics": {"request_totals": {"successful": len(g), "errored": failed, "incomplete": 0}},
            "duration": duration, "start_time": 1_700_000_000.0 + end - duration,
            "requests": {"successful": [entry(r) for r in g.itertuples()], "errored": [{}] * failed,
                         "incomplete": []}})
    report = {"metadata": {"guidellm_version": "0.6.1"}, "args": {"profile": "sweep", "rate": [4]},
              "benchmarks": benchmarks}
    (folder / "benchmarks.json").write_text(json.dumps(report))


SERVER = ServerArgs(model="meta-llama/Llama-2-7b-hf", gpu="H100", max_model_len=4096, max_num_batched_tokens=2048,
                    max_num_seqs=64, async_scheduling=False)


def simulated_sweep(tmp_path):
    """A sweep run folder (exp-config, profile) and servesim's own simulation of its profile: the truth."""
    folder = write_exp_config(tmp_path / "sweep", gpu="H100", async_scheduling=False)
    (folder / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    run = RealRun(name="sweep", source="hand-made", path=folder, server=SERVER,
                  requests=pd.DataFrame(columns=["req_id"]), profile=PROFILE)
    return folder, predict_run(run, HostOverhead(), workload="profile", gpu_model="roofline").requests


def test_a_sweep_predicted_from_its_profile_is_scored_benchmark_by_benchmark(tmp_path):
    folder, truth = simulated_sweep(tmp_path)
    assert sorted(truth["phase"].unique()) == [0, 1, 2, 3]
    write_sweep_report(folder, truth, errored=1)
    [run] = find_runs(folder)
    pred = predict_run(run, HostOverhead(), workload="profile", gpu_model="roofline")
    rows = benchmark_rows(pred)
    assert len(rows) == 4 * len(COMPARED)
    assert max(abs(r["error"]) for r in rows) < 1e-6
    assert [b["failed"] for b in run.client_benchmarks.rows] == [0, 0, 0, 1]
    # guidellm's sweep: the constant benchmarks between the first two's achieved rates
    sim = predicted_benchmarks(pred.requests)
    assert [b["strategy"] for b in sim] == ["synchronous", "throughput", "constant", "constant"]
    assert sim[0]["requests_per_s"] < sim[2]["requests_per_s"] < sim[3]["requests_per_s"] <= sim[1]["requests_per_s"] * 1.01
    assert "4 guidellm benchmarks predicted from its profile" in benchmark_line(rows)
    lines, section = write_benchmarks([pred], tmp_path / "benchmarks.csv")
    assert lines == [benchmark_line(rows)] and len(pd.read_csv(tmp_path / "benchmarks.csv")) == len(rows)
    assert section.count("| sweep | guidellm |") == 4 and "(+0.0%)" in section and "### guidellm benchmarks" in section
    if importlib.util.find_spec("matplotlib"):  # the curve, where the plotting extra is installed
        assert (tmp_path / "benchmarks.png").stat().st_size > 10_000
    # the failed request is counted, and said without a client timeout to name
    assert "no client timeout modelled (guidellm): measured 1 failed of 33" in served_line(served_row(pred))


def test_a_replayed_run_is_scored_in_the_benchmarks_it_was_measured_in(tmp_path):
    folder, truth = simulated_sweep(tmp_path)
    write_sweep_report(folder, truth)
    [run] = find_runs(folder)
    pred = predict_run(run, HostOverhead(), gpu_model="roofline")  # auto: the recorded sends
    assert pred.workload == "replay" and "phase" not in pred.requests
    rows = benchmark_rows(pred)
    assert len(rows) == 4 * len(COMPARED) and {r["workload"] for r in rows} == {"replay"}
    assert max(abs(r["error"]) for r in rows) < 1e-4  # the sends to the us
    assert "4 guidellm benchmarks replayed" in benchmark_line(rows)
    # a run scored by vLLM's spans is predicted to their definitions: no client figures to set beside
    assert benchmark_rows(replace(pred, run=replace(run, measured_by="vllm-spans"))) == []


def stage_report(g: pd.DataFrame) -> dict:
    """inference-perf's per-stage lifecycle report of one simulated stage's requests."""
    ok = g[g["e2e_s"].notna()]
    span = float(g["arrival_time"].max() - g["arrival_time"].min())
    return {"load_summary": {"count": len(g), "achieved_rate": (len(g) - 1) / span},
            "successes": {"count": len(ok), "latency": {"time_to_first_token": {"mean": float(ok["ttft_s"].mean())},
                                                        "request_latency": {"mean": float(ok["e2e_s"].mean())}},
                          "output_len": {"mean": float(ok["num_output_tokens"].mean())}},
            "failures": {"count": len(g) - len(ok)}}


def test_an_inference_perf_run_is_scored_stage_by_stage(tmp_path):
    """Stage reports that are the simulation's own stages come back with no error, TPOT as the TPOT of
    the stage's means; a run without stage reports has no rows."""
    import copy

    from fidelity.benchmarks import stage_rows
    from fidelity_helpers import ISSUE_PROFILE

    folder = write_exp_config(tmp_path / "ip-run", gpu="H100", async_scheduling=False)
    profile = copy.deepcopy(ISSUE_PROFILE)
    profile["load"]["stages"] = [{"rate": 2, "duration": 6}, {"rate": 4, "duration": 4}]
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({"successes": {"latency": {
        "time_to_first_token": {"mean": 0.05}, "request_latency": {"mean": 2.0}}}}))
    [run] = find_runs(folder)
    pred = predict_run(run, HostOverhead(), gpu_model="roofline")
    assert pred.workload == "profile" and stage_rows(pred) == []  # no stage reports yet
    for k, g in pred.requests.groupby("stage"):
        (folder / f"stage_{k}_lifecycle_metrics.json").write_text(json.dumps(stage_report(g)))
    [run] = find_runs(folder)
    pred = predict_run(run, HostOverhead(), gpu_model="roofline")
    rows = benchmark_rows(pred)
    assert {r["metric"] for r in rows} == {"requests_per_s", "ttft_mean_ms", "tpot_of_means_ms", "e2e_mean_s"}
    assert len(rows) == 2 * 4 and max(abs(r["error"]) for r in rows) < 1e-9
    assert "2 inference-perf stages predicted from its profile" in benchmark_line(rows)
    assert benchmark_line([r for r in rows if r["benchmark"] == 0]) is None  # one stage: report.csv's row
    _, section = write_benchmarks([pred], tmp_path / "benchmarks.csv")
    assert "### inference-perf stages" in section and "TPOT of the means (ms)" in section


def test_a_simulated_sweep_draws_its_own_curve(tmp_path):
    from fidelity.benchmarks import plot_simulated

    rows = [{"benchmark": k, "requests_per_s": r, "ttft_mean_ms": 30.0 * (1 + k), "itl_mean_ms": 8.0 + k,
             "e2e_mean_s": 1.0 + k} for k, r in enumerate((1.0, 6.0, 9.0))]
    path = plot_simulated(rows, tmp_path / "benchmarks.png")
    if importlib.util.find_spec("matplotlib"):
        assert path is not None and path.stat().st_size > 10_000
    assert plot_simulated([], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_the_workloads_own_benchmarks_and_the_requests_table_report_alike():
    """`simulate` reports a sweep from the workload's bookkeeping, `reproduce` and the app from the
    finished requests table: one definition (`fidelity.benchmark_stats`), so the same figures."""
    from fidelity.predict import STAND_IN_WORKLOAD
    from fidelity.sources.guidellm import guidellm_workload
    from sim.config import load_config
    from sim.runner import simulate

    config = load_config({"model": {"name": "Llama-2-7b"}, "hardware": {"gpu": "H100-SXM"},
                          "scheduler": {"policy": "vllm", "max_num_batched_tokens": 2048, "max_num_seqs": 64},
                          "workload": dict(STAND_IN_WORKLOAD)})
    workload = guidellm_workload(PROFILE)
    result = simulate(config, workload=workload)
    own, table = workload.benchmark_rows(), predicted_benchmarks(result.requests)
    assert len(own) == len(table) == 4
    for a, b in zip(own, table):
        assert a["strategy"] == b["strategy"] and a["requests"] == b["requests"] == PROFILE["max-requests"]
        for key in ("requests_per_s", "ttft_mean_ms", "ttft_p99_ms", "itl_mean_ms", "e2e_p99_s",
                    "output_tokens_per_s"):
            assert b[key] == pytest.approx(a[key], rel=1e-9), key

"""Recorded engine settings are never silently ignored: each is modelled, or listed as not modelled."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml
from fidelity_helpers import make_measured_run, write_exp_config

from fidelity.engine_settings import (ASSUMED, INFERRED, MODELLED, NO_EFFECT, NOT_MODELLED, classify, not_modelled,
                                      settings_table)
from fidelity.from_run import config_from_run, load_run
from fidelity.run_folders import find_runs
from servesim.cli import main

UNKNOWN = {"frobnicate_level": 3, "enforce_eager": True}


def synthetic_run(folder, **extra):
    write_exp_config(folder, gpu="H100", kv_offloading_size=8, kv_offloading_backend="native", **UNKNOWN, **extra)
    (folder / "profile.yaml").write_text(yaml.safe_dump({
        "rate-type": "constant", "rate": 2, "max-requests": 12, "data": {"prompt_tokens": 200, "output_tokens": 16}}))
    return folder


def test_unknown_and_unmodelled_arguments_are_listed_by_name(tmp_path):
    run = load_run(synthetic_run(tmp_path / "run"))
    rows = {r["setting"]: r for r in settings_table(run)}
    assert set(UNKNOWN) | {"model", "kv_offloading_size", "kv_offloading_backend", "max_num_seqs"} <= set(rows)
    assert all(rows[k]["status"] == NOT_MODELLED for k in UNKNOWN)
    assert "does not know" in rows["frobnicate_level"]["note"]
    assert rows["kv_offloading_size"]["status"] == MODELLED and "offload" in rows["kv_offloading_size"]["note"]
    assert sorted(not_modelled(run)) == sorted(f"{k}={v}" for k, v in UNKNOWN.items())


def test_an_offloading_size_a_pre_0_14_engine_ignored_is_listed_as_without_effect(tmp_path):
    write_exp_config(tmp_path / "run", gpu="H100", kv_offloading_size=8, vllm_version="0.12.0")
    rows = {r["setting"]: r for r in settings_table(load_run(tmp_path / "run"))}
    assert rows["kv_offloading_size"]["status"] == NO_EFFECT and "0.14" in rows["kv_offloading_size"]["note"]


def test_async_scheduling_recorded_in_exp_config_is_simulated(tmp_path):
    run = load_run(synthetic_run(tmp_path / "run", async_scheduling=True))
    rows = {r["setting"]: r for r in settings_table(run)}
    assert rows["async_scheduling"]["status"] == MODELLED
    assert config_from_run(tmp_path / "run", measured_kernels=False).scheduler.async_scheduling is True
    plain = load_run(synthetic_run(tmp_path / "plain"))
    assert {r["setting"]: r for r in settings_table(plain)}["async_scheduling"]["status"] == ASSUMED


def test_value_decides_where_a_setting_is_only_partly_modelled():
    assert classify("async_scheduling", False)[0] == MODELLED
    assert classify("async_scheduling", True)[0] == NOT_MODELLED
    assert classify("kv_cache_dtype", "fp8_e4m3")[0] == MODELLED and classify("kv_cache_dtype", "int4")[0] == NOT_MODELLED
    assert classify("dtype", "float32")[0] == NOT_MODELLED and classify("dtype", "bfloat16")[0] == MODELLED
    assert classify("seed", 42)[0] == NO_EFFECT
    assert classify("scheduler_reserve_full_isl", True)[0] == MODELLED  # vLLM 0.19's default, simulated
    assert classify("scheduler_reserve_full_isl", False)[0] == NOT_MODELLED


def test_simulate_from_run_says_and_writes_what_it_does_not_model(tmp_path, capsys):
    folder = synthetic_run(tmp_path / "run")
    out = tmp_path / "out"
    assert main(["simulate", "--from-run", str(folder), "--out", str(out), "--set", "hardware.latency=roofline"]) == 0
    err = capsys.readouterr().err
    assert all(f"{k}=" in err and "not modelled" in err for k in UNKNOWN)
    table = pd.read_csv(out / "settings.csv")
    assert set(UNKNOWN) <= set(table["setting"]) and set(table["status"]) <= {MODELLED, NOT_MODELLED, NO_EFFECT, ASSUMED}


def test_reproduce_reports_every_runs_settings(tmp_path, capsys):
    folder = make_measured_run(tmp_path / "gt" / "camp" / "run0", n=8, rate=4.0)
    exp = yaml.safe_load((folder / "exp-config.yaml").read_text())
    (folder / "exp-config.yaml").write_text(yaml.safe_dump({**exp, "frobnicate_level": 3}))
    out = tmp_path / "r"
    assert main(["reproduce", str(tmp_path / "gt"), "--fit", "none", "--out", str(out), "--gpu-model", "roofline"]) == 0
    assert "frobnicate_level=3" in capsys.readouterr().err
    report = pd.read_csv(out / "report.csv")
    assert (report["not_modelled"] == "frobnicate_level=3").all()
    assert "frobnicate_level" in set(pd.read_csv(out / "settings.csv")["setting"])
    assert "frobnicate_level" in (out / "report.md").read_text()


def test_data_parallel_engines_reach_simulate_from_run(tmp_path):
    folder = synthetic_run(tmp_path / "dp", data_parallel_size=2)
    assert config_from_run(folder, ["hardware.latency=roofline"]).cluster.num_replicas == 2


def test_every_shipped_runs_settings_have_a_status(shared_data):
    runs = find_runs(shared_data / "groundtruth")
    assert runs
    for run in runs:
        rows = settings_table(run)
        assert all(r["status"] in (MODELLED, NOT_MODELLED, NO_EFFECT, INFERRED, ASSUMED) for r in rows)
        assert {r["setting"] for r in rows} >= set(run.recorded_args)
    by_name = {r.name: r for r in runs}
    rtx = by_name.get("RTX4090/Llama-3.1-8B")
    if rtx is not None:  # its resolved config turns vLLM 0.19's async scheduling on: the 0.19 default, simulated
        assert "async_scheduling=True" not in not_modelled(rtx)
        assert {r["setting"]: r for r in settings_table(rtx)}["async_scheduling"]["status"] == MODELLED
    ds = [r for r in runs if r.source.startswith("distserve")]  # the launch script's settings: its padding cap
    for r in ds:                                                 # and Ray hops modelled, its swap space unused
        rows = {x["setting"]: x for x in settings_table(r)}
        assert rows["swap_space"]["status"] == NO_EFFECT and rows["max_paddings"]["status"] == MODELLED
        assert rows["engine_use_ray"]["status"] == rows["worker_use_ray"]["status"] == MODELLED
        assert not not_modelled(r)


def test_what_a_run_does_not_record_is_listed_as_assumed(tmp_path):
    run = load_run(synthetic_run(tmp_path / "run"))
    rows = {r["setting"]: r for r in settings_table(run)}
    assert rows["block_size"]["status"] == ASSUMED and rows["block_size"]["value"] == 16
    assert rows["enable_prefix_caching"]["status"] == ASSUMED
    assert "tensor_parallel_size" not in rows  # recorded as tensor_parallelism


def test_an_unrecorded_engine_release_is_said_in_one_line(tmp_path, capsys):
    from fidelity.client_workload import version_assumption

    run = load_run(synthetic_run(tmp_path / "run"))
    line = version_assumption(run)
    assert line and "\n" not in line and "engine version not recorded: assumed vLLM" in line
    recorded = load_run(synthetic_run(tmp_path / "recorded", vllm_version="0.11.0"))
    assert "engine version" not in (version_assumption(recorded) or "")
    out = tmp_path / "out"
    assert main(["simulate", "--from-run", str(tmp_path / "run"), "--out", str(out),
                 "--set", "hardware.latency=roofline"]) == 0
    err = capsys.readouterr().err
    assert sum("engine version not recorded" in ln for ln in err.splitlines()) == 1


@pytest.mark.parametrize("version, on", [("0.13.0", False), ("0.14.0", True)])  # v0.14.0: vllm#27614's default
def test_unrecorded_async_scheduling_follows_the_release_default(tmp_path, version, on):
    folder = synthetic_run(tmp_path / "run", vllm_version=version)
    row = {r["setting"]: r for r in settings_table(load_run(folder))}["async_scheduling"]
    assert row["status"] == ASSUMED and row["value"] is on
    assert config_from_run(folder, measured_kernels=False).scheduler.async_scheduling is on


def test_true_false_settings_spelled_as_strings_are_simulated_and_listed_as_written(tmp_path):
    folder = synthetic_run(tmp_path / "run", enable_prefix_caching="false", async_scheduling="no", enable_lora="False")
    run = load_run(folder)
    assert run.server.enable_prefix_caching is False and run.server.async_scheduling is False
    rows = {r["setting"]: r for r in settings_table(run)}
    # modelled as the value written (bool("no") would read on), and the note says what is simulated
    assert rows["async_scheduling"]["value"] == "no" and rows["async_scheduling"]["status"] == MODELLED
    assert "v0 engine" not in rows["async_scheduling"]["note"]
    assert rows["enable_lora"]["status"] == MODELLED  # off, as simulated
    config = config_from_run(folder, measured_kernels=False)
    assert config.cache.enable_prefix_caching is False and config.scheduler.async_scheduling is False


def test_the_clients_request_settings_are_listed_modelled_or_not():
    """inference-perf's api.type and api.streaming: a streamed completion is what is simulated; a chat
    request or an unstreamed one is listed as not modelled, with why (issue 15: nothing ignored)."""
    from pathlib import Path
    from types import SimpleNamespace

    from fidelity.engine_settings import client_rows

    def rows(api):
        run = SimpleNamespace(name="r", profile={"api": api}, profile_file=Path("results/config.yaml"), client_args={})
        return {r["setting"]: (r["status"], r["note"], r["recorded_in"]) for r in client_rows(run)}

    as_run = rows({"type": "completion", "streaming": True, "headers": None})
    assert as_run == {"api.type": (MODELLED, "the simulated requests are streamed completions", "config.yaml"),
                      "api.streaming": (MODELLED, "the simulated requests are streamed completions", "config.yaml")}
    other = rows({"type": "chat", "streaming": "false"})
    assert other["api.type"][0] == other["api.streaming"][0] == NOT_MODELLED
    assert "template tokens" in other["api.type"][1] and "whole response" in other["api.streaming"][1]
    assert rows({}) == {} and client_rows(SimpleNamespace(name="r", profile=None, profile_file=None, client_args={})) == []

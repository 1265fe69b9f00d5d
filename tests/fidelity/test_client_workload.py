"""What the client really sent: the release's generator, checked against the run's measured lengths."""
from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml
from fidelity_helpers import ISSUE_PROFILE, write_exp_config

from servesim.cli import main
from fidelity.client_workload import BAND, check_workload
from fidelity.sources.vllm_server import load_server_run
from policies import ConfigError

SYS, Q, OUT = 100, 447, 248


def chat_run(folder, measured_prompt: float | None, version: str | None = None, max_model_len: int = 4096):
    """An inference-perf multi-turn shared-prefix run folder with (optionally) a measured summary."""
    exp = {"max_model_len": max_model_len, "gpu": "H100"}
    if version is not None:
        exp["inference_perf_version"] = version
    write_exp_config(folder, **exp)
    profile = copy.deepcopy(ISSUE_PROFILE)
    profile["data"]["shared_prefix"].update(num_unique_system_prompts=3, num_users_per_system_prompt=5,
                                            system_prompt_len=SYS, question_len=Q, output_len=OUT)
    profile["load"]["stages"] = [{"rate": 4, "duration": 15}, {"rate": 8, "duration": 10}]
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    if measured_prompt is not None:
        (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({
            "successes": {"count": 140, "prompt_len": {"mean": measured_prompt}, "output_len": {"mean": OUT * 0.99},
                          "latency": {"time_to_first_token": {"mean": 0.1}, "request_latency": {"mean": 3.0}}},
            "failures": {"count": 0}}))
    return folder


def test_measured_system_prompt_plus_question_keeps_every_request_served(tmp_path):
    # the measured prompts are system prompt + question (a few % of re-tokenization off), the growing
    # conversation of the newest release would be several times longer: the evidence decides
    folder = chat_run(tmp_path / "chat", measured_prompt=(SYS + Q) * 1.02)
    check = check_workload(load_server_run(folder))
    assert check.behaviour == "single-turn" and "measured" in check.resolution
    assert check.generated_prompt == pytest.approx(SYS + Q) and 1 / BAND < check.prompt_ratio < BAND
    assert check.num_over_limit == 0
    out = tmp_path / "out"
    assert main(["simulate", "--from-run", str(folder), "--out", str(out), "--quiet"]) == 0
    req = pd.read_csv(out / "requests.csv")
    assert len(req) == 4 * 15 + 8 * 10 and (req["finish_reason"] != "rejected").all()
    assert (req["num_prompt_tokens"] == SYS + Q).all() and (req["num_prompt_tokens"] + OUT <= 4096).all()
    assert any("simulating single-turn" in line for line in (out / "config.toml").read_text().splitlines())


@pytest.mark.parametrize("version, behaviour", [("0.2.0", "single-turn"), ("0.4.0", "chat-0.3"),
                                                ("0.5.0", "chat-0.5"), ("v0.6.1", "chat-0.6")])
def test_a_recorded_release_selects_its_behaviour(tmp_path, version, behaviour):
    check = check_workload(load_server_run(chat_run(tmp_path / version, None, version, max_model_len=1 << 20),
                                           require_measurements=False))
    assert (check.version, check.behaviour, check.resolution) == (version, behaviour, "")
    assert check.basis == f"inference-perf {version}" + (": before 0.3 enable_multi_turn_chat did not exist"
                                                         if behaviour == "single-turn" else "")


def test_lengths_that_agree_with_the_release_change_nothing(tmp_path):
    # a 0.6 chat at a limit that holds every turn: its own mean, measured, is kept as it is
    folder = chat_run(tmp_path / "c", None, "0.6.0", max_model_len=1 << 20)
    gen = check_workload(load_server_run(folder, require_measurements=False)).generated_prompt
    chat_run(tmp_path / "c", gen * 1.03, "0.6.0", max_model_len=1 << 20)
    check = check_workload(load_server_run(folder))
    assert check.behaviour == "chat-0.6" and check.resolution == "" and check.prompt_ratio == pytest.approx(1 / 1.03)


def test_no_behaviour_matching_scales_the_prompts(tmp_path):
    folder = chat_run(tmp_path / "s", measured_prompt=(SYS + Q) / 3)
    check = check_workload(load_server_run(folder))
    assert check.behaviour == "single-turn" and check.prompt_scale == pytest.approx(1 / 3, rel=0.02)
    assert check.generated_prompt == pytest.approx((SYS + Q) / 3, rel=0.02) and "x 0.3" in check.resolution


def test_no_version_says_what_was_assumed(tmp_path):
    check = check_workload(load_server_run(chat_run(tmp_path / "n", None), require_measurements=False))
    assert "assumed inference-perf >= 0.6" in check.basis and "no measured request lengths" in check.lines()[1]
    # the newest release's sessions outgrow the limit: said, with how to name the release
    assert check.num_over_limit > 0 and f"{check.num_over_limit} of {check.num_generated}" in check.lines()[1]
    assert "client.version" in check.lines()[2]
    roomy = check_workload(load_server_run(chat_run(tmp_path / "r", None, max_model_len=1 << 20),
                                           require_measurements=False))
    assert roomy.num_over_limit == 0 and len(roomy.lines()) == 2


def test_shipped_guidellm_runs_match_their_measured_lengths(shared_data):
    from fidelity.run_folders import find_runs

    runs = [r for r in find_runs(shared_data / "groundtruth" / "vllm-0.11-jan2026")]
    assert runs
    for run in runs:
        check = check_workload(run)
        assert check.client == "guidellm" and check.measured_from
        # guidellm's synthetic lengths, prefix included, against what was measured (sampling noise)
        assert abs(check.prompt_ratio - 1) < 0.15 and abs(check.output_ratio - 1) < 0.25, check.lines()
        if (run.path / "guidellm-results.json").is_file():
            assert check.version.startswith("0.6.0")


def test_reproduce_writes_the_workload_check_and_the_ttft_parts(tmp_path, capsys):
    folder = chat_run(tmp_path / "runs" / "chat", measured_prompt=(SYS + Q) * 0.98)
    rep = tmp_path / "rep"
    assert main(["reproduce", str(tmp_path / "runs"), "--out", str(rep), "--fit", "none", "--gpu-model", "roofline"]) == 0
    assert "simulating single-turn" in capsys.readouterr().err
    work = pd.read_csv(rep / "workload.csv")
    assert list(work["behaviour"]) == ["single-turn"] and work["prompt_ratio"].between(1 / BAND, BAND).all()
    parts = pd.read_csv(rep / "ttft_parts.csv").set_index("part")
    names = ["client_send_s", "api_server_s", "engine_queue_s", "prefill_steps_s", "first_chunk_s"]
    assert parts.loc[names, "predicted_s"].sum() == pytest.approx(parts.loc["ttft_s", "predicted_s"], rel=1e-9)
    assert parts["predicted_origin"].astype(bool).all()
    assert folder.name in set(parts["run"])


def test_a_client_release_read_as_a_number_is_refused_not_read_as_another(tmp_path):
    # `inference_perf_version: 0.50` unquoted is the number 0.5: which release was meant is lost
    run = load_server_run(chat_run(tmp_path / "run", None, 0.5), require_measurements=False)
    with pytest.raises(ConfigError, match=r"^exp-config.inference_perf_version: 0.5 was read as a number.*quote it"):
        check_workload(run)

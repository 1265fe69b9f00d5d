"""inference-perf run folders whose reports sit in a subfolder (`results/`) beside the client's own
resolved `config.yaml`: read as the client ran, every request served, every setting listed.

`tests/fidelity/data/inference-perf-results` is a made-up folder in that layout (always runs);
`SERVESIM_UNSEEN_RUNS` may name a folder of real runs in it (e.g. inference-sim/training's
default_args, not shipped): those tests skip without it.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fidelity.client_workload import check_workload
from fidelity.engine_settings import ASSUMED, settings_table
from fidelity.from_run import load_run
from fidelity.run_folders import find_runs
from fidelity.sources.inference_perf_profile import SharedPrefixProfile
from fidelity.sources.vllm_server import ignored_profile_keys, load_server_run
from policies import ConfigError
from servesim.cli import main
from records.yaml_file import read_yaml

MADE_UP = Path(__file__).parent / "data" / "inference-perf-results"
RUN = MADE_UP / "made-up-llama-2-7b-tp1"
UNSEEN_ENV = "SERVESIM_UNSEEN_RUNS"


def test_reports_are_read_from_the_results_folder():
    run = load_server_run(RUN)
    assert run.measured_by == "inference-perf-summary"
    assert run.summary["ttft_s"] == pytest.approx(0.021) and run.summary["e2e_s"] == pytest.approx(0.62)
    # the profile is the client's resolved one: 4 groups x 3 prompts, no multi-turn
    assert run.profile_file == RUN / "results" / "config.yaml"
    sp = SharedPrefixProfile.from_dict(run.profile)
    assert (sp.num_groups, sp.num_prompts_per_group, sp.enable_multi_turn_chat) == (4, 3, False)
    assert set(run.profile_ignored) == {f"data.shared_prefix.{k}" for k in (
        "enable_multi_turn_chat", "num_unique_system_prompts", "num_users_per_system_prompt")}


def test_ignored_keys_are_the_profile_keys_the_resolved_config_lacks():
    assert ignored_profile_keys({"a": 1, "b": {"c": 2, "d": 3}, "e": {"f": 1}}, {"a": 0, "b": {"c": 0}, "e": 5}) == ["b.d"]
    assert ignored_profile_keys(None, {"a": 1}) == []


def test_workload_check_compares_the_measured_lengths():
    check = check_workload(load_server_run(RUN))
    assert check.behaviour == "single-turn" and "that release ignored them" in check.basis
    assert check.measured_from == "summary_lifecycle_metrics.json"
    assert check.generated_prompt == pytest.approx(380) and check.measured_prompt == pytest.approx(397.5)
    assert check.num_over_limit == 0 and not check.resolution  # a few %: tokenization, nothing resolved


def test_profile_yaml_alone_is_resolved_by_the_measured_lengths(tmp_path):
    """Without the resolved config the multi-turn profile.yaml says chat-0.6 (no version recorded),
    whose growing prompts are 1.5x the measured ones: the measured lengths pick single-turn."""
    folder = tmp_path / RUN.name
    folder.mkdir()
    for name in ("exp-config.yaml", "profile.yaml"):
        (folder / name).write_text((RUN / name).read_text())
    (folder / "summary_lifecycle_metrics.json").write_text((RUN / "results" / "summary_lifecycle_metrics.json").read_text())
    check = check_workload(load_server_run(folder))
    assert "chat-0.6's prompts" in check.resolution and check.behaviour == "single-turn"
    assert check.num_over_limit == 0


@pytest.mark.parametrize("damage, says", [
    (lambda d: d["successes"].update(prompt_len={"mean": "lots"}), "prompt_len.mean: expected a number, got 'lots'"),
    (lambda d: d.update(successes=[1, 2]), "successes: expected an object"),
], ids=["text-mean", "successes-a-list"])
def test_a_damaged_summary_names_the_file_and_field(tmp_path, damage, says):
    """The measured lengths a workload is checked against come from the client's summary: damaged,
    it is refused naming the file and the field, not with float()'s or dict's traceback."""
    folder = tmp_path / RUN.name
    shutil.copytree(RUN, folder)
    path = folder / "results" / "summary_lifecycle_metrics.json"
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=f"inference-perf summary: {path}: {says}"):
        check_workload(load_server_run(folder))


def _simulate(folder: Path, out: Path) -> dict:
    assert main(["simulate", "--from-run", str(folder), "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "summary.json").read_text())


def _listed(run, rows) -> None:
    exp = read_yaml(run.path / "exp-config.yaml")
    listed = {r["setting"] for r in rows}
    assert set(exp) <= listed, f"not listed: {sorted(set(exp) - listed)}"
    assert all(r["status"] for r in rows)


def test_simulate_from_run_serves_every_request_and_lists_settings(tmp_path):
    s = _simulate(RUN, tmp_path / "out")
    sp = SharedPrefixProfile.from_dict(load_server_run(RUN).profile)
    assert s["num_finished"] == s["num_requests"] == sp.num_requests == 60
    assert s["num_rejected"] == 0 and s["num_aborted"] == 0
    rows = settings_table(load_run(RUN))
    _listed(load_run(RUN), rows)
    assert {r["setting"] for r in rows if r["status"] == ASSUMED} >= {"gpu", "engine_version", "gpu_memory_utilization"}
    assert (tmp_path / "out" / "settings.csv").is_file()


# --- real run folders, when a folder of them is named ---------------------------------------------
def _unseen() -> Path:
    folder = os.environ.get(UNSEEN_ENV)
    if not folder:
        pytest.skip(f"{UNSEEN_ENV} names no folder of inference-perf run folders (e.g. inference-sim/training default_args)")
    if not Path(folder).is_dir():
        pytest.skip(f"{UNSEEN_ENV}={folder}: no such folder")
    return Path(folder)


def test_unseen_runs_every_request_fits_and_every_setting_is_listed():
    runs = find_runs(_unseen())
    assert runs, "no run folders found"
    for run in runs:
        check = check_workload(run)
        assert check is not None and check.measured_from, run.name
        assert check.num_over_limit == 0, f"{run.name}: {check.num_over_limit} requests over max_model_len"
        assert 1 / 1.5 <= check.prompt_ratio <= 1.5, (run.name, check.prompt_ratio)
        _listed(run, settings_table(run))


def test_unseen_run_simulated_serves_every_request(tmp_path):
    runs = find_runs(_unseen())
    smallest = min(runs, key=lambda r: SharedPrefixProfile.from_dict(r.profile).num_requests)
    s = _simulate(smallest.path, tmp_path / "out")
    assert s["num_rejected"] == 0
    assert s["num_requests"] == SharedPrefixProfile.from_dict(smallest.profile).num_requests


def test_summary_tpot_is_per_requested_token_under_ignore_eos():
    """The made-up summary's output_len (52.3) is the client's re-tokenized count; the server
    generated max_tokens = 60 for every request (ignore_eos): TPOT per token divides by 59."""
    run = load_server_run(RUN)
    assert run.summary["tpot_s"] == pytest.approx((0.62 - 0.021) / 59)

"""`servesim simulate` as a user runs it: a subprocess, its exit code, stdout, stderr and files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servesim.cli import main
from sim.config import load_config
from sim.runner import simulate

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "examples" / "default.toml"


def servesim(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "servesim.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_simulate_prints_a_summary_and_writes_the_four_files(tmp_path):
    out = tmp_path / "run"
    proc = servesim("simulate", DEFAULT, "--set", "workload.num_requests=60", "--out", out)
    assert proc.returncode == 0, proc.stderr
    for word in ("TTFT", "TPOT", "throughput", "goodput"):
        assert word in proc.stdout
    for name in ("summary.json", "requests.csv", "steps.csv", "config.toml"):
        assert (out / name).is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 60
    # the saved config reproduces the run
    again = servesim("simulate", out / "config.toml", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == summary


def test_set_overrides_reach_the_run(tmp_path):
    proc = servesim("simulate", DEFAULT, "--set", "workload.num_requests=30", "--set", "scheduler.policy=static",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_requests"] == 30


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


HEADER = "arrival_time,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("make_args, field", [
    (lambda d: [DEFAULT, "--set", "scheduler.polcy=chunked"], "scheduler.polcy"),
    (lambda d: [DEFAULT, "--set", "scheduler.policy=fastest"], "scheduler.policy"),
    (lambda d: [DEFAULT, "--set", "workload.rate=-2"], "workload.rate"),
    (lambda d: [DEFAULT, "--set", "nosuch.key=1"], "nosuch"),
    (lambda d: [DEFAULT, "--set", "workload.trace=" + str(_write(d / "e.csv", HEADER))],
     "workload.trace"),
    (lambda d: [DEFAULT, "--set", "workload.trace=" + str(_write(d / "m.csv", HEADER + "0,x,1\n"))],
     "workload.trace"),
    (lambda d: [d / "missing.toml"], "config"),
    (lambda d: [_write(d / "bad.toml", "[scheduler\n")], "config"),
])
def test_bad_input_exits_2_with_one_line_naming_the_field(tmp_path, capsys, make_args, field):
    # in-process through the same dispatcher as the command (a subprocess each would cost seconds)
    code = main(["simulate", *map(str, make_args(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"servesim simulate: error: {field}")


def test_bad_input_from_the_command_line_has_no_traceback():
    proc = servesim("simulate", DEFAULT, "--set", "workload.rate=-2")
    assert proc.returncode == 2
    assert proc.stderr.startswith("servesim simulate: error: workload.rate")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_closed_pipe_is_not_an_error():
    proc = subprocess.run(f"{sys.executable} -m servesim.cli simulate {DEFAULT} --set workload.num_requests=20 | head -1",
                          shell=True, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("requests") and "Traceback" not in proc.stderr


def test_from_run_rebuilds_a_real_runs_config(shared_data, capsys):
    runs = shared_data / "groundtruth" / "vllm-0.11-jan2026"
    run_dir = next((p for p in sorted(runs.glob("*")) if p.is_dir()), None)
    if run_dir is None:
        pytest.skip(f"no run folders in {runs}")
    code = main(["simulate", "--from-run", str(run_dir), "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["num_requests"] > 0 and summary["num_finished"] + summary["num_rejected"] == summary["num_requests"]


def test_config_and_from_run_together_is_bad_input(capsys):
    assert main(["simulate", str(DEFAULT), "--from-run", "x"]) == 2
    assert capsys.readouterr().err.startswith("servesim simulate: error: --from-run")


@pytest.mark.parametrize("kind", ["poisson", "closed_loop"])
def test_requests_a_time_limit_leaves_out_are_counted_in_a_note(tmp_path, capsys, kind):
    """`sim.max_sim_time_s` stops the clock: the requests not sent by then are in no result, and the
    run says how many (the others, aborted or finished, are in the summary)."""
    out = tmp_path / "run"
    args = ["simulate", str(DEFAULT), "--set", f"workload.kind={kind}", "--set", "workload.num_users=4",
            "--set", "workload.num_requests=100", "--out", str(out), "--no-progress"]
    assert main([*args, "--set", "sim.max_sim_time_s=3"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    left = 100 - summary["num_requests"]
    assert left > 0
    line = f"note: sim.max_sim_time_s = 3: {left} of the workload's 100 requests are sent at or after the clock stops"
    assert line in capsys.readouterr().err and line[6:] in (out / "config.toml").read_text()
    assert main(args) == 0  # no limit: every request is in the results, nothing to say
    assert "max_sim_time_s" not in capsys.readouterr().err


@pytest.mark.parametrize("sets, says", [
    (["workload.duration=0.001", "workload.rate=2"], "none arrived within workload.duration = 0.001 s"),
    (["workload.kind=staged", "workload.stages=[[0, 5], [0, 3]]"], "its stages sent none"),
    (["workload.max_model_len=10", "workload.too_long=filter"], "workload.too_long = filter dropped all"),
])
def test_a_workload_that_makes_no_request_is_an_error_saying_why(capsys, sets, says):
    """A run of no request measures nothing: exit 2 with the one line naming what made it empty,
    not a summary of dashes and exit 0."""
    args = ["simulate", str(DEFAULT), "--no-progress", "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servesim simulate: error: workload: the run had no requests")
    assert says in err[0]


def test_from_python_a_workload_of_no_request_says_so_in_its_notes():
    result = simulate(load_config(DEFAULT, ["workload.duration=0.001", "workload.rate=2"]))
    assert result.summary["num_requests"] == 0
    assert any(n.startswith("workload: the run had no requests") for n in result.config.notes)
    assert not any("no requests" in n for n in simulate(load_config(DEFAULT, ["workload.num_requests=5"])).config.notes)

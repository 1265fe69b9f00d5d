"""Every simulator config in examples/ runs through the CLI as a newcomer would, and shows what it is for.

An example whose first line reads `# servesim <command> ...` for another command (run, serve,
validate, ...) belongs to that command's tests; every other example is a `servesim simulate` config.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OTHER_COMMAND = re.compile(r"#\s*servesim\s+(?!simulate\b)[a-z]+\b")
EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.toml")
                  if not OTHER_COMMAND.match(p.read_text().split("\n", 1)[0]))


@pytest.fixture(scope="module")
def summaries(tmp_path_factory) -> dict[str, dict]:
    """Run each example once (`servesim simulate X --out DIR --quiet`); name -> summary.json."""
    out, procs = {}, {}
    for path in EXAMPLES:  # all at once: the runs are independent and mostly start-up time
        run_dir = tmp_path_factory.mktemp(path.stem)
        procs[path] = run_dir, subprocess.Popen(
            [sys.executable, "-m", "servesim.cli", "simulate", str(path.relative_to(REPO)), "--out", str(run_dir),
             "--quiet", "--no-plot"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for path, (run_dir, proc) in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{path.name}: {err}"
        for name in ("summary.json", "requests.csv", "steps.csv", "config.toml"):
            assert (run_dir / name).is_file(), f"{path.name}: {name} missing"
        out[path.stem] = json.loads((run_dir / "summary.json").read_text())
    return out


def test_there_are_examples():
    assert {"default", "deepseek67b_h800_nochunk", "deepseek67b_h800_chunk512", "deepseek67b_h800_chunk256",
            "long_among_short_static", "long_among_short_continuous"} <= {p.stem for p in EXAMPLES}


@pytest.mark.parametrize("name", [p.stem for p in EXAMPLES])
def test_example_runs_and_finishes_every_request(summaries, name):
    s = summaries[name]
    assert s["num_requests"] > 0
    assert s["num_finished"] == s["num_requests"], s


def test_deepseek_scenario_chunking_smooths_decodes_and_delays_first_tokens(summaries):
    # the design notes' table: p99 TPOT and max stall fall with the budget, mean TTFT rises
    none, c512, c256 = (summaries[f"deepseek67b_h800_{v}"] for v in ("nochunk", "chunk512", "chunk256"))
    assert none["tpot_s"]["p99"] > c512["tpot_s"]["p99"] > c256["tpot_s"]["p99"]
    assert none["max_stall_s"] > c512["max_stall_s"] > c256["max_stall_s"]
    assert none["ttft_s"]["mean"] < c512["ttft_s"]["mean"] < c256["ttft_s"]["mean"]


def test_long_among_short_static_pads_and_continuous_does_not(summaries):
    static, cont = summaries["long_among_short_static"], summaries["long_among_short_continuous"]
    assert static["padding_fraction"] > 0.5 and cont["padding_fraction"] == 0.0
    # the 63 short answers leave as soon as they are done instead of waiting for the long one
    assert cont["e2e_s"]["p50"] < static["e2e_s"]["p50"] / 3
    assert cont["duration_s"] < static["duration_s"]

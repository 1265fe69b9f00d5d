"""`servesim simulate --out`: the run streams, draws timeline.png only when asked, starts without pandas."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "examples" / "default.toml"


def test_plot_only_when_asked_and_the_summary_is_the_in_memory_one(tmp_path):
    pytest.importorskip("matplotlib")
    from sim.config import load_config
    from sim.runner import simulate

    args = [sys.executable, "-m", "servesim.cli", "simulate", str(DEFAULT), "--set", "workload.num_requests=80",
            "--quiet", "--out"]
    plain = subprocess.run(args + [str(tmp_path / "a")], cwd=REPO, capture_output=True, text=True, timeout=300)
    drawn = subprocess.run(args + [str(tmp_path / "b"), "--plot"], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0 and drawn.returncode == 0, plain.stderr + drawn.stderr
    assert not (tmp_path / "a" / "timeline.png").exists()
    assert (tmp_path / "b" / "timeline.png").stat().st_size > 10_000
    streamed = json.loads((tmp_path / "a" / "summary.json").read_text())
    exact = simulate(load_config(DEFAULT, ["workload.num_requests=80"])).summary
    assert streamed["num_requests"] == exact["num_requests"] == 80
    for key in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
        assert streamed[key]["p99"] == exact[key]["p99"] and streamed[key]["max"] == exact[key]["max"]
        assert streamed[key]["mean"] == pytest.approx(exact[key]["mean"], rel=1e-12)


def test_a_run_with_outputs_imports_neither_pandas_nor_matplotlib(tmp_path):
    """Start-up: the CLI's streamed path writes every table without the heavy imports."""
    code = ("import sys\nfrom servesim.cli import main\n"
            f"code = main(['simulate', {str(DEFAULT)!r}, '--set', 'workload.num_requests=20', '--quiet', "
            f"'--out', {str(tmp_path)!r}])\n"
            "heavy = [m for m in ('pandas', 'matplotlib', 'tqdm') if m in sys.modules]\n"
            "print(code, heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 []"
    assert (tmp_path / "requests.csv").is_file() and (tmp_path / "steps.csv").is_file()

"""`--threads` of the engine's commands against the CPUs this process may use (`servesim.commands.options`)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from policies import ConfigError
from servesim.cli import main
from servesim.commands import options

REPO = Path(__file__).resolve().parents[2]


def test_threads_are_refused_below_one_and_above_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(options, "usable_cpus", lambda: 4)
    assert options.check_threads(argparse.Namespace(threads=4)) == 4
    with pytest.raises(ConfigError, match=r"^--threads: 5 is more than the 4 CPU\(s\) this process may use; "
                                          r"choose 1\.\.4$"):
        options.check_threads(argparse.Namespace(threads=5))
    with pytest.raises(ValueError, match=r"^--threads: must be >= 1, got 0$"):
        options.check_threads(argparse.Namespace(threads=0))


def test_the_usable_cpus_are_the_affinity_set():
    assert 1 <= options.usable_cpus() <= (os.cpu_count() or 1)


@pytest.mark.parametrize("command", [
    ["run", str(REPO / "examples/engine.toml")],
    ["validate", str(REPO / "examples/validate-chunked-128.toml")],
    ["serve", str(REPO / "examples/serve-tiny.toml")],
    ["calibrate", "--model", str(REPO / "examples/tiny-llama/config.json"), "--out", "unwritten.json"],
])
def test_every_engine_command_refuses_threads_the_machine_lacks_before_any_work(command, capsys, tmp_path,
                                                                                monkeypatch):
    torch = pytest.importorskip("torch")

    def crash(n):  # what torch does with 100000 threads: a segmentation fault
        raise AssertionError(f"torch was given {n} threads")

    monkeypatch.setattr(torch, "set_num_threads", crash)
    monkeypatch.chdir(tmp_path)  # calibrate's --out, were it reached
    assert main([*command, "--threads", "100000", "--quiet"]) == 2
    cpus = options.usable_cpus()
    assert capsys.readouterr().err.strip().endswith(
        f"error: --threads: 100000 is more than the {cpus} CPU(s) this process may use; choose 1..{cpus}")
    assert list(tmp_path.iterdir()) == []

"""`servesim calibrate`'s flags, checked before any work (`servesim.commands.calibrate`)."""
from __future__ import annotations

from pathlib import Path

import pytest

from servesim.cli import main

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "examples" / "tiny-llama" / "config.json")


@pytest.mark.parametrize("args, message", [
    (["--model", TINY], "--out: measure mode needs --out PROFILE, the profile file to write"),
    (["--out", "p.json"], "--model: measure mode needs --model CONFIG.json, the engine model's config"),
])
def test_measure_mode_names_the_flag_that_is_missing(args, message, capsys):
    assert main(["calibrate", *args]) == 2
    assert capsys.readouterr().err.strip().startswith(f"servesim calibrate: error: {message}")


@pytest.mark.parametrize("model", ["nonexist.json", "llama-2-7b"])
def test_measure_mode_offers_only_what_it_takes(model, capsys, tmp_path):
    assert main(["calibrate", "--model", model, "--out", str(tmp_path / "p.json"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"servesim calibrate: error: --model: no config.json at {model}; measure mode times the "
                          "engine's model, given as a Hugging Face config.json or a folder holding one")
    assert "llama-2-13b" not in err  # the catalog's names are `calibrate import`'s


def test_an_out_that_is_a_folder_is_refused_before_calibrating(capsys, tmp_path):
    assert main(["calibrate", "--model", TINY, "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"servesim calibrate: error: --out: {tmp_path} is a folder; give a file name"


@pytest.mark.parametrize("args, message", [
    (["--iterations", "0"], "--iterations: expected a positive number of simulate -> fit rounds, got 0"),
    (["--iterations", "-2"], "--iterations: expected a positive number of simulate -> fit rounds, got -2"),
    (["--test-every", "-1"], "--test-every: expected 0 (hold out none) or a positive integer, got -1"),
])
def test_fit_runs_refuses_counts_it_would_read_as_others(args, message, capsys, tmp_path):
    assert main(["calibrate", "fit-runs", str(tmp_path), "--out", str(tmp_path / "layer.json"), *args]) == 2
    assert capsys.readouterr().err.strip() == f"servesim calibrate: error: {message}"

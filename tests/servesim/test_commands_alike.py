"""Every `servesim` command spells and explains its common flags the same way, and one config file
serves simulate, run, serve and validate (the sections a command does not use are listed)."""
from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import pytest

from servesim.cli import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "examples" / "default.toml"
SERVE_TINY = REPO / "examples" / "serve-tiny.toml"
CONFIG_COMMANDS = ("simulate", "run", "serve", "validate", "sweep", "capacity", "plan")
ENGINE_COMMANDS = ("run", "serve", "validate", "calibrate")


def flags(name: str) -> dict[str, argparse.Action]:
    """Option string -> action of one subcommand's parser (as the dispatcher builds it)."""
    try:
        module = importlib.import_module(SUBCOMMANDS[name][0])
    except ImportError as exc:  # an extra this checkout lacks (torch, fastapi)
        pytest.skip(f"servesim {name}: {exc}")
    parser = argparse.ArgumentParser(prog=f"servesim {name}")
    module.configure(parser)
    return {s: a for a in parser._actions for s in a.option_strings}


@pytest.fixture(scope="module")
def parsers():
    return {name: flags(name) for name in SUBCOMMANDS}


def test_common_flags_have_one_spelling_and_one_help(parsers):
    for flag in ("--set", "--quiet", "--no-progress", "--device", "--threads"):
        seen = {name: (a.dest, a.help, a.metavar, tuple(a.choices or ())) for name, p in parsers.items()
                if (a := p.get(flag)) is not None}
        assert len(set(seen.values())) == 1, (flag, seen)
    for flag in ("--out", "--json"):
        for name, p in parsers.items():
            if flag in p:
                words = p[flag].help.split()
                assert words[0] in ("write", "print"), (name, flag, p[flag].help)
                assert flag != "--json" or p[flag].help.endswith("as JSON on stdout instead of the table")


def test_flags_are_there_where_they_make_sense(parsers):
    for name, p in parsers.items():
        assert "--quiet" in p and "--out" in p, name
        assert ("--set" in p) == (name in CONFIG_COMMANDS), name
        if name in ENGINE_COMMANDS:
            assert {"--device", "--threads"} <= set(p), name
    for name in ("simulate", "run", "validate", "sweep", "capacity", "plan", "reproduce", "calibrate"):
        assert "--json" in parsers[name], name
    assert parsers["simulate"]["--set"].dest == parsers["validate"]["--set"].dest == "overrides"


def test_simulate_reads_the_file_serve_reads_and_says_what_it_leaves(capsys, tmp_path):
    assert main(["simulate", str(SERVE_TINY), "--set", "workload.num_requests=20", "--json", "--out",
                 str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["num_requests"] == 20  # notes stay off stdout
    assert "note: [serve] is read by `servesim serve` only" in err
    assert "# note: [serve] is read by `servesim serve` only" in (tmp_path / "config.toml").read_text()


def test_serve_reads_the_file_simulate_reads_and_says_what_it_leaves(tmp_path):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from servesim.commands.serve import load_serve_setup

    text = SERVE_TINY.read_text() + '\n[workload]\nkind = "poisson"\nrate = 2.0\n'
    (tmp_path / "tiny-llama").symlink_to(REPO / "examples" / "tiny-llama")
    path = tmp_path / "both.toml"
    path.write_text(text)
    config, serve_config, _ = load_serve_setup(path)
    assert serve_config.model_name == "tiny-llama"
    assert any(n.startswith("[workload] is not used by `servesim serve`") for n in config.notes), config.notes


def test_a_trace_with_a_rate_is_said_once_on_the_terminal(capsys):
    trace = REPO / "examples" / "traces" / "azure_conv_2023_slice.csv"
    assert main(["simulate", str(DEFAULT), "--set", "workload.kind=trace", "--set", f"workload.trace={trace}",
                 "--set", "workload.num_requests=30", "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("rescales the trace's recorded arrivals") == 1, err
    assert main(["simulate", str(DEFAULT), "--set", "workload.kind=trace", "--set", f"workload.trace={trace}",
                 "--set", "workload.num_requests=30", "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")  # --quiet: nothing but errors


def test_small_mode_caps_the_workload_and_says_so(capsys, monkeypatch):
    monkeypatch.setenv("SERVESIM_SMALL", "1")
    assert main(["simulate", str(DEFAULT), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["num_requests"] == 40
    assert "note: SERVESIM_SMALL=1: workload.num_requests = 40 (was 400)" in err
    assert main(["simulate", str(DEFAULT), "--set", "workload.num_requests=12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_requests"] == 12  # smaller already: left alone


def test_an_out_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    a_file = tmp_path / "taken"
    a_file.write_text("")
    assert main(["simulate", str(DEFAULT), "--out", str(a_file), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"servesim simulate: error: --out: {a_file} is a file; give a folder (it is made if missing)"
    assert main(["calibrate", "fit-runs", str(tmp_path), "--out", str(tmp_path), "--quiet"]) == 2
    assert f"--out: {tmp_path} is a folder; give a file name" in capsys.readouterr().err
    for command in (["simulate", str(DEFAULT)], ["sweep", str(DEFAULT), "--grid", "workload.rate=5"]):
        assert main([*command, "--out", "", "--quiet"]) == 2  # not the current folder
        assert capsys.readouterr().err.strip().endswith("error: --out: empty; give a folder")
    assert main(["simulate", str(DEFAULT), "--out", str(tmp_path / "new" / "folder"), "--quiet"]) == 0
    assert (tmp_path / "new" / "folder" / "summary.json").is_file()

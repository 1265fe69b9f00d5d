"""`servesim serve`'s checks before any model loads (`servesim.commands.serve`): the address, the
flags only `--calibrate-frontend` reads, the tokenizer against the model."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servesim.cli import main

REPO = Path(__file__).resolve().parents[2]
SERVE_TINY = str(REPO / "examples" / "serve-tiny.toml")

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("tokenizers")


@pytest.fixture
def nothing_loads(monkeypatch):
    """Any model or config loaded by `serve` fails the test: the checks come first."""
    import servesim.commands.serve as serve_module

    def load(*args, **kwargs):
        raise AssertionError("the serving setup was loaded before the check")

    monkeypatch.setattr(serve_module, "load_serve_setup", load)


def test_a_port_in_use_is_refused_before_the_model_loads(capsys, nothing_loads):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", SERVE_TINY, "--port", str(port), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (f"servesim serve: error: --port: {port} is already in use on 127.0.0.1; "
                                               "choose another (0: any free port)")


@pytest.mark.parametrize("host", ["8.8.8.8", "no-such-host.invalid"])
def test_an_address_not_this_machines_is_refused_before_the_model_loads(host, capsys, nothing_loads):
    assert main(["serve", SERVE_TINY, "--host", host, "--port", "0", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"servesim serve: error: --host: cannot bind {host} (") and "\n" not in err


@pytest.mark.parametrize("flag", [["--probe-engine"], ["--calibrate-repeats", "5"]])
def test_calibration_flags_without_calibrate_frontend_are_refused(flag, capsys, nothing_loads):
    assert main(["serve", SERVE_TINY, *flag, "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (f"servesim serve: error: {flag[0]}: only used with --calibrate-frontend "
                                               "OUT.json (which times the front end instead of serving)")


def test_a_tokenizer_smaller_than_the_models_vocabulary_is_refused_before_the_weights_load(capsys, monkeypatch):
    pytest.importorskip("torch")
    import gpu_backend.engine

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was built before the tokenizer was checked")

    monkeypatch.setattr(gpu_backend.engine, "Engine", no_engine)
    small = REPO / "examples" / "small-llama" / "config.json"
    assert main(["serve", SERVE_TINY, "--port", "0", "--set", f"model.name={small}", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"servesim serve: error: serve.tokenizer: {REPO / 'examples' / 'tiny-llama'} has 2048 tokens but the model "
        f"{small} has vocab_size 8192: the model's random weights would sample ids 2048..8191, which decode to "
        "nothing; give the model's own tokenizer, or train one of 8192 tokens (python -m "
        "gpu_backend.serve.train_tokenizer)")

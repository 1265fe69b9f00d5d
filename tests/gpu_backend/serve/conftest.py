"""Factories for the server tests (as fixtures): the shipped tokenizer, a fake engine, a live server."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from serve_fake_engine import SCRIPT_TEXT, FakeEngine  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny-llama"


@pytest.fixture(scope="session")
def tokenizer():
    pytest.importorskip("tokenizers")
    from gpu_backend.serve.tokenizer import Tokenizer

    return Tokenizer(TINY)


@pytest.fixture
def make_engine(tokenizer):
    """make_engine(**overrides) -> FakeEngine whose outputs spell SCRIPT_TEXT over and over."""
    def make(**overrides) -> FakeEngine:
        return FakeEngine(tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False), **overrides)
    return make


@pytest.fixture
def make_server(tokenizer, make_engine):
    """make_server(engine=None, max_model_len=256, **serve_config) -> OpenAIServer."""
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer

    def make(engine=None, max_model_len: int = 256, **config):
        return OpenAIServer(engine or make_engine(), tokenizer, replace(ServeConfig(), **config), max_model_len)
    return make


@pytest.fixture
def running():
    """running(server) -> context manager yielding the base URL of its app on 127.0.0.1:<free port>."""
    pytest.importorskip("fastapi")
    from gpu_backend.serve.background import BackgroundServer
    from gpu_backend.serve.server import build_app

    @contextmanager
    def run(server):
        with BackgroundServer(build_app(server)) as srv:
            yield srv.url
    return run

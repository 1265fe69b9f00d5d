"""Stopping the server with streams open (SIGINT/SIGTERM, as `BackgroundServer.stop` does): every
response ends properly and every request is in the records, finished or aborted, as vLLM's server
takes SIGTERM (`[serve] shutdown_timeout_s`, its --shutdown-timeout)."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


def stream(url: str, body: dict, started: threading.Event | None = None) -> tuple[str | None, bool]:
    """(the last finish_reason, whether [DONE] came) of one streamed completion."""
    reason, done = None, False
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                choices = json.loads(line[6:])["choices"]
                reason = (choices[0]["finish_reason"] if choices else None) or reason
                if started is not None:
                    started.set()
    return reason, done


def start_streams(pool, url: str, n: int, body: dict) -> list:
    """n streams, returned once each has had its first chunk."""
    events = [threading.Event() for _ in range(n)]
    futures = [pool.submit(stream, url, body, e) for e in events]
    assert all(e.wait(30) for e in events)
    return futures


def test_a_stop_with_streams_open_ends_each_aborted_in_the_stream_and_the_records(tokenizer, tiny_model,
                                                                                  make_server, tmp_path):
    """Before, uvicorn's grace ran out and it cut the streams mid-chunk (no finish_reason, no [DONE];
    an 'Exception in ASGI application' traceback each). Now, as vLLM by default: aborted at once."""
    import pandas as pd

    from gpu_backend.engine import Engine, EngineConfig
    from gpu_backend.serve.background import BackgroundServer
    from gpu_backend.serve.server import build_app
    from policies import SchedulerConfig

    engine = Engine(EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=1024)), "cpu",
                    model=tiny_model)
    server = make_server(engine, max_model_len=1024, out_dir=str(tmp_path / "records"))
    srv = BackgroundServer(build_app(server)).__enter__()
    with ThreadPoolExecutor(3) as pool:
        # far more tokens than the shutdown's grace (5 s here) lets the tiny model make
        futures = start_streams(pool, srv.url, 3, {"prompt": "long", "max_tokens": 1000, "ignore_eos": True})
        srv.stop()
        assert [f.result() for f in futures] == [("abort", True)] * 3
    records = pd.read_csv(tmp_path / "records" / "requests.csv")
    assert sorted(records["finish_reason"]) == ["aborted"] * 3


def test_with_a_shutdown_timeout_the_streams_finish_and_new_requests_get_503(make_engine, make_server):
    from gpu_backend.serve.background import BackgroundServer
    from gpu_backend.serve.server import build_app

    engine = make_engine(step_time_s=0.005)
    server = make_server(engine, shutdown_timeout_s=60)
    srv = BackgroundServer(build_app(server)).__enter__()
    with ThreadPoolExecutor(3) as pool:
        futures = start_streams(pool, srv.url, 2, {"prompt": "x", "max_tokens": 40})
        engine.pause()  # the two stay in flight while the shutdown begins
        stopping = pool.submit(srv.stop)
        deadline = time.monotonic() + 10
        while not server.draining and time.monotonic() < deadline:
            time.sleep(0.01)
        later = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "y", "max_tokens": 2}, timeout=10)
        health = httpx.get(f"{srv.url}/health", timeout=10)
        engine.resume()
        assert [f.result() for f in futures] == [("length", True)] * 2
        stopping.result(30)
    assert later.status_code == 503 and "shutting down" in later.json()["error"]["message"]
    assert health.status_code == 503


def test_shutdown_timeout_is_checked():
    from gpu_backend.serve.config import ServeConfig
    from policies import ConfigError

    with pytest.raises(ConfigError, match="^serve.shutdown_timeout_s"):
        ServeConfig(shutdown_timeout_s=-1)


def test_a_whole_response_in_flight_at_a_stop_answers_abort(make_engine, make_server):
    from gpu_backend.serve.background import BackgroundServer
    from gpu_backend.serve.server import build_app

    server = make_server(make_engine(step_time_s=0.01))
    srv = BackgroundServer(build_app(server)).__enter__()
    with ThreadPoolExecutor(1) as pool:
        body = {"prompt": "x", "max_tokens": 200, "ignore_eos": True}  # 2 s of steps, the grace is 5 s
        pending = pool.submit(httpx.post, f"{srv.url}/v1/completions", json=body, timeout=30)
        deadline = time.monotonic() + 10
        while not server.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        srv.stop()
        r = pending.result()
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "abort"

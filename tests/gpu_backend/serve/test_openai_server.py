"""The HTTP server over a fake engine: response shapes, streaming, errors, back-pressure, disconnects;
and over the real engine, what its records hold in memory as it serves."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from serve_fake_engine import SCRIPT_TEXT  # noqa: E402  (conftest put its folder on sys.path)
from gpu_backend.serve.metrics import parse_metrics  # noqa: E402


def sse_events(text: str) -> list:
    """The data payloads of an SSE body, in order ('[DONE]' kept as a string)."""
    events = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def metrics(client) -> dict:
    return parse_metrics(client.get("/metrics").text)


def wait_until(predicate, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def settled(client) -> bool:
    m = metrics(client)
    return m["servesim:num_kv_blocks_used"] == 0 and m["servesim:num_requests_in_flight"] == 0 \
        and m["servesim:num_requests_running"] == 0 and m["servesim:num_requests_waiting"] == 0


def expected_text(tokenizer, n: int) -> str:
    """What the fake engine's first n tokens spell."""
    script = tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False)
    return tokenizer.decode([script[i % len(script)] for i in range(n)])


@pytest.fixture(scope="module")
def shared_url(tokenizer):
    """One server (fake engine) for the tests that only need a live endpoint."""
    from serve_fake_engine import SCRIPT_TEXT as text
    from serve_fake_engine import FakeEngine

    from gpu_backend.serve.background import BackgroundServer
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer, build_app

    engine = FakeEngine(tokenizer.encode(text, add_special_tokens=False))
    with BackgroundServer(build_app(OpenAIServer(engine, tokenizer, ServeConfig(), 256))) as srv:
        yield srv.url


def test_completion_shape_and_usage(tokenizer, make_server, running):
    server = make_server()
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        r = c.post("/v1/completions", json={"model": "tiny-llama", "prompt": "hello there", "max_tokens": 9})
        assert r.status_code == 200
        body = r.json()
        assert body["object"] == "text_completion" and body["model"] == "tiny-llama"
        choice = body["choices"][0]
        assert choice["finish_reason"] == "length" and choice["text"] == expected_text(tokenizer, 9)
        assert body["usage"] == {"prompt_tokens": len(tokenizer.encode("hello there")), "completion_tokens": 9,
                                 "total_tokens": len(tokenizer.encode("hello there")) + 9}
        models = c.get("/v1/models").json()
        assert models["data"][0]["id"] == "tiny-llama" and models["data"][0]["max_model_len"] == 256
        assert c.get("/health").status_code == 200


def test_token_id_prompt_is_taken_as_is(make_server, running):
    server = make_server()
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        r = c.post("/v1/completions", json={"prompt": [5, 6, 7, 8], "max_tokens": 2})
        assert r.json()["usage"]["prompt_tokens"] == 4


def test_streaming_completion_one_chunk_per_token_then_usage_and_done(tokenizer, make_server, running):
    server = make_server()
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 12, "stream": True,
                                            "stream_options": {"include_usage": True}})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        assert events[-1] == "[DONE]"
        usage = events[-2]
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
        chunks = events[:-2]
        assert "".join(e["choices"][0]["text"] for e in chunks) == expected_text(tokenizer, 12)
        assert [e["choices"][0]["finish_reason"] for e in chunks] == [None] * (len(chunks) - 1) + ["length"]
        assert len(chunks) == 12  # ASCII script: every token is visible text at once


def test_streaming_chat_role_first_and_continuous_usage(tokenizer, make_server, running):
    server = make_server()
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        r = c.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
        events = sse_events(r.text)
        assert events[0]["object"] == "chat.completion.chunk" and events[0]["choices"][0]["delta"]["role"] == "assistant"
        assert events[-1] == "[DONE]" and events[-2]["choices"] == []  # the usage chunk last
        body = events[1:-2]
        assert [e["usage"]["completion_tokens"] for e in body] == list(range(1, 7))
        prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]))
        assert body[0]["usage"]["prompt_tokens"] == len(prompt)
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in body) == expected_text(tokenizer, 6)
        # vLLM reads continuous_usage_stats only with include_usage: alone it adds nothing
        r = c.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 6, "stream": True,
            "stream_options": {"include_usage": False, "continuous_usage_stats": True}})
        assert not any(isinstance(e, dict) and "usage" in e for e in sse_events(r.text))


def test_chat_non_streaming_and_stop_string(tokenizer, make_server, running):
    server = make_server()
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "go"}],
                                                 "max_tokens": 40, "stop": ["lazy"]})
        body = r.json()
        assert body["object"] == "chat.completion"
        msg = body["choices"][0]["message"]
        assert msg["role"] == "assistant" and msg["content"] == SCRIPT_TEXT[:SCRIPT_TEXT.find("lazy")]
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["usage"]["completion_tokens"] < 40
        assert wait_until(lambda: settled(c))  # the engine was told to stop: blocks freed


@pytest.mark.parametrize("payload, status, field", [
    (b"{not json", 400, "body"),
    (b"\xff\xfe", 400, "body"),
    (b"[]", 400, "body"),
    (json.dumps({"prompt": "hi", "max_tokens": "many"}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "hi", "max_tokens": 10**12}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "word " * 400}).encode(), 400, "prompt"),
    (json.dumps({"prompt": [1, 2, 99999]}).encode(), 400, "prompt"),
    (json.dumps({"prompt": "hi", "temperature": {"a": 1}}).encode(), 400, "temperature"),
    (json.dumps({"prompt": "hi", "model": "gpt-9"}).encode(), 404, "model"),
    (b"[" * 100_000, 400, "body"),
    (b'{"prompt": "a\\ud800b"}', 400, "prompt"),
    (b'{"messages": [{"role": "user", "content": "\\udfff"}]}', 400, "messages"),
    (b'{"prompt": "' + b"x" * (33 * 2**20) + b'"}', 413, "body"),
])
def test_bad_input_answers_with_the_field_and_server_survives(shared_url, payload, status, field):
    with httpx.Client(base_url=shared_url, timeout=20) as c:
        refused = metrics(c)['servesim:request_refused_total{reason="bad_request"}']
        path = "/v1/chat/completions" if payload.startswith(b'{"messages"') else "/v1/completions"
        r = c.post(path, content=payload, headers={"content-type": "application/json"})
        assert r.status_code == status
        err = r.json()["error"]
        assert err["param"] == field and err["message"].startswith(f"{field}: ")
        assert c.post("/v1/completions", json={"prompt": "ok", "max_tokens": 2}).status_code == 200
        assert metrics(c)['servesim:request_refused_total{reason="bad_request"}'] == refused + 1


def test_an_oversized_chunked_body_is_refused_without_a_length(shared_url):
    def body():  # no Content-Length: the server must count while it reads
        yield b'{"prompt": "'
        for _ in range(40):
            yield b"x" * 2**20
        yield b'"}'

    with httpx.Client(base_url=shared_url, timeout=30) as c:
        r = c.post("/v1/completions", content=body(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["param"] == "body"
        assert c.post("/v1/completions", json={"prompt": "ok", "max_tokens": 2}).status_code == 200


def test_full_queue_answers_503_with_retry_after(make_engine, make_server, running):
    engine = make_engine()
    server = make_server(engine, max_num_waiting=3, retry_after_s=2)
    with running(server) as url, httpx.Client(base_url=url, timeout=30) as c:
        engine.pause()

        async def burst():
            async with httpx.AsyncClient(base_url=url, timeout=30) as ac:
                return await asyncio.gather(*[ac.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
                                              for _ in range(8)])
        import threading
        threading.Timer(1.0, engine.resume).start()  # let the 503s come back first, then serve the rest
        responses = asyncio.run(burst())
        codes = sorted(r.status_code for r in responses)
        assert codes == [200] * 3 + [503] * 5
        busy = next(r for r in responses if r.status_code == 503)
        assert busy.headers["retry-after"] == "2" and busy.json()["error"]["code"] == 503
        assert metrics(c)['servesim:request_refused_total{reason="queue_full"}'] == 5


def disconnect_storm(url: str, n: int, tokens_before_leaving: int) -> int:
    """n concurrent streaming clients that read a few chunks and hang up; returns how many got tokens."""
    async def one(ac, i):
        async with ac.stream("POST", "/v1/completions", json={"prompt": f"client {i}", "max_tokens": 200,
                                                             "stream": True}) as r:
            seen = 0
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    seen += 1
                    if seen >= tokens_before_leaving:
                        return 1  # leaving the block closes the connection mid-stream
        return 0

    async def main():
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as ac:
            return sum(await asyncio.gather(*[one(ac, i) for i in range(n)]))
    return asyncio.run(main())


def test_clients_disconnecting_mid_stream_free_every_kv_block(make_engine, make_server, running):
    engine = make_engine(step_time_s=0.005)
    server = make_server(engine, max_num_waiting=1000)
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        assert disconnect_storm(url, 100, tokens_before_leaving=3) == 100
        assert wait_until(lambda: settled(c)), metrics(c)
        m = metrics(c)
        assert m['servesim:request_success_total{finished_reason="abort"}'] == 100
        assert m["servesim:num_requests_pending"] == 0
        assert all(r.finish_reason.value == "aborted" and r.num_output_tokens < 200 for r in engine.finished)
        assert len(engine.finished) == 100
        assert c.post("/v1/completions", json={"prompt": "still alive", "max_tokens": 2}).status_code == 200


@pytest.mark.slow
def test_a_thousand_clients_disconnecting(make_engine, make_server, running):
    engine = make_engine(step_time_s=0.005)
    server = make_server(engine, max_num_waiting=5000)
    with running(server) as url, httpx.Client(base_url=url, timeout=60) as c:
        assert disconnect_storm(url, 1000, tokens_before_leaving=2) == 1000
        assert wait_until(lambda: settled(c), 60), metrics(c)
        assert len(engine.finished) == 1000


def test_non_streaming_client_disconnect_aborts(make_engine, make_server, running):
    engine = make_engine(step_time_s=0.01)
    server = make_server(engine, max_model_len=4096)
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/completions", json={"prompt": "long", "max_tokens": 3000}, timeout=0.5)
        assert wait_until(lambda: settled(c)), metrics(c)
        assert engine.finished[0].finish_reason.value == "aborted" and engine.finished[0].num_output_tokens < 3000


def test_server_ttft_and_itl_histograms_match_engine_records(make_engine, make_server, running):
    engine = make_engine(step_time_s=0.004)
    server = make_server(engine)
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        for i in range(5):
            c.post("/v1/completions", json={"prompt": f"p{i}", "max_tokens": 8})
        m = metrics(c)
    reqs = engine.finished
    ttft = sum(r.first_token_time - r.arrival_time for r in reqs)
    itl = [b - a for r in reqs for a, b in zip(r.token_times, r.token_times[1:])]
    assert m["servesim:time_to_first_token_seconds_count"] == 5
    assert m["servesim:time_to_first_token_seconds_sum"] == pytest.approx(ttft, rel=1e-9)
    assert m["servesim:inter_token_latency_seconds_count"] == len(itl) == 5 * 7
    assert m["servesim:inter_token_latency_seconds_sum"] == pytest.approx(sum(itl), rel=1e-9)
    assert m["servesim:generation_tokens_total"] == 40


def test_request_fields_reach_the_engine(make_engine, make_server, running):
    engine = make_engine()
    server = make_server(engine)
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3, "priority": -5, "temperature": 0.7,
                                        "top_p": 0.9, "seed": 11, "ignore_eos": True, "stop_token_ids": [7]})
        c.post("/v1/completions", json={"prompt": "y", "max_tokens": 2})
    first, second = sorted(engine.finished, key=lambda r: r.arrival_time)
    assert (first.priority, first.ignore_eos, first.max_tokens) == (-5, True, 3)
    s = first.sampling
    assert (s.temperature, s.top_p, s.seed, s.stop_token_ids) == (0.7, 0.9, 11, (7,))
    # OpenAI defaults when the client says nothing: sample at temperature 1, stop at EOS
    assert (second.sampling.temperature, second.sampling.top_p, second.ignore_eos, second.priority) == (1.0, 1.0, False, 0)


def test_a_negative_seed_reaches_the_engine_and_one_past_64_bits_is_a_400(make_engine, make_server, running):
    """vLLM takes any 64-bit seed (a negative one was refused here with a 400)."""
    engine = make_engine()
    with running(make_server(engine)) as url, httpx.Client(base_url=url, timeout=20) as c:
        ok = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "temperature": 1, "seed": -7})
        bad = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "seed": 2**64})
    assert ok.status_code == 200, ok.text
    assert [r.sampling.seed for r in engine.finished] == [-7]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "seed"
    assert "[-2**63, 2**63 - 1]" in bad.json()["error"]["message"]


@pytest.mark.parametrize("streaming", [False, True])
def test_the_finish_reason_is_the_engine_s_however_the_threads_interleave(make_server, running, monkeypatch,
                                                                          streaming):
    """The engine thread wakes the handler with the last output and only then closes the stream (which
    sets its finish_reason); a handler that ran in between answered "stop" for a request the engine
    ended at max_tokens ("length"). Here the engine thread is slowed between the two."""
    from gpu_backend.serve.request_stream import RequestStream

    on_output = RequestStream.on_output

    def late_close(stream, out):
        if out.finished:
            close = stream.close
            stream.close = lambda *a, **k: (time.sleep(0.3), close(*a, **k))[1]
        on_output(stream, out)

    monkeypatch.setattr(RequestStream, "on_output", late_close)
    with running(make_server()) as url, httpx.Client(base_url=url, timeout=20) as c:
        body = {"prompt": "x", "max_tokens": 3, "stream": streaming}
        r = c.post("/v1/completions", json=body)
    reasons = [e["choices"][0]["finish_reason"] for e in sse_events(r.text)[:-1]] if streaming else \
        [r.json()["choices"][0]["finish_reason"]]
    assert reasons[-1] == "length"


def test_clients_leaving_before_their_first_token_release_the_queue(make_engine, make_server, running):
    """Hang-ups while still queued must give back their place, or the server would 503 forever."""
    engine = make_engine()
    server = make_server(engine, max_num_waiting=10)
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        engine.pause()

        async def leave_early():
            async with httpx.AsyncClient(base_url=url, timeout=0.5) as ac:
                async def one(i):
                    try:
                        await ac.post("/v1/completions", json={"prompt": f"q{i}", "max_tokens": 5, "stream": i % 2 == 0})
                    except httpx.TimeoutException:
                        return 1
                    return 0
                return sum(await asyncio.gather(*[one(i) for i in range(10)]))
        assert asyncio.run(leave_early()) == 10
        assert wait_until(lambda: metrics(c)["servesim:num_requests_pending"] == 0), metrics(c)
        engine.resume()
        assert wait_until(lambda: settled(c))
        assert all(r.num_output_tokens == 0 and r.finish_reason.value == "aborted" for r in engine.finished)
        # the queue is free again: a full batch of new requests is admitted
        async def ten():
            async with httpx.AsyncClient(base_url=url, timeout=20) as ac:
                return await asyncio.gather(*[ac.post("/v1/completions", json={"prompt": "z", "max_tokens": 2})
                                              for _ in range(10)])
        assert [r.status_code for r in asyncio.run(ten())] == [200] * 10


def test_a_dead_engine_answers_every_request_instead_of_hanging(tokenizer, tiny_model, make_server, running):
    from gpu_backend.engine import Engine, EngineConfig
    from policies import CacheConfig, SchedulerConfig

    config = EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=256),
                          cache=CacheConfig(num_gpu_blocks=64))
    engine = Engine(config, "cpu", model=tiny_model)
    engine.runner.execute = lambda plan: (_ for _ in ()).throw(RuntimeError("device lost"))
    server = make_server(engine)
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        first = c.post("/v1/completions", json={"prompt": "hello", "max_tokens": 4})  # its step fails
        assert first.status_code == 200 and first.json()["choices"][0]["finish_reason"] == "abort"
        assert c.get("/health").status_code == 503
        later = c.post("/v1/completions", json={"prompt": "again", "max_tokens": 4})  # no engine thread left
        assert later.status_code == 200 and later.json()["choices"][0]["finish_reason"] == "abort"
        assert wait_until(lambda: settled(c))


def test_a_request_the_engine_can_never_fit_is_a_400_streamed_or_not(tiny_model, make_server, running):
    from gpu_backend.engine import Engine, EngineConfig
    from policies import CacheConfig, SchedulerConfig

    config = EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=256),
                          cache=CacheConfig(num_gpu_blocks=4, block_size=16))  # 64 tokens of KV
    server = make_server(Engine(config, "cpu", model=tiny_model))
    with running(server) as url, httpx.Client(base_url=url, timeout=20) as c:
        for stream in (False, True):  # known before the first byte: no 200 with an error inside the stream
            long = c.post("/v1/completions", json={"prompt": list(range(3, 203)), "max_tokens": 4, "stream": stream})
            assert long.status_code == 400 and long.json()["error"]["param"] == "prompt", long.text
            assert "rejected by the engine: needs 13 KV blocks" in long.json()["error"]["message"]
            # a short prompt that max_tokens makes too big: max_tokens is the param to change
            many = c.post("/v1/completions", json={"prompt": list(range(3, 13)), "max_tokens": 200, "stream": stream})
            assert many.status_code == 400 and many.json()["error"]["param"] == "max_tokens", many.text
        ok = c.post("/v1/completions", json={"prompt": list(range(3, 13)), "max_tokens": 4})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 4
        assert wait_until(lambda: settled(c))


def test_a_tokenizer_of_another_vocabulary_size_is_refused(tokenizer, make_engine):
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer
    from policies import ConfigError

    from gpu_backend.serve.server import check_vocab

    with pytest.raises(ConfigError, match=r"^serve.tokenizer: .*tiny-llama has 2048 tokens but the model "
                                          r"tiny-llama has vocab_size 1024: a prompt could hold ids"):
        OpenAIServer(make_engine(), tokenizer, ServeConfig(), 256, vocab_size=1024)
    assert OpenAIServer(make_engine(), tokenizer, ServeConfig(), 256, vocab_size=2048).vocab_size == 2048
    # a smaller tokenizer: random weights sample ids it cannot decode; a checkpoint pads its embedding
    with pytest.raises(ConfigError, match=r"random weights would sample ids 2048\.\.8191"):
        check_vocab(tokenizer, 8192, "m", random_weights=True)
    check_vocab(tokenizer, 8192, "m", random_weights=False)


def test_a_client_leaving_before_its_body_is_complete_is_no_server_error(make_server):
    """Half a body, then a hang-up: the handler answers (nobody reads it) instead of raising, which
    uvicorn logged as "Exception in ASGI application" with a traceback, one per such client."""
    from gpu_backend.serve.server import build_app

    app = build_app(make_server(), start_engine=False)
    messages = [{"type": "http.request", "body": b'{"prompt": "half a bo', "more_body": True}]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions", "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 499


def test_a_prompt_being_tokenized_leaves_the_event_loop_serving(tokenizer, make_server, running):
    """Tokenizing a long prompt takes seconds (1 MB: 3 s with the tiny tokenizer); on the event loop
    it froze every other request's stream and /health meanwhile (a 30 MB one for 96 s). A tokenizer
    that holds one prompt until told stands for it: the server answers others while it waits."""
    entered, release = threading.Event(), threading.Event()

    class Held:
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def encode(self, text, add_special_tokens=True):
            if text == "held":
                entered.set()
                release.wait(30)
            return tokenizer.encode(text, add_special_tokens)

    server = make_server()
    server.tokenizer = Held()
    with running(server) as url, ThreadPoolExecutor(1) as pool:
        try:
            held = pool.submit(httpx.post, f"{url}/v1/completions", json={"prompt": "held", "max_tokens": 2},
                               timeout=30)
            assert entered.wait(10)
            other = httpx.post(f"{url}/v1/completions", json={"prompt": "other", "max_tokens": 2}, timeout=5)
            assert other.status_code == 200 and not held.done()
        finally:
            release.set()
        assert held.result().status_code == 200


def test_the_server_makes_the_real_engine_stream_its_records(tokenizer, tiny_model, tmp_path):
    from gpu_backend.engine import Engine, EngineConfig
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer
    from policies import SchedulerConfig

    engine = Engine(EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=256)), "cpu",
                    model=tiny_model)
    OpenAIServer(engine, tokenizer, ServeConfig(out_dir=str(tmp_path / "records")), 256)
    with pytest.raises(RuntimeError, match="streams its records"):
        engine.result()  # what would grow with every request served
    assert [p.name[:16] for p in (tmp_path / "records").iterdir()] == [".servesim-spool-"]  # beside the records


def test_a_killed_server_s_working_folder_is_removed_at_the_next_start_and_said(tokenizer, tiny_model, tmp_path):
    """SIGKILL leaves the hidden working folder in --out (no exit handler runs): it stayed there for
    good, one more at every kill, and nothing said that those records were never written."""
    from gpu_backend.engine import Engine, EngineConfig
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer
    from policies import SchedulerConfig

    records = tmp_path / "records"
    killed = records / ".servesim-spool-killed"  # as a server killed before it had a lock leaves it
    killed.mkdir(parents=True)
    (killed / "requests-00000.csv").write_text("req_id\ncmpl-0\ncmpl-1\n")
    engine = Engine(EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=256)), "cpu",
                    model=tiny_model)
    server = OpenAIServer(engine, tokenizer, ServeConfig(out_dir=str(records)), 256)
    assert not killed.exists()
    (note,) = server.notes
    assert str(killed) in note and "2 request and 0 step rows" in note
    engine.close_records()
    assert list(records.iterdir()) == []


def test_over_the_real_engine_memory_holds_the_requests_in_flight_not_those_served(tokenizer, tiny_model, running,
                                                                                   tmp_path):
    """The server makes its engine stream its records (`Engine.stream_records`): after serving N
    requests, 4 at a time, the Request objects alive are those in flight plus one batch written
    together, not N; /admin/dump still writes every request, and the shutdown writes the records
    to out_dir and removes the engine's working folder."""
    import gc

    import pandas as pd

    from gpu_backend.engine import Engine, EngineConfig
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer
    from policies import CacheConfig, Request, SchedulerConfig

    def alive_requests() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Request)

    config = EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=256, max_num_seqs=4),
                          cache=CacheConfig(block_size=16, num_gpu_blocks=64))
    engine = Engine(config, "cpu", model=tiny_model)
    engine.stream_records(tmp_path, request_batch=4, step_batch=16)  # small batches: N need not be large
    records = tmp_path / "records"
    server = OpenAIServer(engine, tokenizer, ServeConfig(out_dir=str(records)), 256)
    base, held = alive_requests(), []
    with running(server) as url, httpx.Client(base_url=url, timeout=60) as c, ThreadPoolExecutor(4) as pool:
        def one(k: int) -> str:
            body = {"prompt": f"request {k}", "max_tokens": 3, "ignore_eos": True}
            return c.post("/v1/completions", json=body).json()["choices"][0]["finish_reason"]

        for wave in range(6):
            assert list(pool.map(one, range(8 * wave, 8 * wave + 8))) == ["length"] * 8
            assert wait_until(lambda: metrics(c)["servesim:num_requests_in_flight"] == 0)
            held.append(alive_requests() - base)
        assert c.post("/admin/dump", params={"out_dir": str(tmp_path / "dump")}).status_code == 200
    print("Request objects alive after each wave of 8:", held)
    # a request batch (4), and at most the 4 that ran at once lingering in the HTTP layer; 48 served
    assert max(held) <= 8, held
    dumped = pd.read_csv(tmp_path / "dump" / "requests.csv")
    assert len(dumped) == 48 and (dumped["finish_reason"] == "length").all()
    at_exit = pd.read_csv(records / "requests.csv")
    assert sorted(at_exit["req_id"]) == sorted(dumped["req_id"])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".servesim-spool")] == []  # removed at exit

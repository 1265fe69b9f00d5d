"""The OpenAI-compatible HTTP server: FastAPI routes over one running `Engine`.

Routes: POST /v1/completions and /v1/chat/completions (streaming as server-sent events, or one JSON
body), GET /v1/models, /health, /metrics (Prometheus text), POST /admin/dump (write the engine's
requests/steps tables). Handlers never block on the engine: they tokenize (on a worker thread),
validate, and call `engine.add_request`, which only appends to the engine's ingress list under a
short lock; the engine thread swaps that list into its scheduler at the next step boundary.
Tokens come back through `RequestStream` callbacks. A client that goes away mid-request is aborted,
which frees its KV blocks. Bad input answers 400 naming the field; a full queue 503 with Retry-After.
A server runs until stopped, so its engine streams its records (`Engine.stream_records`): finished
requests and steps leave memory as they are written out, and a dump copies them from disk.
Stopped (SIGINT/SIGTERM, `drain_on_shutdown`), it refuses new requests, lets those in flight run
on for `[serve] shutdown_timeout_s`, aborts the rest (each response still ends properly) and writes
the records with every request in them.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.requests import ClientDisconnect

from policies import ConfigError, Request
from records.spool_folder import SpoolInUse

from gpu_backend.serve.config import ServeConfig
from gpu_backend.serve.detokenizer import IncrementalDetokenizer
from gpu_backend.serve.metrics import ServerMetrics
from gpu_backend.serve.protocol import CompletionParams, RequestError, parse_request
from gpu_backend.serve.request_stream import RequestStream, reason_name
from gpu_backend.serve.tokenizer import Tokenizer
from gpu_backend.sampling_params import SamplingParams


MAX_BODY_BYTES = 32 * 2**20  # far above any prompt the model can take; refuses memory abuse


async def read_body(http) -> bytes:
    """The request body, refused with 413 as soon as it passes MAX_BODY_BYTES (never buffered whole)."""
    declared = http.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestError("body", f"{declared} bytes is too large; at most {MAX_BODY_BYTES}", 413)
    chunks, size = [], 0
    async for chunk in http.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestError("body", f"more than {MAX_BODY_BYTES} bytes is too large", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def to_sampling_params(params: CompletionParams):
    """The engine's SamplingParams for a request."""
    return SamplingParams(temperature=params.temperature, top_p=params.top_p, seed=params.seed,
                          stop_token_ids=params.stop_token_ids)


def engine_now(engine) -> float:
    """The engine's clock (the one its RequestOutput.time and tables use)."""
    now = getattr(engine, "now", None)
    return now() if callable(now) else time.perf_counter()


class OpenAIServer:
    """The server's state: engine, tokenizer, limits, metrics, and the requests in flight."""

    def __init__(self, engine, tokenizer: Tokenizer, config: ServeConfig, max_model_len: int,
                 vocab_size: int | None = None, make_sampling=to_sampling_params) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size or tokenizer.vocab_size
        check_vocab(tokenizer, self.vocab_size, config.model_name, random_weights=False)  # the weights: serve's check
        self.make_sampling = make_sampling  # CompletionParams -> the engine's sampling params (None: engine default)
        # lines to show at start-up: the working folders of killed servers the engine removed
        self.notes: list[str] = []
        stream_records = getattr(engine, "stream_records", None)
        if callable(stream_records):  # the real engine (a stand-in keeps no records): memory holds what is live
            try:
                self.notes = list(stream_records(config.out_dir, exclusive=config.out_dir is not None) or ())
            except SpoolInUse as exc:
                raise ConfigError(f"serve.out_dir (--out): {exc}") from None
        self.metrics = ServerMetrics()
        self.created = int(time.time())
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.num_pending = 0  # accepted, no first token yet (in the ingress list or the waiting queue)
        self.in_flight: dict[Any, RequestStream] = {}
        self.draining = False  # shutting down: new requests answer 503 (`drain`)
        self._closed = False

    # --- bookkeeping (called from RequestStream, any thread) ----------------------------------
    def on_first_token(self) -> None:
        with self._lock:
            self.num_pending -= 1

    def on_closed(self, stream: RequestStream, got_first: bool) -> None:
        with self._lock:
            if not got_first:
                self.num_pending -= 1
            self.in_flight.pop(stream.request.req_id, None)

    # --- admission ----------------------------------------------------------------------------
    def prompt_ids(self, params: CompletionParams) -> list[int]:
        if isinstance(params.prompt, list):
            bad = [t for t in params.prompt if t >= self.vocab_size]
            if bad:
                raise RequestError("prompt", f"token id {bad[0]} is out of range; the vocabulary has {self.vocab_size} tokens")
            return list(params.prompt)
        field = "messages" if params.is_chat else "prompt"
        try:
            text = self.tokenizer.apply_chat_template(list(params.messages)) if params.is_chat else params.prompt
            text.encode("utf-8")  # lone surrogates ("\ud800") are valid JSON but not text
            return self.tokenizer.encode(text)
        except (UnicodeError, TypeError, ValueError) as exc:
            raise RequestError(field, f"cannot be tokenized ({type(exc).__name__}: {exc})") from None

    def read_prompt(self, body: object, chat: bool) -> tuple[CompletionParams, list[int]]:
        """A decoded request body's parameters and prompt ids, validated and tokenized (RequestError
        if not): seconds for a long prompt, so the handler calls it on a worker thread."""
        params = parse_request(body, chat)
        self.check_model(params)
        return params, self.prompt_ids(params)

    def check_model(self, params: CompletionParams) -> None:
        """Refuse (404) a request for a model this server does not serve."""
        if params.model is not None and params.model != self.config.model_name:
            raise RequestError("model", f"{params.model!r} is not served here; choose {self.config.model_name}", 404)

    def make_request(self, params: CompletionParams, arrival_time: float, kind: str,
                     ids: list[int] | None = None) -> Request:
        """Tokenize (unless `ids`, the prompt's ids, are given) and check lengths; raises RequestError
        (400) on anything the model cannot take."""
        self.check_model(params)
        ids = self.prompt_ids(params) if ids is None else ids
        field = "messages" if params.is_chat else "prompt"
        if not ids:
            raise RequestError(field, "is empty after tokenization")
        if len(ids) >= self.max_model_len:
            raise RequestError(field, f"{len(ids)} tokens leave no room for output: the model's maximum length is "
                                      f"{self.max_model_len} tokens")
        room = self.max_model_len - len(ids)
        max_tokens = room if params.max_tokens is None else params.max_tokens
        if max_tokens > room:
            raise RequestError("max_tokens", f"{max_tokens} is too large: the prompt has {len(ids)} tokens and the "
                                             f"model's maximum length is {self.max_model_len}, so at most {room}")
        sampling = self.make_sampling(params) if self.make_sampling else None
        req_id = f"{kind}-{next(self._ids)}"
        request = Request(req_id, arrival_time, len(ids), max_tokens, priority=params.priority,
                          prompt_token_ids=ids, ignore_eos=params.ignore_eos, sampling=sampling)
        self.check_servable(request, field)
        return request

    def check_servable(self, request: Request, field: str) -> None:
        """Refuse (400) a request the engine's scheduler would reject on arrival (its KV at full length
        can never fit): known before a byte of the response is sent, so a streamed request gets the
        400 a whole one gets, as vLLM's server checks a request before it streams. The param named is
        what makes it too big: the prompt (`field`) where it cannot fit with a single output token,
        else max_tokens."""
        reject_reason = getattr(self.engine, "reject_reason", None)
        if reject_reason is None:  # a stand-in engine (front-end calibration, tests) has no such limit
            return
        why = reject_reason(request)
        if why is None:
            return
        alone = Request(request.req_id, request.arrival_time, request.num_prompt_tokens, 1)
        raise RequestError(field if reject_reason(alone) is not None else "max_tokens",
                           f"rejected by the engine: {why}")

    def submit(self, request: Request, loop: asyncio.AbstractEventLoop) -> RequestStream | None:
        """Hand the request to the engine (ingress list); None if the waiting queue is full."""
        with self._lock:
            if self.num_pending >= self.config.max_num_waiting:
                return None
            self.num_pending += 1
            stream = RequestStream(self, request, loop)
            self.in_flight[request.req_id] = stream
        try:
            self.engine.add_request(request, on_output=stream.on_output)
        except ValueError as exc:  # the engine refused it outright (e.g. ids outside its vocabulary)
            stream.close("rejected")
            raise RequestError("prompt", f"refused by the engine: {exc}") from None
        return stream

    def abort(self, stream: RequestStream, reason: str = "abort") -> None:
        """Stop a request the client no longer wants (or that hit a stop string): frees its KV blocks."""
        if stream.close(reason, engine_now(self.engine)):
            self.engine.abort(stream.request.req_id)

    # --- shutdown -------------------------------------------------------------------------------
    async def drain(self, timeout_s: float, forced=lambda: False) -> None:
        """The first half of a shutdown, as vLLM's server takes SIGTERM (its --shutdown-timeout,
        vllm-project/vllm#34730 and #36666): from now on new requests, and /health, answer 503;
        those in flight run on for up to `timeout_s` (or until `forced()`, a second Ctrl-C), then
        each left is aborted, so that its response ends properly (finish_reason "abort", then
        [DONE]) before uvicorn closes the connections, and the records end it `aborted`. Before,
        uvicorn's own grace cut the streams mid-chunk and then cancelled their handlers."""
        self.draining = True
        deadline = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < deadline and not forced():
            await asyncio.sleep(0.05)
        for stream in list(self.in_flight.values()):
            self.abort(stream)

    async def close(self, stop_engine: bool = True) -> None:
        """The second half (once, whichever calls first: the app's lifespan, or `drain_on_shutdown`
        when a second Ctrl-C made uvicorn skip the lifespan): end what is left in the engine, write
        the records to out_dir, stop the engine (`stop_engine`: the app started it) and remove its
        working folder."""
        if self._closed:
            return
        self._closed = True
        for stream in list(self.in_flight.values()):
            self.abort(stream)
        # let the engine thread process the aborts at its next step boundary, so the records end
        # every request (bounded: a stuck engine must not block the shutdown)
        has_unfinished = getattr(self.engine, "has_unfinished", None)
        deadline = time.monotonic() + 5
        while callable(has_unfinished) and has_unfinished() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if stop_engine:
            self.engine.stop()
        if self.config.out_dir:
            self.dump()
            print(f"servesim serve: records written to {self.config.out_dir}", file=sys.stderr, flush=True)
        close_records = getattr(self.engine, "close_records", None)
        if stop_engine and callable(close_records):  # its streamed records' working folder
            close_records()

    # --- metrics --------------------------------------------------------------------------------
    def gauges(self) -> dict[str, float]:
        stats = dict(self.engine.stats() or {})
        with self._lock:
            pending, in_flight = self.num_pending, len(self.in_flight)
        gauges = {
            "num_requests_running": stats.get("num_running", 0),
            "num_requests_waiting": stats.get("num_waiting", 0),  # the scheduler's queue (pending adds the ingress)
            "num_requests_swapped": stats.get("num_swapped", 0),
            "kv_cache_usage_perc": stats.get("kv_usage", 0.0),
            "num_kv_blocks_used": stats.get("num_used_gpu_blocks", 0),
            "num_kv_blocks_total": stats.get("num_gpu_blocks", 0),
            "num_requests_in_flight": in_flight,
            "num_requests_pending": pending,
            "num_preemptions_total": stats.get("num_preemptions", 0),
        }
        return gauges

    # --- records --------------------------------------------------------------------------------
    def dump(self, out_dir: str | Path | None = None) -> list[str]:
        """Write the engine's requests/steps tables (and summary) to `out_dir`; the paths written."""
        target = out_dir or self.config.out_dir
        if not target:
            raise RequestError("out_dir", "no records folder: start the server with --out DIR or give ?out_dir=", 400)
        out = Path(target)
        self.engine.write_records(out)  # a snapshot: requests still running appear unfinished
        # not the hidden working folder the engine's streamed records use, when it is in out_dir
        return sorted(str(p) for p in out.iterdir() if not p.name.startswith("."))


def check_vocab(tokenizer: Tokenizer, vocab_size: int, model: str, random_weights: bool = True) -> None:
    """Refuse a tokenizer the model's vocabulary does not match, naming both and their sizes.

    Larger: a prompt could hold ids the model has no embedding for. Smaller, with random weights:
    every id the model samples from the tokenizer's size up decodes to nothing, and random weights
    sample those as often as any other, so text silently loses most of its tokens (no setup here
    pairs them: `train_tokenizer` sizes a tokenizer to its model's vocab_size). Smaller with a
    trained checkpoint is how real models pad their embedding (to a multiple of 64, say): allowed."""
    n = tokenizer.vocab_size
    if n == vocab_size or (n < vocab_size and not random_weights):
        return
    why = ("a prompt could hold ids the model has no embedding for" if n > vocab_size else
           f"the model's random weights would sample ids {n}..{vocab_size - 1}, which decode to nothing")
    raise ConfigError(f"serve.tokenizer: {tokenizer.path} has {n} tokens but the model {model} has vocab_size "
                      f"{vocab_size}: {why}; give the model's own tokenizer, or train one of {vocab_size} tokens "
                      "(python -m gpu_backend.serve.train_tokenizer)")


# --- response bodies --------------------------------------------------------------------------
def _usage(num_prompt: int, num_output: int) -> dict:
    return {"prompt_tokens": num_prompt, "completion_tokens": num_output, "total_tokens": num_prompt + num_output}


def _error_body(message: str, status: int, field: str | None = None) -> dict:
    kind = {400: "BadRequestError", 404: "NotFoundError", 413: "RequestTooLargeError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": field, "code": status}}


def _choice(params: CompletionParams, text: str, finish_reason: str | None, streaming: bool, first: bool = False) -> dict:
    if not params.is_chat:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if streaming:
        delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish_reason}


def build_app(server: OpenAIServer, start_engine: bool = True):
    """The FastAPI app. With `start_engine`, its lifespan starts the engine and, on shutdown,
    writes the records (when an out_dir is configured) and stops the engine."""
    @asynccontextmanager
    async def lifespan(app):
        if start_engine:
            server.engine.start()
        try:
            yield
        finally:
            await server.close(stop_engine=start_engine)

    app = FastAPI(title="servesim", lifespan=lifespan)
    app.state.server = server
    app.state.start_engine = start_engine

    def error(message: str, status: int, field: str | None = None, headers: dict | None = None):
        return JSONResponse(_error_body(message, status, field), status_code=status, headers=headers)

    def shutting_down():
        return error("server is shutting down; send new requests elsewhere", 503)

    async def handle(http: HTTPRequest, chat: bool):
        arrival = engine_now(server.engine)
        kind = "chatcmpl" if chat else "cmpl"
        if server.draining:
            return shutting_down()
        try:
            raw = await read_body(http)
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, absurd nesting
                raise RequestError("body", f"is not valid JSON ({type(exc).__name__}: {str(exc)[:100]})") from None
            # on a worker thread, as vLLM's server tokenizes: a long prompt takes seconds (a 1 MB one
            # 3 s here), all of which the event loop stood still, every other stream with it
            params, ids = await asyncio.to_thread(server.read_prompt, body, chat)
            request = server.make_request(params, arrival, kind, ids)
        except RequestError as exc:
            server.metrics.observe_refused("bad_request")
            return error(str(exc), exc.status, exc.field)
        except ClientDisconnect:  # it hung up before its body was complete: nothing was asked, nobody listens
            return error("client disconnected", 499)
        if server.draining:  # it began while the prompt was tokenized: nothing was handed to the engine
            return shutting_down()
        try:
            stream = server.submit(request, asyncio.get_running_loop())
        except RequestError as exc:
            return error(str(exc), exc.status, exc.field)
        if stream is None:
            server.metrics.observe_refused("queue_full")
            return error(f"server busy: {server.config.max_num_waiting} requests already waiting; retry later", 503,
                         headers={"Retry-After": str(server.config.retry_after_s)})
        detok = IncrementalDetokenizer(server.tokenizer, list(params.stop))
        if params.stream:
            return StreamingResponse(sse(stream, params, detok), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await collect(http, stream, params, detok)

    def base(stream: RequestStream, chat: bool) -> dict:
        return {"id": stream.request.req_id, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": server.config.model_name}

    async def outputs(stream: RequestStream, params: CompletionParams, detok: IncrementalDetokenizer):
        """(text delta, finish_reason or None) per engine output, until the request ends."""
        while True:
            out = await stream.next_output()
            if out is None:  # closed without a final output (server shutdown): end the response
                yield detok.add([], final=True), stream.finish_reason or "abort"
                return
            text = detok.add(list(out.new_token_ids), final=out.finished)
            if detok.stopped and not out.finished:
                server.abort(stream, "stop")  # a stop string: the engine need not go on
                yield text, "stop"
                return
            if out.finished:
                # the output's own reason: the engine thread closes the stream (its finish_reason)
                # only after it has handed this output over, so that may not be set yet
                reason = reason_name(out.finish_reason)
                if reason == "rejected":
                    why = stream.request.reject_reason or "the scheduler can never fit it"
                    raise RequestError("prompt", f"rejected by the engine: {why}")
                yield text, "stop" if detok.stopped else reason
                return
            yield text, None

    async def sse(stream: RequestStream, params: CompletionParams, detok: IncrementalDetokenizer):
        chat = params.is_chat
        head = base(stream, chat)
        num_prompt = stream.request.num_prompt_tokens
        finished = False
        try:
            if chat:  # OpenAI sends the role first
                yield f"data: {json.dumps({**head, 'choices': [_choice(params, '', None, True, first=True)]})}\n\n"
            try:
                async for text, reason in outputs(stream, params, detok):
                    if not text and reason is None:
                        continue  # e.g. half a multi-byte character: nothing to show yet
                    chunk = {**head, "choices": [_choice(params, text, reason, True)]}
                    if params.continuous_usage:
                        chunk["usage"] = _usage(num_prompt, len(detok.token_ids))
                    yield f"data: {json.dumps(chunk)}\n\n"
                    finished = reason is not None
            except RequestError as exc:  # the headers are sent: report in the stream, as vLLM does
                finished = True
                yield f"data: {json.dumps(_error_body(str(exc), exc.status, exc.field))}\n\n"
            if params.include_usage:
                yield f"data: {json.dumps({**head, 'choices': [], 'usage': _usage(num_prompt, len(detok.token_ids))})}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            if not finished:  # the client went away (the task was cancelled) or the send failed
                server.abort(stream)

    async def wait_disconnect(http: HTTPRequest) -> None:
        """Returns when the client hangs up (the body is read already, so receive() waits for that)."""
        while (await http.receive())["type"] != "http.disconnect":
            pass

    async def collect(http: HTTPRequest, stream: RequestStream, params: CompletionParams,
                      detok: IncrementalDetokenizer):
        texts, reason = [], None
        gone = asyncio.ensure_future(wait_disconnect(http))
        gen = outputs(stream, params, detok)
        try:
            while reason is None:
                step = asyncio.ensure_future(gen.__anext__())
                await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():  # the client left before the request ended
                    step.cancel()
                    return error("client disconnected", 499)
                try:
                    text, reason = step.result()
                except RequestError as exc:
                    reason = "rejected"
                    return error(str(exc), exc.status, exc.field)
                texts.append(text)
        finally:
            gone.cancel()
            if reason is None:
                server.abort(stream)
        body = {**base(stream, params.is_chat), "object": "chat.completion" if params.is_chat else "text_completion",
                "choices": [_choice(params, "".join(texts), reason, False)],
                "usage": _usage(stream.request.num_prompt_tokens, len(detok.token_ids))}
        return JSONResponse(body)

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest):
        return await handle(http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest):
        return await handle(http, chat=True)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{
            "id": server.config.model_name, "object": "model", "created": server.created, "owned_by": "servesim",
            "root": server.config.model_name, "max_model_len": server.max_model_len}]}

    @app.get("/health")
    async def health():
        alive = getattr(server.engine, "is_alive", None)
        if callable(alive) and not alive():
            return error("engine is not running", 503)
        if server.draining:  # a load balancer's probe: take this replica out of rotation
            return shutting_down()
        return PlainTextResponse("ok")

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(server.metrics.render(server.gauges()),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/admin/dump")
    async def dump(out_dir: str | None = None):
        try:
            paths = await asyncio.to_thread(server.dump, out_dir)
        except RequestError as exc:
            return error(str(exc), exc.status, exc.field)
        return {"written": paths}

    return app


def drain_on_shutdown(uv_server, server: OpenAIServer, stop_engine: bool = True) -> None:
    """Make a uvicorn `Server`'s shutdown (SIGINT/SIGTERM, or `should_exit`) drain `server` first
    (`OpenAIServer.drain`, for `config.shutdown_timeout_s`), and write the records even when a
    second Ctrl-C (uvicorn's force_exit) skips the app's lifespan shutdown, which lost them."""
    original = uv_server.shutdown

    async def shutdown(sockets=None):
        await server.drain(server.config.shutdown_timeout_s, forced=lambda: uv_server.force_exit)
        await original(sockets)
        await server.close(stop_engine)  # nothing left to do when the lifespan closed it

    uv_server.shutdown = shutdown

"""Measure the serving front end's delays from the real HTTP stack: `servesim serve CONFIG --calibrate-frontend OUT.json`.

What `sim.frontend.FrontendConfig` models, timed on this machine with the real app (`build_app`),
the real tokenizer and uvicorn on loopback, an httpx streaming client in its own process
(`gpu_backend.serve.stream_client`, reading a stream as guidellm does): the ingress (send to first
`schedule()`), the egress (end of a token's step to the client having its chunk) and the engine
thread's share of streaming (`calibrate_frontend` says how each is timed and fitted).

Two engines: the real one (`build_server` of the serving config) measures the front end as it runs
beside real steps, which hold the interpreter lock part of the time, so the event loop waits for
it; `calibrate.probe_engine.probe_server(tokenizer)` puts a `ProbeEngine` whose steps sleep behind
the same app (no torch; the front end alone; what the tests use). The terms are medians: the delays have long tails (a
thread waiting for the interpreter lock can wait a whole switch interval, 5 ms; other work on a
shared machine), which the means beside them in `measurements` show and a constant delay cannot
carry; the median is the typical request's, and stable from a quiet machine to a busy one.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import random
import statistics
import time
from importlib.metadata import PackageNotFoundError, version

from calibrate.frontend_stamps import Stamping, TimedTokenizer
from gpu_backend.serve.background import BackgroundServer
from gpu_backend.serve.protocol import parse_request
from gpu_backend.serve.stream_client import StreamClient, shares_clock
from sim.frontend import PROFILE_FORMAT

# words of plain English: prompts are shuffled runs of them (as benchmark clients' synthetic text)
_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will can more "
    "about said what out up them some could into than then time only other new these two may first "
    "any like now my such make over our even most after also did many before must through years where "
    "much your way well down should because each just those people how too little state good very "
    "world still own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take three "
    "house river garden letter morning evening window question answer village journey winter summer"
).split()

def prompt_text(tokenizer, num_tokens: int, seed: int = 0) -> str:
    """English-looking text of `num_tokens` tokens (special ones aside; decoded from that many ids, so
    re-encoding may differ by a token with other tokenizers)."""
    rng = random.Random(seed)
    words: list[str] = []
    while len(tokenizer.encode(" ".join(words), add_special_tokens=False)) < num_tokens:
        words.extend(rng.sample(_WORDS, len(_WORDS)))
    ids = tokenizer.encode(" ".join(words), add_special_tokens=False)[:num_tokens]
    return tokenizer.decode(ids)


def time_tokenizer(tokenizer, prompts: dict[int, str], num_repeats: int) -> dict[int, float]:
    """Median seconds of `tokenizer.encode` per prompt length (the server's call, special tokens on).

    Timed on this thread's CPU clock: encoding one text runs on the calling thread, and on a machine
    whose cores are busy a wall clock times the wait for a core too (a median of 14.5 ms against a
    3.9 ms ingress that holds the same encode, with another process on the second core).
    """
    out = {}
    for length, text in prompts.items():
        times = []
        for _ in range(num_repeats):
            t = time.thread_time()
            tokenizer.encode(text)
            times.append(time.thread_time() - t)
        out[length] = statistics.median(times)
    return out


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def calibrate_frontend(server, prompt_lengths=(16, 128, 512, 896), num_repeats: int = 25,
                       num_output_tokens: int = 16, num_warmup: int = 5, progress: bool = True,
                       in_process: bool = False, concurrency=(2, 4)) -> dict:
    """Time the front end of `server` (an `OpenAIServer`, not started) on this machine; the profile
    (`{"format", "frontend", "measurements", "metadata"}`).

    `server` is what `servesim serve` runs (`servesim.commands.serve.build_server`: the real engine,
    whose steps contend with the event loop for the interpreter as they do when serving) or
    `probe_server(tokenizer)` (a sleeping engine: the front end alone, fast, no torch). Requests go
    one at a time (a quiet server, an idle engine at each arrival), lengths interleaved so that
    drifting machine load spreads over all of them; then k at a time for each k in `concurrency`
    (the engine's share at k outputs per step), `num_repeats` rounds of the shortest prompt each.

    - ingress: from the client's send (before it encodes the body) to the engine's first
      `schedule()` of the request (its `first_scheduled_time`: the engine thread woke and took it
      from its ingress list), over prompts of several lengths. A line through the per-length
      medians gives `request_overhead_s` (intercept) and `tokenize_s_per_token` (slope: tokenizing
      the prompt plus reading its bytes). The tokenizer alone is timed over the same prompts as a
      check.
    - egress: from the end of the step that made the first token (its `token_times[0]`, the time
      the simulator gives a token) to the client having its SSE chunk: `stream_overhead_s`, the
      median. The first token is the one TTFT waits for, and its chunk is sent while the engine runs
      the next step, as every later chunk but the last is. The last chunk's delay (an idle engine)
      and, when every token made a chunk of its own, every chunk's, are recorded beside it.
    - the engine thread's share: the engine's median token interval while it streams to the
      client, minus the same for the same requests added to it directly (no HTTP, no callback), in
      two phases: one request at a time (one output per step), and k requests sent at once by as
      many client processes, for each k in `concurrency` (k outputs per step; the interval counted
      only over steps that all k share; the bare twin adds k requests to the engine at once). A
      non-negative line through (1, extra_1), (k, extra_k), ... gives `engine_s_per_step`
      (intercept: the event loop woken and taking the interpreter lock once for a step's batch of
      outputs) and `engine_s_per_output` (slope: the server's `on_output` callback, which runs on
      the engine thread, its own median recorded beside it, and each chunk's formatting). The raw
      intervals of each phase are in `measurements["phases"]`.

    Not measured: concurrency on the single event loop for the ingress and egress (one request at a
    time). The load average before and after goes into the metadata.
    """
    items = list(concurrency) if isinstance(concurrency, (list, tuple)) else [concurrency]
    if not items or any(isinstance(k, bool) or not isinstance(k, int) or k < 2 for k in items):
        raise ValueError(f"concurrency: need integers >= 2 (requests streaming at once), got {concurrency!r}")
    ks = sorted(set(items))
    tokenizer = server.tokenizer
    lengths = sorted({int(n) for n in prompt_lengths})
    if len(lengths) < 2 or lengths[0] < 1:
        raise ValueError(f"prompt_lengths: need at least two distinct lengths >= 1, got {list(prompt_lengths)}")
    if num_output_tokens < 3:
        raise ValueError(f"num_output_tokens: need >= 3 (token intervals to time), got {num_output_tokens!r}")
    if lengths[-1] + num_output_tokens + 1 > server.max_model_len:
        raise ValueError(f"prompt_lengths: {lengths[-1]} tokens + {num_output_tokens} outputs do not fit the "
                         f"model's maximum length {server.max_model_len}")
    load_before = os.getloadavg()
    prompts = {n: prompt_text(tokenizer, n, seed=n) for n in lengths}
    num_ids = {n: len(tokenizer.encode(text)) for n, text in prompts.items()}  # as the server counts them
    encode_s = time_tokenizer(tokenizer, prompts, max(num_repeats, 20))

    timed_tokenizer = server.tokenizer = TimedTokenizer(server.tokenizer)
    engine = server.engine = Stamping(server.engine, timed_tokenizer)
    model = server.config.model_name

    def body(n: int) -> dict:
        return {"model": model, "prompt": prompts[n], "max_tokens": num_output_tokens, "stream": True,
                "ignore_eos": True}

    results, bare, k_streamed, k_bare = _send_all(server, engine, body, lengths, ks, num_repeats, num_warmup,
                                                  in_process, progress)
    load_after = os.getloadavg()
    stamps = _pair_stamps(results, engine, tokenizer, lengths)
    ingress, first_egress = stamps["ingress"], stamps["first_egress"]
    last_egress, all_egress = stamps["last_egress"], stamps["all_egress"]
    served_gaps = _gaps(engine.requests[req_id] for _, (_, req_id, _) in results)
    bare_gaps = _gaps(bare)
    served_interval, bare_interval = statistics.median(served_gaps), statistics.median(bare_gaps)
    phases = _phases(served_gaps, bare_gaps, len(results), len(bare), k_streamed, k_bare)
    per_step, per_output = fit_nonnegative_line([ph["outputs_per_step"] for ph in phases],
                                                [ph["extra_s_median"] for ph in phases])
    if not first_egress:
        raise RuntimeError("calibrate front end: no first token made a chunk of its own; cannot time the egress")

    xs = [num_ids[n] for n in lengths]
    ingress_med = [statistics.median(ingress[n]) for n in lengths]
    request_overhead, per_token = fit_line(xs, ingress_med)
    encode_intercept, encode_per_token = fit_line(xs, [encode_s[n] for n in lengths])
    terms = {
        "request_overhead_s": max(request_overhead, 0.0),
        "tokenize_s_per_token": max(per_token, 0.0),
        # the chunks that matter most (TTFT), sent while the engine runs its next step
        "stream_overhead_s": statistics.median(first_egress),
        # what streaming adds to the engine's token interval, at 1 and k outputs per step
        "engine_s_per_output": per_output,
        "engine_s_per_step": per_step,
    }
    callback = engine.callback_s
    return {
        "format": PROFILE_FORMAT,
        "frontend": terms,
        "measurements": {
            "engine": type(engine._engine).__name__,
            "client": "thread" if in_process or not shares_clock() else "process",
            "prompt_tokens": xs,
            "ingress_s_median": ingress_med,
            "ingress_s_mean": [statistics.fmean(ingress[n]) for n in lengths],
            "ingress_s_p90": [_quantile(ingress[n], 0.9) for n in lengths],
            # the part of the ingress before the server's arrival stamp (HTTP parsing, routing): with
            # the egress, what a client's TTFT exceeds the server's records by
            "ingress_before_server_stamp_s_median": statistics.median(stamps["before_stamp"]),
            "tokenizer_encode_s_median": [encode_s[n] for n in lengths],
            # the server's own encode of each request (wall clock, inside its ingress), paired with
            # `ingress_s` request by request
            "served_encode_s": [stamps["served_encode"][n] for n in lengths],
            "ingress_s": [ingress[n] for n in lengths],
            "tokenizer_s_per_token": encode_per_token,
            "tokenizer_intercept_s": encode_intercept,
            "egress_first_chunk_s_median": statistics.median(first_egress),
            "egress_first_chunk_s_mean": statistics.fmean(first_egress),
            "egress_first_chunk_s_p90": _quantile(first_egress, 0.9),
            "egress_last_chunk_s_median": statistics.median(last_egress),
            "egress_every_chunk_s_median": statistics.median(all_egress) if all_egress else None,
            "engine_callback_s_per_output": statistics.median(callback) if callback else None,
            "token_interval_s_median_streamed": served_interval,
            "token_interval_s_median_bare": bare_interval,
            "token_interval_s_mean_streamed": statistics.fmean(served_gaps),
            "token_interval_s_mean_bare": statistics.fmean(bare_gaps),
            # per phase (outputs per step): the token intervals streamed and bare, raw and summed up
            "phases": phases,
            "num_bare_requests": len(bare),
            "num_requests": len(results),
            "num_first_chunks_paired": len(first_egress),
            "num_requests_not_fully_paired": stamps["num_unpaired"],
        },
        "metadata": {
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
            "python": platform.python_version(),
            "packages": _versions(("uvicorn", "fastapi", "httpx", "tokenizers", "torch")),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
            "tokenizer": str(getattr(tokenizer, "path", "")),
            "settings": {"num_repeats": num_repeats, "num_output_tokens": num_output_tokens,
                         "num_warmup": num_warmup, "prompt_lengths": lengths, "concurrency": ks},
            "method": "calibrate/frontend.py: uvicorn on loopback, the real app and "
                      "tokenizer, httpx streaming clients in their own processes; one request at a time, "
                      f"then {', '.join(map(str, ks))} at once for the engine thread's share; medians",
        },
    }


def _send_all(server, engine, body, lengths: list[int], ks: list[int], num_repeats: int, num_warmup: int,
              in_process: bool, progress: bool):
    """Run the calibration's requests against `server` on loopback: one at a time over `lengths`
    (HTTP, and every third one's twin added to the engine directly), then rounds of k at once for
    each k in `ks` (streamed or bare). Returns (HTTP results as (length, (sent, req_id, chunks)),
    bare requests, per k the streamed batches' requests, per k the bare batches)."""
    from tqdm import tqdm

    from gpu_backend.serve.server import build_app  # the serve extra (fastapi)

    # HTTP requests, and every third one's twin added to the engine directly (its bare token
    # interval), shuffled together so that drifting machine load spreads over all of them
    plan = [("http", n) for _ in range(num_repeats) for n in lengths]
    plan += [("bare", n) for _, n in plan[::3]]
    random.Random(0).shuffle(plan)
    # then rounds of k requests at once (the shortest prompt), streamed or bare, all ks shuffled together
    rounds = [(kind, k) for k in ks for kind in ("http", "bare") for _ in range(num_repeats)]
    random.Random(1).shuffle(rounds)
    results, bare = [], []
    k_streamed: dict[int, list] = {k: [] for k in ks}
    k_bare: dict[int, list] = {k: [] for k in ks}
    with contextlib.ExitStack() as stack:
        srv = stack.enter_context(BackgroundServer(build_app(server)))
        url = f"{srv.url}/v1/completions"
        clients = [stack.enter_context(StreamClient(url, in_process)) for _ in range(ks[-1])]
        client = clients[0]
        for i in range(num_warmup):  # the first requests pay imports, connection set-up, caches
            client.send(body(lengths[i % len(lengths)]))
        for c in clients[1:]:
            c.send(body(lengths[0]))
        for kind, n in tqdm(plan, desc="calibrate front end (1 at a time)", unit="req", disable=not progress):
            if kind == "http":
                results.append((n, client.send(body(n))))
            else:
                bare.append(_run_bare(server, body(n)))
        for kind, k in tqdm(rounds, desc=f"calibrate front end ({', '.join(map(str, ks))} at once)", unit="round",
                            disable=not progress):
            if kind == "http":
                for c in clients[:k]:  # all sent before any answer is awaited
                    c.submit(body(lengths[0]))
                answers = [c.receive() for c in clients[:k]]
                k_streamed[k].append([engine.requests[req_id] for _, req_id, _ in answers])
            else:
                k_bare[k].append(_run_bare_batch(server, [body(lengths[0])] * k))
    return results, bare, k_streamed, k_bare


def _pair_stamps(results, engine, tokenizer, lengths: list[int]) -> dict:
    """Each HTTP request's client stamps against the engine's: its ingress (send to first schedule),
    the server's encode, what lies before the server's arrival stamp, and the egress of its first,
    last and (one chunk per token) every chunk; requests whose chunks and tokens do not pair up
    are counted (`num_unpaired`)."""
    ingress: dict[int, list[float]] = {n: [] for n in lengths}
    served_encode: dict[int, list[float]] = {n: [] for n in lengths}
    before_stamp, first_egress, last_egress, all_egress, num_unpaired = [], [], [], [], 0
    for n, (sent, req_id, chunks) in results:
        request = engine.requests[req_id]
        # the engine took it at its first schedule() (it was idle: no step to wait for)
        ingress[n].append(request.first_scheduled_time + engine.offset - sent)
        served_encode[n].append(engine.encode_s[req_id])
        # the server stamps arrival_time as its handler starts: what lies before is outside its records
        before_stamp.append(request.arrival_time + engine.offset - sent)
        produced = [t + engine.offset for t in request.token_times]  # the steps' end stamps
        if not chunks or not produced:
            num_unpaired += 1
            continue
        last_egress.append(chunks[-1] - produced[-1])  # the final chunk always carries the last token
        first_text = tokenizer.decode(request.output_token_ids[:1])
        if first_text and not first_text.endswith("\ufffd"):  # the first token made the first chunk
            first_egress.append(chunks[0] - produced[0])
        if len(chunks) == len(produced):  # one chunk per token: every pair is known
            all_egress.extend(c - p for c, p in zip(chunks, produced))
        else:
            num_unpaired += 1
    return {"ingress": ingress, "served_encode": served_encode, "before_stamp": before_stamp,
            "first_egress": first_egress, "last_egress": last_egress, "all_egress": all_egress,
            "num_unpaired": num_unpaired}


def _run_bare(server, body: dict, timeout_s: float = 120.0):
    """Add the request `body` describes straight to the (running) engine and wait for it to end."""
    request = server.make_request(parse_request(body, chat=False), server.engine.now(), "bare")
    server.engine.add_request(request)
    deadline = time.monotonic() + timeout_s
    while not request.is_finished:
        if time.monotonic() > deadline:
            raise RuntimeError(f"calibrate front end: request {request.req_id} did not finish in {timeout_s} s")
        time.sleep(0.02)
    return request


def _run_bare_batch(server, bodies: list[dict], timeout_s: float = 120.0) -> list:
    """Add the requests `bodies` describe to the (running) engine at once; wait for all to end."""
    requests = [server.make_request(parse_request(b, chat=False), server.engine.now(), "bare") for b in bodies]
    for request in requests:
        server.engine.add_request(request)
    deadline = time.monotonic() + timeout_s
    while not all(r.is_finished for r in requests):
        if time.monotonic() > deadline:
            raise RuntimeError(f"calibrate front end: {len(requests)} bare requests did not finish in {timeout_s} s")
        time.sleep(0.02)
    return requests


def _gaps(requests) -> list[float]:
    """Gaps between consecutive output tokens over `requests` (one request per step: step times)."""
    return [b - a for r in requests for a, b in zip(r.token_times, r.token_times[1:])]


def _shared_gaps(requests) -> list[float]:
    """Token gaps of `requests` (sent together) over the steps all of them ran in: from the last one's
    first token to the first one's last, every step decodes all of them (one output each)."""
    lo = max(r.token_times[0] for r in requests)
    hi = min(r.token_times[-1] for r in requests)
    return [b - a for r in requests for a, b in zip(r.token_times, r.token_times[1:]) if a >= lo and b <= hi]


def _phase(outputs_per_step: int, streamed: list[float], bare: list[float], num_streamed: int,
           num_bare: int) -> dict:
    """One phase's token intervals (seconds): medians, means, the streamed-minus-bare extra, and raw."""
    return {
        "outputs_per_step": outputs_per_step,
        "extra_s_median": statistics.median(streamed) - statistics.median(bare),
        "extra_s_mean": statistics.fmean(streamed) - statistics.fmean(bare),
        "streamed_s_median": statistics.median(streamed), "bare_s_median": statistics.median(bare),
        "streamed_s_mean": statistics.fmean(streamed), "bare_s_mean": statistics.fmean(bare),
        "num_streamed_requests": num_streamed, "num_bare_requests": num_bare,
        "streamed_intervals_s": [round(g, 7) for g in streamed],
        "bare_intervals_s": [round(g, 7) for g in bare],
    }


def _phases(served_gaps: list[float], bare_gaps: list[float], num_served: int, num_bare: int,
            k_streamed: dict, k_bare: dict) -> list[dict]:
    """The engine-share phases: one output per step (the one-at-a-time requests' intervals), then k
    per step for each k (the intervals over the steps all k requests of a batch share)."""
    phases = [_phase(1, served_gaps, bare_gaps, num_served, num_bare)]
    for k in sorted(k_streamed):
        k_served_gaps = [g for batch in k_streamed[k] for g in _shared_gaps(batch)]
        k_bare_gaps = [g for batch in k_bare[k] for g in _shared_gaps(batch)]
        if not k_served_gaps or not k_bare_gaps:
            raise RuntimeError(f"calibrate front end: no step was shared by all {k} concurrent requests")
        phases.append(_phase(k, k_served_gaps, k_bare_gaps, k * len(k_streamed[k]), k * len(k_bare[k])))
    return phases

def fit_nonnegative_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys over xs with both >= 0 (the best of the unconstrained
    line when it is feasible, else of the two faces: slope 0, or a line through the origin)."""
    intercept, slope = fit_line(xs, ys)
    if intercept >= 0 and slope >= 0:
        return intercept, slope

    def sse(a: float, b: float) -> float:
        return sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    flat = (max(statistics.fmean(ys), 0.0), 0.0)
    through_origin = (0.0, max(sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), 0.0))
    return min(flat, through_origin, key=lambda ab: sse(*ab))


def _quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def _versions(names: tuple[str, ...]) -> dict:
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out

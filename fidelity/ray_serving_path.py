"""vLLM v0's Ray serving path, counted per unit: what `--engine-use-ray` and `--worker-use-ray` add to a step.

A vLLM v0 engine launched with `--engine-use-ray` lives in a Ray actor: every iteration the API
server awaits one remote `step()`, which returns a `RequestOutput` for every scheduled request
holding its whole prompt (text and token ids) and its whole output so far. With `--worker-use-ray`
the engine sends the model worker, also a Ray actor, every scheduled request's `SequenceGroupMetadata`
(its prompt and output token ids and block table) in one remote `execute_model` per step. And
`vllm.entrypoints.api_server` streams each request's prompt + text as one JSON line every step.
Each step waits for all of it (the next `step()` is issued after the outputs are handed over).

Nothing outside DistServe's own runs times that path on their host, and a four-process rig on a
2-core machine moves with the machine's mood (docs/results/2026-12-06-vllm-023-serving-path.md).
So it is counted here: one Ray actor round trip per hop, from Ray's own published microbenchmark,
plus the (de)serialization of the payloads above, each unit timed alone on one thread
(`measure_units`, the best of several repeats) and fitted as seconds per request plus seconds per
context token. The payloads mirror vLLM 0.2.3's classes (`vllm/outputs.py`, `vllm/sequence.py`,
`vllm/sampling_params.py`): same attributes, same kinds of values. What it leaves out: Ray's
object store for payloads over 100 KB, the API server's HTTP writes (our serve stack's per-output
term carries one per streamed output), any contention between the processes, the engine actor's
`add_request` call and tokenization per new request (one Ray call and ~1.5 us a prompt token, at
the step it joins), and, under tensor parallelism, the metadata pickled again for each further
worker (counted once).
"""
from __future__ import annotations

import gc
import json
import os
import pickle
import platform
import random
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from calibrate.cpu_cache import cpu_model
from records.files import read_json_object

RAY_SERVING_PATH = Path(__file__).resolve().parent / "host" / "vllm-v0-ray-serving-path.json"

# One synchronous round trip to a Ray actor (a small argument and result): Ray's release
# microbenchmark `1_1_actor_calls_sync`, 2011.9 calls/s (ray-project/ray
# release/perf_metrics/microbenchmark.json @ 08444c4). The per-byte cost of real payloads is timed
# separately (`measure_units`).
RAY_ACTOR_CALL_S = 1.0 / 2011.916260420167
RAY_ACTOR_CALL_ORIGIN = ("Ray's release microbenchmark 1_1_actor_calls_sync: 2011.9 calls/s "
                         "(ray-project/ray release/perf_metrics/microbenchmark.json @ 08444c4)")
# the entry point that streams each request's whole prompt + text as JSON every step (vLLM v0's demo
# server: `{"text": [prompt + output.text]}`); the OpenAI server streams deltas
FULL_TEXT_ENTRYPOINT = "vllm.entrypoints.api_server"
# English text under a BPE tokenizer: about four characters a token (OpenAI's rule of thumb); the
# text payloads (prompt and output text) are sized by it
CHARS_PER_TOKEN = 4.0
CONTEXTS = (32, 128, 512, 1024, 2048)
_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
          "they you were her she there one all we their what so up out if about who get go me when make can like "
          "time no just him know take people into year your good some could them see other than then now look").split()


class SamplingParams:
    """vLLM 0.2.3's sampling parameters, as pickled inside each request's metadata (same attributes)."""

    def __init__(self, max_tokens: int) -> None:
        self.n, self.best_of, self.presence_penalty, self.frequency_penalty = 1, 1, 0.0, 0.0
        self.temperature, self.top_p, self.top_k, self.use_beam_search = 1.0, 1.0, -1, False
        self.length_penalty, self.early_stopping, self.stop, self.stop_token_ids = 1.0, False, [], []
        self.ignore_eos, self.max_tokens, self.logprobs, self.prompt_logprobs = True, max_tokens, None, None
        self.skip_special_tokens = True


class SequenceData:
    """vLLM 0.2.3's per-sequence token ids."""

    def __init__(self, prompt_token_ids: list[int], output_token_ids: list[int]) -> None:
        self.prompt_token_ids, self.output_token_ids, self.cumulative_logprob = prompt_token_ids, output_token_ids, -1.5


class SequenceGroupMetadata:
    """vLLM 0.2.3's per-request input to the worker's `execute_model`."""

    def __init__(self, request_id: str, data: SequenceData, params: SamplingParams, blocks: list[int]) -> None:
        self.request_id, self.is_prompt = request_id, False
        self.seq_data, self.sampling_params, self.block_tables = {0: data}, params, {0: blocks}


class SequenceOutputs:
    """vLLM 0.2.3's sampled token of one sequence, returned by the worker."""

    def __init__(self, token: int) -> None:
        self.parent_seq_id, self.output_token, self.logprobs = 0, token, {token: -0.5}


class CompletionOutput:
    """vLLM 0.2.3's output of one sequence so far."""

    def __init__(self, text: str, token_ids: list[int]) -> None:
        self.index, self.text, self.token_ids = 0, text, token_ids
        self.cumulative_logprob, self.logprobs, self.finish_reason = -1.5, None, None


class RequestOutput:
    """vLLM 0.2.3's per-request result of a `step()`: the whole prompt and output so far."""

    def __init__(self, request_id: str, prompt: str, prompt_token_ids: list[int], output: CompletionOutput) -> None:
        self.request_id, self.prompt, self.prompt_token_ids = request_id, prompt, prompt_token_ids
        self.outputs, self.finished = [output], False


def _text(rng: random.Random, tokens: int) -> str:
    words, n = [], 0
    while n < tokens * CHARS_PER_TOKEN:
        w = rng.choice(_WORDS)
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[: int(tokens * CHARS_PER_TOKEN)]


def _payloads(context: int, block_size: int = 16, seed: int = 0):
    """(worker metadata, worker result, request output) of one request `context` tokens long
    (a quarter of it output), with token ids below 32,000 and ~4 characters of text a token."""
    rng = random.Random(seed + context)
    out = max(1, context // 4)
    prompt_ids = [rng.randrange(32000) for _ in range(context - out)]
    out_ids = [rng.randrange(32000) for _ in range(out)]
    meta = SequenceGroupMetadata(f"req-{context}", SequenceData(prompt_ids, out_ids), SamplingParams(out + 10),
                                 [rng.randrange(4096) for _ in range(-(-context // block_size))])
    result = SequenceOutputs(out_ids[-1])
    output = RequestOutput(f"req-{context}", _text(rng, context - out), prompt_ids,
                           CompletionOutput(_text(rng, out), out_ids))
    return meta, result, output


def _best_of(fn, repeats: int, number: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _unit_times(context: int, repeats: int, number: int) -> dict[str, float]:
    """Seconds per request of each unit, for one request of `context` tokens."""
    meta, result, output = _payloads(context)
    to_worker, from_worker = pickle.dumps([meta], protocol=5), pickle.dumps([result], protocol=5)
    to_server = pickle.dumps([output], protocol=5)

    def worker_hop():  # engine pickles the metadata, the worker unpickles it; and the sampled token back
        pickle.dumps([meta], protocol=5), pickle.loads(to_worker)
        pickle.dumps([result], protocol=5), pickle.loads(from_worker)

    def engine_hop():  # the engine actor pickles the RequestOutput, the API server unpickles it
        pickle.dumps([output], protocol=5), pickle.loads(to_server)

    def full_text_json():  # vllm.entrypoints.api_server: prompt + text, every step
        (json.dumps({"text": [output.prompt + output.outputs[0].text]}) + "\0").encode("utf-8")

    return {name: _best_of(fn, repeats, number) for name, fn in
            (("worker_hop", worker_hop), ("engine_hop", engine_hop), ("full_text_json", full_text_json))}


def measure_units(contexts=CONTEXTS, repeats: int = 7, number: int = 400) -> dict:
    """Each unit's seconds per request and per context token, fitted over `contexts` (least squares
    of the best-of-`repeats` time per request), timed on this thread with the collector off."""
    was = gc.isenabled()
    gc.disable()
    try:
        rows = {c: _unit_times(c, repeats, number) for c in contexts}
    finally:
        if was:
            gc.enable()
    x = np.array(contexts, float)
    units = {}
    for name in rows[contexts[0]]:
        y = np.array([rows[c][name] for c in contexts])
        slope, intercept = np.polyfit(x, y, 1)
        units[name] = {"per_request_s": max(0.0, float(intercept)), "per_context_token_s": max(0.0, float(slope)),
                       "seconds_by_context": {str(c): rows[c][name] for c in contexts}}
    return units


def write_units(path: Path = RAY_SERVING_PATH, **kw) -> dict:
    """Measure the units and write them, with where and how they were measured, to `path`."""
    data = {
        "format": "servesim-ray-serving-path", "version": 1,
        "what": "vLLM v0's Ray serving path per unit (fidelity.ray_serving_path): pickling and unpickling the "
                "worker's per-request metadata and the engine actor's RequestOutputs, and the demo API server's "
                "full-text JSON, each timed alone on one thread",
        "made_by": "python benchmarks/ray_serving_path.py --write",
        "meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "python": platform.python_version(),
                 "cpu": cpu_model(), "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
                 "chars_per_token": CHARS_PER_TOKEN, "contexts": list(kw.get("contexts", CONTEXTS))},
        "ray_actor_call_s": RAY_ACTOR_CALL_S, "ray_actor_call_origin": RAY_ACTOR_CALL_ORIGIN,
        "units": measure_units(**kw),
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def serving_path_terms(engine_use_ray: bool, worker_use_ray: bool, full_text_stream: bool,
                       path: Path = RAY_SERVING_PATH) -> tuple[float, float, float, str] | None:
    """(seconds per step, per scheduled request, per context token of the scheduled requests, what
    they came from) that the Ray serving path adds to a vLLM v0 step; None when the run uses neither
    Ray hop or the measured units are missing."""
    if not (engine_use_ray or worker_use_ray):
        return None
    try:
        data = read_json_object(path, "Ray serving path units")
        call_s, units = float(data["ray_actor_call_s"]), data["units"]
        used = [u for u, on in (("worker_hop", worker_use_ray), ("engine_hop", engine_use_ray),
                                ("full_text_json", engine_use_ray and full_text_stream)) if on]
        per_req = sum(float(units[u]["per_request_s"]) for u in used)
        per_token = sum(float(units[u]["per_context_token_s"]) for u in used)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    hops = int(engine_use_ray) + int(worker_use_ray)
    why = (f"Ray serving path: {hops} actor call(s) a step x {call_s * 1e3:.2f} ms (Ray's microbenchmark) + "
           f"{per_req * 1e6:.1f} us a request + {per_token * 1e9:.1f} ns a context token ({', '.join(used)}; "
           f"timed per unit, {path.name})")
    return hops * call_s, per_req, per_token, why

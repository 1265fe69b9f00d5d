"""`vllm bench serve` results (`--save-result`): per-request timings as vLLM's own client measured them.

The result JSON holds, per request in send order, `input_lens`, `output_lens`, `ttfts` (s), `itls`
(s between streamed tokens), `errors` ("" when served) and, in recent releases, `start_times`
(the client's `perf_counter` at each send) and `latencies` (E2E, s); older ones drop the lists
unless `--save-detailed`, and lack `start_times`. Its TTFT and E2E are from the send; its TPOT is
per token (`fidelity.metric_definitions`). A send time is when the client let the request go (after
`--max-concurrency`'s wait), so replaying them replays what the server saw. Without them the sends
are made as the client makes them: due all at once at `request_rate` inf, else after gamma gaps of
shape `burstiness` at `request_rate`, in the file's order (`send_times`, drawn here), and under
`max_concurrency` each sent when it is due and one of that many slots is free (the replay's
`sim.workload.concurrency.ConcurrencyCap`). A request the client saw fail (an `errors` entry, or
no TTFT or output) has no timings: it is counted (the run's `num_failures`, in served.csv) and said,
not replayed. A file is known by its content (the lists), not its name: `vllm bench` names it after
the backend, rate, model and date.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from fidelity.runs import measured_table
from records.files import read_json_object

if TYPE_CHECKING:  # the run readers' tables
    import pandas as pd

#: the lists a result must hold to be read as one (`start_times` may be missing: `read_vllm_bench`)
REQUIRED = ("input_lens", "output_lens", "ttfts")


class BenchResult(NamedTuple):
    """A `vllm bench serve` result as a run's measurements (`read_vllm_bench`)."""

    requests: "pd.DataFrame"  # the served requests, in send order
    sends: str | None  # how the send times were made where the file does not hold them, else None
    max_concurrency: int | None  # the client's bound those made-up sends must keep, else None
    failed: int  # requests the client sent and saw fail (no timings): counted, not replayed


def is_bench_result(data) -> bool:
    """True for a parsed `vllm bench serve` result: a mapping with its per-request lists (`REQUIRED`)."""
    return isinstance(data, dict) and all(isinstance(data.get(k), list) for k in REQUIRED)


def send_times(n: int, request_rate, burstiness=1.0, seed: int = 0) -> np.ndarray:
    """The client's send times (s) of `n` requests where they do not depend on the server: all at 0
    at rate inf (the default), else the first at 0 and gamma gaps of shape `burstiness` and mean
    1 / `request_rate` (burstiness 1: Poisson), as `vllm bench serve` draws them (its own draws are
    not in the file: these are the same process, seeded here)."""
    rate = math.inf if request_rate in (None, "inf") else float(request_rate)
    if math.isinf(rate):
        return np.zeros(n)
    shape = float(burstiness or 1.0)
    if not rate > 0 or not shape > 0:
        raise ValueError(f"request_rate and burstiness: expected positive numbers, got {request_rate!r}, {burstiness!r}")
    gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (rate * shape), max(n - 1, 0))
    return np.concatenate([[0.0], np.cumsum(gaps)])


def read_vllm_bench(path: Path, data: dict | None = None) -> BenchResult:
    """A `vllm bench serve` result's served requests (failed ones counted and dropped: they have
    no timings), how their send times were made when the file does not hold them, and the client's
    bound on requests in flight those made-up sends must keep.

    E2E is `latencies` where the release saved them, else TTFT + the sum of the request's `itls`.
    Without `start_times` the requests are due at `send_times` of the file's `request_rate` and
    `burstiness`, under its `max_concurrency`. Refused with the reason: a result with neither
    `latencies` nor `itls`. `data`: the file, where the caller has parsed it
    (`fidelity.sources.client_report.find_client_report`)."""
    if data is None:
        data = read_json_object(path, "vllm bench result")
    if not is_bench_result(data):
        raise ValueError(f"{path}: not a `vllm bench serve` result (expected the lists {', '.join(REQUIRED)})")
    data = dict(data)  # made-up send times go in as start_times: the caller's copy stays as read
    n = len(data["ttfts"])
    generated, cap = None, None
    if not isinstance(data.get("start_times"), list):
        rate, shape, cap = data.get("request_rate", "inf"), data.get("burstiness", 1.0), data.get("max_concurrency")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"{path}: max_concurrency: expected a positive integer or null, got {cap!r}")
        data["start_times"] = send_times(n, rate, shape).tolist()
        generated = ("send times not recorded (vllm bench before start_times): due all at once (request_rate inf)"
                     if rate is None or str(rate) == "inf" else
                     f"send times not recorded (vllm bench before start_times): due as the client draws them, gamma "
                     f"gaps of shape {shape} at {rate} req/s, in the file's order (seed 0)")
        if cap is not None:
            generated += f", each sent when one of max_concurrency = {cap} slots is free"
    lists = {k: data[k] for k in ("input_lens", "output_lens", "start_times")}
    for key in ("latencies", "itls", "errors"):
        if isinstance(data.get(key), list):
            lists[key] = data[key]
    if "latencies" not in lists and "itls" not in lists:
        raise ValueError(f"{path}: this vllm bench result has neither latencies nor itls: no request's E2E")
    for key, values in lists.items():
        if len(values) != n:
            raise ValueError(f"{path}: {key} has {len(values)} entries, ttfts {n}: not one per request")
    rows, failed = [], 0
    for i in range(n):
        ttft, n_out = data["ttfts"][i], lists["output_lens"][i]
        if ("errors" in lists and lists["errors"][i]) or not ttft or not n_out:  # the client saw it fail
            failed += 1
            continue
        if "latencies" in lists:
            e2e = float(lists["latencies"][i])
        else:
            e2e = float(ttft) + float(sum(lists["itls"][i] or ()))
        rows.append({"req_id": str(i), "arrival_time": float(lists["start_times"][i]),
                     "num_prompt_tokens": int(lists["input_lens"][i]), "num_output_tokens": int(n_out),
                     "ttft_s": float(ttft), "e2e_s": e2e})
    if not rows:
        raise ValueError(f"{path}: no request of this vllm bench result was served")
    return BenchResult(measured_table({k: [r[k] for r in rows] for k in rows[0]}, path), generated, cap, failed)

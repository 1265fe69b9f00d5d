"""`vllm bench serve` results (`--save-result`): per-request timings as vLLM's own client measured them.

The result JSON holds, per request in send order, `input_lens`, `output_lens`, `ttfts` (s), `itls`
(s between streamed tokens), `errors` ("" when served) and, in recent releases, `start_times`
(the client's `perf_counter` at each send) and `latencies` (E2E, s); older ones drop the lists
unless `--save-detailed`, and lack `start_times`. Its TTFT and E2E are from the send; its TPOT is
per token (`fidelity.metric_definitions`). A send time is when the client let the request go (after
`--max-concurrency`'s wait), so replaying them replays what the server saw. A file is known by its
content (the lists), not its name: `vllm bench` names it after the backend, rate, model and date.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from fidelity.runs import measured_table

if TYPE_CHECKING:  # the run readers' tables
    import pandas as pd

#: the lists a result must hold to be read as one (`start_times` is checked with a reason)
REQUIRED = ("input_lens", "output_lens", "ttfts")


def is_bench_result(path: Path) -> bool:
    """True for a JSON object with `vllm bench serve`'s per-request lists (`REQUIRED`)."""
    try:
        with open(path) as f:
            head = f.read(1)
            if head != "{":
                return False
            f.seek(0)
            data = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(isinstance(data.get(k), list) for k in REQUIRED)


def bench_result_file(folders: list[Path]) -> Path | None:
    """The first `vllm bench serve` result among the JSON files of `folders` (by name), or None."""
    for folder in folders:
        for file in sorted(Path(folder).glob("*.json")):
            if is_bench_result(file):
                return file
    return None


def read_vllm_bench_requests(path: Path) -> pd.DataFrame:
    """The served requests of a `vllm bench serve` result (failed ones, `errors` set, dropped).

    E2E is `latencies` where the release saved them, else TTFT + the sum of the request's `itls`.
    A result without `start_times` (releases before they were saved) is refused: its send times,
    which a replay needs, are not in it; so is one with neither `latencies` nor `itls`."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in REQUIRED):
        raise ValueError(f"{path}: not a `vllm bench serve` result (expected the lists {', '.join(REQUIRED)})")
    n = len(data["ttfts"])
    if not isinstance(data.get("start_times"), list):
        raise ValueError(f"{path}: this vllm bench result has no start_times (releases before they were saved), so "
                         "its send times cannot be replayed; rerun with a newer `vllm bench serve --save-result`")
    lists = {k: data[k] for k in ("input_lens", "output_lens", "start_times")}
    for key in ("latencies", "itls", "errors"):
        if isinstance(data.get(key), list):
            lists[key] = data[key]
    if "latencies" not in lists and "itls" not in lists:
        raise ValueError(f"{path}: this vllm bench result has neither latencies nor itls: no request's E2E")
    for key, values in lists.items():
        if len(values) != n:
            raise ValueError(f"{path}: {key} has {len(values)} entries, ttfts {n}: not one per request")
    rows = []
    for i in range(n):
        if "errors" in lists and lists["errors"][i]:
            continue
        ttft, n_out = data["ttfts"][i], lists["output_lens"][i]
        if not ttft or not n_out:  # a request the client counted as failed
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
    return measured_table({k: [r[k] for r in rows] for k in rows[0]})

"""The sources' workload kinds and trace formats, registered with `sim.workload` by importing them.

`servesim`'s commands and the app import this module, so that every config they read may use
`kind = "inference_perf"` (inference-perf's own generator), `kind = "guidellm"` (guidellm's
benchmarks as it drives them) and `trace_format = "vidur"` (Vidur's length tables), while `sim`
itself names no source. `sweep_workload` gives the app a benchmark sweep (guidellm's) from a few
inputs, so that the app names no load generator either.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fidelity.sources.guidellm import RATE_TYPES
from fidelity.sources.guidellm import WORKLOAD_KIND as GUIDELLM_KIND
from fidelity.sources.inference_perf import WORKLOAD_KIND as INFERENCE_PERF_KIND
from fidelity.sources.vidur import TRACE_FORMAT
from records.files import write_content_file

REGISTERED = (INFERENCE_PERF_KIND, GUIDELLM_KIND, TRACE_FORMAT)

#: the strategies of a benchmark sweep (`sweep_workload`): guidellm's profiles
SWEEP_STRATEGIES = RATE_TYPES


def sweep_workload(strategy: str, rate: str, requests: int, prompt_tokens: int, output_tokens: int,
                   prefix_tokens: int = 0, folder: str | Path | None = None, seed: int = 42) -> dict:
    """A `workload` section that runs a benchmark sweep as guidellm drives it: `strategy` (one of
    `SWEEP_STRATEGIES`), `rate` (a sweep's size, req/s, streams; "1,2,4" runs one benchmark each;
    unused by synchronous and throughput), `requests` per benchmark, lengths with a quarter of
    their mean as spread, a shared prefix, the draws' `seed`. The profile is a JSON file in
    `folder` (the temporary folder by default) named by its content, so that one profile is one
    file and one config."""
    profile = {"rate-type": strategy, "max-requests": int(requests), "random-seed": int(seed),
               "data": {"prompt_tokens": int(prompt_tokens), "prompt_tokens_stdev": int(prompt_tokens) // 4,
                        "output_tokens": int(output_tokens), "output_tokens_stdev": int(output_tokens) // 4,
                        "prefix_tokens": int(prefix_tokens)}}
    if strategy not in ("synchronous", "throughput"):
        profile["rate"] = str(rate).strip()
    data = json.dumps(profile, sort_keys=True).encode()
    path = write_content_file(folder or tempfile.gettempdir(), "servesim-sweep-", data)
    return {"kind": GUIDELLM_KIND.name, "profile": str(path)}

"""`ReplayWorkload`: a real run's recorded requests, sent again at their recorded arrival times.

Every request keeps its measured prompt and output length (`max_tokens` = the tokens it really
produced, with `ignore_eos`, so the simulated answer is exactly as long). Requests of one prefix
group share their first `num_prefix_tokens` token ids (a `SyntheticPrompt` segment), so the prefix
cache can hit on them as the real engine's did; the rest of each prompt is unique to the request.
"""
from __future__ import annotations

import pandas as pd

from policies import Request
from fidelity.synthetic_prompt import SyntheticPrompt

PREFIX_KEY = 5_000_000  # segment keys: prefix group g -> PREFIX_KEY + g; request i's own text -> i


class ReplayWorkload:
    """The requests of a `RealRun.requests` table (arrival_time, lengths, prefix group) as a Workload."""

    def __init__(self, requests: pd.DataFrame, time_offset: float = 0.0) -> None:
        missing = [c for c in ("arrival_time", "num_prompt_tokens", "num_output_tokens") if c not in requests]
        if missing:
            raise ValueError(f"requests: missing columns {missing}")
        if not len(requests):
            raise ValueError("requests: the run has no per-request rows to replay")
        self.requests = requests.reset_index(drop=True)
        self.time_offset = float(time_offset)

    def start(self) -> list[Request]:
        out = []
        has_prefix = "prefix_group" in self.requests and "num_prefix_tokens" in self.requests
        for i, row in enumerate(self.requests.itertuples(index=False)):
            n_prompt = int(row.num_prompt_tokens)
            n_prefix = int(row.num_prefix_tokens) if has_prefix and int(row.prefix_group) >= 0 else 0
            n_prefix = min(n_prefix, n_prompt)
            segments = [(PREFIX_KEY + int(row.prefix_group), n_prefix)] if n_prefix else []
            segments.append((i, n_prompt - n_prefix))
            req_id = row.req_id if "req_id" in self.requests else i
            out.append(Request(req_id, float(row.arrival_time) + self.time_offset, n_prompt,
                               max(1, int(row.num_output_tokens)), prompt_token_ids=SyntheticPrompt(segments),
                               ignore_eos=True))
        return out

    def on_finish(self, request: Request, now: float) -> list[Request]:
        return []

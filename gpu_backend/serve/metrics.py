"""Prometheus metrics of the server, in the text exposition format (written here, no dependency).

Names follow vLLM's (`vllm:` -> `servesim:`) so existing dashboards and scrapers read them:
gauges of running/waiting requests and KV usage are read from the engine at scrape time; counters
and the TTFT / inter-token / end-to-end histograms are fed by the server as tokens stream out.
Observations come from the engine thread and the event loop at once, hence the lock.
"""
from __future__ import annotations

import bisect
import math
import threading

# vLLM's buckets (seconds): fine at the low end for decode gaps, long tail for queueing
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


def _fmt(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


class Histogram:
    """Cumulative-bucket histogram (Prometheus semantics: `le` buckets, `_sum`, `_count`)."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        self.name, self.help = name, help_text
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)  # last slot: above every bucket (+Inf only)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for le, n in zip(self.buckets + (math.inf,), self.counts):
            running += n
            lines.append(f'{self.name}_bucket{{le="{_fmt(le)}"}} {running}')
        lines += [f"{self.name}_sum {self.sum!r}", f"{self.name}_count {self.count}"]
        return lines


class ServerMetrics:
    """Everything /metrics shows: server-side counters and histograms plus the engine's gauges."""

    PREFIX = "servesim:"

    def __init__(self) -> None:
        p = self.PREFIX
        self._lock = threading.Lock()
        self.ttft = Histogram(f"{p}time_to_first_token_seconds", "Time to first token (s).", TTFT_BUCKETS)
        self.itl = Histogram(f"{p}inter_token_latency_seconds", "Gap between consecutive output tokens (s).", ITL_BUCKETS)
        self.e2e = Histogram(f"{p}e2e_request_latency_seconds", "Arrival to last token (s).", E2E_BUCKETS)
        self.finished: dict[str, int] = {}  # finish reason -> count
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_rejected = {"queue_full": 0, "bad_request": 0}

    # --- observations (any thread) ------------------------------------------------------------
    def observe_first_token(self, ttft_s: float) -> None:
        with self._lock:
            self.ttft.observe(ttft_s)

    def observe_tokens(self, num_tokens: int, itl_s: float | None) -> None:
        """`num_tokens` new output tokens; `itl_s` the gap since the previous one (None for the first)."""
        with self._lock:
            self.num_generation_tokens += num_tokens
            if itl_s is not None:
                self.itl.observe(itl_s)

    def observe_finished(self, reason: str, num_prompt_tokens: int, e2e_s: float | None) -> None:
        with self._lock:
            self.finished[reason] = self.finished.get(reason, 0) + 1
            self.num_prompt_tokens += num_prompt_tokens
            if e2e_s is not None:
                self.e2e.observe(e2e_s)

    def observe_refused(self, why: str) -> None:
        with self._lock:
            self.num_rejected[why] = self.num_rejected.get(why, 0) + 1

    # --- exposition ---------------------------------------------------------------------------
    def render(self, gauges: dict[str, float]) -> str:
        """The exposition text; `gauges` maps name (without prefix) -> (value) read from the engine now."""
        p = self.PREFIX
        lines: list[str] = []
        help_gauge = {
            "num_requests_running": "Requests in the running batch.",
            "num_requests_waiting": "Requests waiting to be scheduled (including not yet handed to the engine).",
            "num_requests_swapped": "Requests whose KV cache is swapped out to CPU memory.",
            "kv_cache_usage_perc": "Fraction of GPU KV blocks in use (1 = full).",
            "num_kv_blocks_used": "GPU KV blocks in use.",
            "num_kv_blocks_total": "GPU KV blocks in the cache.",
            "num_requests_in_flight": "Requests the server has accepted and not yet finished.",
            "num_requests_pending": "Accepted requests without a first token yet (what serve.max_num_waiting bounds).",
        }
        for name, value in gauges.items():
            if name == "num_preemptions_total":
                continue
            lines += [f"# HELP {p}{name} {help_gauge.get(name, name)}", f"# TYPE {p}{name} gauge",
                      f"{p}{name} {_fmt(value)}"]
        with self._lock:
            lines += [f"# HELP {p}num_preemptions_total Preemptions (recompute or swap) so far.",
                      f"# TYPE {p}num_preemptions_total counter",
                      f"{p}num_preemptions_total {_fmt(gauges.get('num_preemptions_total', 0))}"]
            lines += [f"# HELP {p}request_success_total Finished requests by finish reason.",
                      f"# TYPE {p}request_success_total counter"]
            for reason in sorted(set(self.finished) | {"stop", "length", "abort"}):
                lines.append(f'{p}request_success_total{{finished_reason="{reason}"}} {self.finished.get(reason, 0)}')
            lines += [f"# HELP {p}request_refused_total Requests refused before reaching the engine, by cause.",
                      f"# TYPE {p}request_refused_total counter"]
            for why in sorted(self.num_rejected):
                lines.append(f'{p}request_refused_total{{reason="{why}"}} {self.num_rejected[why]}')
            lines += [f"# HELP {p}prompt_tokens_total Prompt tokens of finished requests.",
                      f"# TYPE {p}prompt_tokens_total counter", f"{p}prompt_tokens_total {self.num_prompt_tokens}",
                      f"# HELP {p}generation_tokens_total Output tokens streamed.",
                      f"# TYPE {p}generation_tokens_total counter",
                      f"{p}generation_tokens_total {self.num_generation_tokens}"]
            for hist in (self.ttft, self.itl, self.e2e):
                lines += hist.render()
        return "\n".join(lines) + "\n"


def parse_metrics(text: str) -> dict[str, float]:
    """Samples of an exposition text as {'name{labels}': value} (for tests and the benchmark client)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out

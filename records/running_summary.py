"""`RunningSummary`: `records.metrics.summarize` computed batch by batch, as a streamed run goes.

A streamed run (`records.stream.StreamingRecorder`) hands it each batch of finished requests (the
columns of `records.results.request_columns`, plus the batch's pooled inter-token gaps) and each
batch of steps (`steps_columns`), then drops them. It keeps only counts, sums, extremes and one
`records.sketch.QuantileSketch` per latency metric, so its memory does not grow with the run,
and `summary()` returns the dict `summarize` returns, key for key and with the same definitions.

Whoever adds a summary entry to `summarize` adds it here too (tests/sim/test_streaming.py compares
the two summaries key by key over many layouts). Against `summarize` on the same run's tables: counts, token sums, extremes, durations and
throughputs are equal; means (and time-weighted means) are equal to float rounding (sums taken
batch by batch, in another order); percentiles are equal while each metric has at most
`exact_limit` values and within the sketch's stated relative error past it
(tests/records/test_running_summary.py compares the two).
"""
from __future__ import annotations

import math

import numpy as np

from records.metrics import (COST_KEYS, OFFLOAD_STEP_COLUMNS, SPEC_COLUMNS, SLOConfig, add_reject_kinds,
                             offload_totals, rejected_reasons, speculative_totals, ttft_parts_of_sums)
from records.results import COMPLETED_REASONS
from records.saturation import saturation
from records.sketch import DEFAULT_EXACT_LIMIT, DEFAULT_RELATIVE_ACCURACY, QuantileSketch

LATENCY_METRICS = ("ttft_s", "tpot_s", "e2e_s", "queue_s")


class RunningSummary:
    """Running aggregates of one run's requests and steps; `summary()` at any point (usually the end)."""

    def __init__(self, slo: SLOConfig | None = None, exact_limit: int = DEFAULT_EXACT_LIMIT,
                 relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        self.slo = slo
        sketch = lambda: QuantileSketch(exact_limit, relative_accuracy)  # noqa: E731
        self.sketches = {name: sketch() for name in LATENCY_METRICS + ("itl_s", "step_time_s")}
        self.num_requests = 0
        self.num_finished = 0
        self.reasons: dict[str, int] = {}
        self.reject_kinds: dict[str, list] = {}  # records.metrics.add_reject_kinds
        self.first_arrival = math.inf
        self.last_finish = -math.inf
        self.out_tokens = self.in_tokens = self.prompt_tokens_all = self.cached_tokens = 0
        self.cpu_cached_tokens = 0  # the KV offload tier's (records.metrics.offload_summary)
        self.offload = dict.fromkeys(OFFLOAD_STEP_COLUMNS, 0)
        self.spec = dict.fromkeys(SPEC_COLUMNS, 0)  # speculative decoding (records.metrics.speculative_totals)
        self.num_preemptions = self.num_swaps = self.num_recomputes = 0
        self.num_good = 0
        self.to_schedule_s = self.to_first_token_s = 0.0  # sums over finished requests (ttft_parts)
        self.num_steps = 0
        self.step_end = -math.inf
        self.computed_tokens = self.padding_tokens = 0
        self.busy_s = 0.0  # sum of step durations (the time weights)
        self.weighted = {"kv_usage": 0.0, "num_waiting": 0.0, "num_running": 0.0}
        self.maxima: dict[str, float | int | None] = {"kv_usage": None, "num_waiting": None, "num_running": None}
        # the saturation check (records.saturation) fits the whole run: arrival and first-token times
        # of every request that queued (not rejected), with its submission number for the order of
        # the in-memory table: 32 bytes a request, the one part that grows with the run
        self._queued: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    # --- batches ----------------------------------------------------------------------------------
    def add_requests(self, columns: dict, itls: np.ndarray, order: np.ndarray | None = None) -> None:
        """A batch of request rows (`records.results.request_columns`), its pooled token gaps and
        each request's submission number (`order`; default: the batches' own order)."""
        n = len(columns["req_id"])
        if n == 0:
            return
        if order is None:
            order = np.arange(self.num_requests, self.num_requests + n)
        reasons = np.asarray(columns["finish_reason"], dtype=object).astype(str)
        for reason, count in zip(*np.unique(reasons, return_counts=True)):
            self.reasons[str(reason)] = self.reasons.get(str(reason), 0) + int(count)
        rejected = reasons == "rejected"
        if "reject_reason" in columns and rejected.any():
            add_reject_kinds(self.reject_kinds, np.asarray(columns["reject_reason"], dtype=object)[rejected],
                             np.asarray(order)[rejected].tolist())
        done = np.isin(reasons, COMPLETED_REASONS)
        self.num_requests += n
        self.num_finished += int(done.sum())
        arrival = np.asarray(columns["arrival_time"], dtype=float)
        self.first_arrival = min(self.first_arrival, float(arrival.min()))
        finish = np.asarray(columns["finish_time"], dtype=float)
        if np.isfinite(finish).any():
            self.last_finish = max(self.last_finish, float(np.nanmax(finish)))
        prompt = np.asarray(columns["num_prompt_tokens"], dtype=np.int64)
        output = np.asarray(columns["num_output_tokens"], dtype=np.int64)
        self.out_tokens += int(output[done].sum())
        self.in_tokens += int(prompt[done].sum())
        # the prefix cache's denominator: requests that looked it up (scheduled at least once)
        self.prompt_tokens_all += int(prompt[np.isfinite(np.asarray(columns["first_scheduled_time"], dtype=float))].sum())
        self.cached_tokens += int(np.asarray(columns["num_cached_tokens"], dtype=np.int64).sum())
        if "num_cpu_cached_tokens" in columns:
            self.cpu_cached_tokens += int(np.asarray(columns["num_cpu_cached_tokens"], dtype=np.int64).sum())
        for name in SPEC_COLUMNS:
            if name in columns:
                self.spec[name] += int(np.asarray(columns[name], dtype=np.int64).sum())
        self.num_preemptions += int(np.asarray(columns["num_preemptions"], dtype=np.int64).sum())
        self.num_swaps += int(np.asarray(columns["num_swaps"], dtype=np.int64).sum())
        self.num_recomputes += int(np.asarray(columns["num_recomputes"], dtype=np.int64).sum())
        latency = {name: np.asarray(columns[name], dtype=float) for name in LATENCY_METRICS}
        for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
            self.sketches[name].add(latency[name][done])
        scheduled = np.asarray(columns["first_scheduled_time"], dtype=float)[done]
        self.to_schedule_s += float(np.nansum(scheduled - arrival[done]))
        self.to_first_token_s += float(np.nansum(np.asarray(columns["first_token_time"], dtype=float)[done] - scheduled))
        self.sketches["itl_s"].add(itls)
        good = done.copy()  # records.metrics.meets_slo, on arrays (NaN compares False, as in pandas)
        slo = self.slo
        if slo is not None:
            if slo.ttft_s is not None:
                good &= latency["ttft_s"] <= slo.ttft_s
            if slo.tpot_s is not None:
                good &= np.isnan(latency["tpot_s"]) | (latency["tpot_s"] <= slo.tpot_s)
            if slo.e2e_s is not None:
                good &= latency["e2e_s"] <= slo.e2e_s
        self.num_good += int(good.sum())
        queued = ~rejected
        self._queued.append((np.asarray(order)[queued], arrival[queued],
                             np.asarray(columns["first_token_time"], dtype=float)[queued],
                             np.asarray(columns["priority"], dtype=np.int64)[queued]))

    def add_steps(self, columns: dict) -> None:
        """A batch of step rows (`records.results.steps_columns`)."""
        duration = np.asarray(columns["duration"], dtype=float)
        if duration.size == 0:
            return
        self.num_steps += int(duration.size)
        self.step_end = max(self.step_end, float((np.asarray(columns["start"], dtype=float) + duration).max()))
        padding = int(np.asarray(columns["num_padding_tokens"]).sum())
        self.padding_tokens += padding
        self.computed_tokens += int(np.asarray(columns["num_prefill_tokens"]).sum()) \
            + int(np.asarray(columns["num_decode_tokens"]).sum()) + padding
        self.busy_s += float(duration.sum())
        for name in self.weighted:
            values = np.asarray(columns[name])
            self.weighted[name] += float(np.multiply(values, duration).sum())
            top = values.max().item()
            self.maxima[name] = top if self.maxima[name] is None else max(self.maxima[name], top)
        self.sketches["step_time_s"].add(duration)
        for name in OFFLOAD_STEP_COLUMNS:
            if name in columns:
                self.offload[name] += int(np.asarray(columns[name]).sum())

    # --- the result -------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """True while every percentile is exact (no sketch has passed its exact limit)."""
        return all(s.exact for s in self.sketches.values())

    def _time_weighted(self, name: str) -> float | None:
        if self.num_steps == 0 or self.busy_s <= 0:
            return None
        return self.weighted[name] / self.busy_s

    def _saturation(self, end: float) -> dict:
        """records.metrics._saturation, on the requests in submission order."""
        if self._queued:
            order, arrival, first, priority = (np.concatenate(parts) for parts in zip(*self._queued))
            by_submission = np.argsort(order, kind="stable")
            sat = saturation(arrival[by_submission], first[by_submission], end, priority=priority[by_submission])
        else:
            sat = saturation(np.empty(0), np.empty(0), end)
        return {"saturated": sat["saturated"], "offered_rate": sat["offered_rate_per_s"],
                "sustainable_rate": sat["sustainable_rate_per_s"], "backlog_growth": sat["backlog_growth"]}

    def summary(self) -> dict:
        """The summary dict of `records.metrics.summarize` (same keys, same order)."""
        n, slo = self.num_requests, self.slo
        if n:
            start = self.first_arrival
            end = max(self.last_finish, start)
            if self.num_steps:
                end = max(end, self.step_end)
            duration = end - start
        else:
            duration = 0.0
        per_s = (lambda x: float(x) / duration) if duration > 0 else (lambda x: 0.0)
        itl = self.sketches["itl_s"].stats()
        num_finished = self.num_finished
        stats = (lambda name: self.sketches[name].stats() if num_finished else None)
        maxima = self.maxima
        summary = {
            "num_requests": n,
            "num_finished": num_finished,
            "num_rejected": self.reasons.get("rejected", 0),
            "rejected_reasons": rejected_reasons(self.reject_kinds),
            "num_aborted": self.reasons.get("aborted", 0),
            "num_timed_out": self.reasons.get("timed_out", 0),
            "num_unfinished": self.reasons.get("unfinished", 0),
            "duration_s": duration,
            "throughput": {
                "requests_per_s": per_s(num_finished),
                "output_tokens_per_s": per_s(self.out_tokens),
                "total_tokens_per_s": per_s(self.out_tokens + self.in_tokens),
            },
            "ttft_s": stats("ttft_s"),
            "tpot_s": stats("tpot_s"),
            "itl_s": itl,
            "e2e_s": stats("e2e_s"),
            "queue_s": stats("queue_s"),  # over the successes, as TTFT and its parts
            "ttft_parts": ttft_parts_of_sums(self.to_schedule_s, self.to_first_token_s, self.in_tokens, num_finished),
            "max_stall_s": itl["max"] if itl else None,
            "num_preemptions": self.num_preemptions,
            "num_swaps": self.num_swaps,
            "num_recomputes": self.num_recomputes,
            "goodput_requests_per_s": per_s(self.num_good),
            "slo_attainment": self.num_good / n if n else None,  # of every request (`records.metrics`)
            "slo": None if slo is None or slo.is_empty else {k: v for k, v in vars(slo).items() if v is not None},
            "num_steps": self.num_steps,
            "padding_fraction": float(self.padding_tokens / self.computed_tokens) if self.computed_tokens else 0.0,
            "prefix_cache_hit_rate": float(self.cached_tokens / self.prompt_tokens_all) if self.prompt_tokens_all
            else 0.0,
            "kv_usage": {"mean": self._time_weighted("kv_usage"),
                         "max": float(maxima["kv_usage"]) if self.num_steps else None},
            "num_waiting": {"mean": self._time_weighted("num_waiting"),
                            "max": int(maxima["num_waiting"]) if self.num_steps else None},
            "num_running": {"mean": self._time_weighted("num_running"),
                            "max": int(maxima["num_running"]) if self.num_steps else None},
            "step_time_s": self.sketches["step_time_s"].stats() if self.num_steps else None,
            **offload_totals(self.cpu_cached_tokens, self.offload, self.prompt_tokens_all),
            **speculative_totals(self.spec),
        }
        summary.update(self._saturation(start + duration if n else 0.0))
        summary.update(dict.fromkeys(COST_KEYS))  # as summarize: filled by the simulator's cost meter
        return summary

"""`summarize()`: the summary dict of a run, with vLLM `bench serve` definitions (DESIGN.md).

TTFT = first token - arrival; E2E = last token - arrival; TPOT = (E2E - TTFT) / (output tokens - 1)
for requests with more than one output token; ITL = every gap between consecutive tokens, pooled;
max stall = the largest ITL. Latency metrics count completed requests (finish reason length or stop).
Throughput divides by the run's duration: first arrival to the later of the last request's end
(whatever its finish reason) and the last step's end (docs/formats.md). Goodput counts completed
requests meeting every SLO given (no SLO given: every completed request counts). Step-weighted
figures (KV usage, queue lengths) weight each step by its duration.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from policies import ConfigError
from policies.config import check_number
from records.results import COMPLETED_REASONS
from records.saturation import saturation
from records.display import ms, number, percent

if TYPE_CHECKING:  # pandas on demand: a streamed run (records.stream) never builds a DataFrame
    import pandas as pd

PERCENTILES = (50, 90, 99)
COST_KEYS = ("gpu_hours", "cost_usd", "cost_per_million_output_tokens", "energy_j", "energy_j_per_output_token",
             "mean_power_w")


@dataclass(frozen=True)
class SLOConfig:
    """Latency targets in seconds (None = no target). A request meets the SLO if it meets every one."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            value = getattr(self, name)
            if value is not None:
                check_number(f"slo.{name}", value, 0.0, strict_min=True, hint="leave it out for no target")

    @property
    def is_empty(self) -> bool:
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: how many kinds of rejection a summary names (the most common first)
REJECT_KINDS_SHOWN = 3


def add_reject_kinds(kinds: dict[str, list], reasons: Iterable[str], orders: Iterable[int] | None = None
                     ) -> dict[str, list]:
    """Count rejection reasons by kind into `kinds` (kind -> [count, example, its order]): a kind is
    the reason with its numbers left out, so "prompt (4631 tokens) + ..." and "prompt (5102 tokens)
    + ..." are one kind. The example is the reason of the earliest request submitted (`orders`: the
    requests' submission numbers; default the order given), so that a summary streamed in finish
    order names the same example as one read from the whole table."""
    for k, reason in enumerate(reasons) if orders is None else zip(orders, reasons):
        reason = reason if isinstance(reason, str) else ""  # none given (None, or NaN in a table)
        kind = _NUMBER.sub("N", reason)
        entry = kinds.setdefault(kind, [0, reason, k])
        entry[0] += 1
        if k < entry[2]:
            entry[1], entry[2] = reason, k
    return kinds


def rejected_reasons(kinds: dict[str, list]) -> list[dict]:
    """The most common kinds of rejection, each {"kind", "count", "example"} (`add_reject_kinds`)."""
    top = sorted(kinds.items(), key=lambda kv: (-kv[1][0], kv[0]))[:REJECT_KINDS_SHOWN]
    return [{"kind": kind, "count": int(count), "example": example} for kind, (count, example, _) in top]


def rejection_example(kind: dict) -> str:
    """One kind of `rejected_reasons` as its example, saying when more share it."""
    return kind["example"] + (" (and the like)" if kind["count"] > 1 else "")


def stats(values: Iterable[float]) -> dict | None:
    """{mean, p50, p90, p99, max} of the finite values (None when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    out = {"mean": float(v.mean())}
    for p, q in zip(PERCENTILES, np.percentile(v, PERCENTILES)):
        out[f"p{p}"] = float(q)
    out["max"] = float(v.max())
    return out


def meets_slo(requests: "pd.DataFrame", slo: SLOConfig | None) -> "pd.Series":
    """Boolean per row: completed and within every given target (a 1-token answer has no TPOT to miss)."""
    ok = requests["finish_reason"].isin(COMPLETED_REASONS)
    if slo is None:
        return ok
    if slo.ttft_s is not None:
        ok &= requests["ttft_s"] <= slo.ttft_s
    if slo.tpot_s is not None:
        ok &= requests["tpot_s"].isna() | (requests["tpot_s"] <= slo.tpot_s)
    if slo.e2e_s is not None:
        ok &= requests["e2e_s"] <= slo.e2e_s
    return ok


def completed_output_tokens(requests: "pd.DataFrame") -> int:
    """Output tokens of the requests that produced their whole answer (what throughput counts)."""
    if len(requests) == 0:
        return 0
    return int(requests.loc[requests["finish_reason"].isin(COMPLETED_REASONS), "num_output_tokens"].sum())


def _time_weighted(steps: "pd.DataFrame", column: str) -> float | None:
    if len(steps) == 0 or steps["duration"].sum() <= 0:
        return None
    return float(np.average(steps[column], weights=steps["duration"]))


def summarize(requests: "pd.DataFrame", steps: "pd.DataFrame", itls: np.ndarray | None = None,
              slo: SLOConfig | None = None) -> dict:
    """The summary of one run from its two tables.

    `itls` is the pooled inter-token latencies (`records.results.pooled_itls(requests)`); the table
    alone keeps only each request's largest gap, so without it `itl_s` is None and the max stall
    falls back to the largest `max_itl_s`.
    """
    import pandas as pd

    if slo is not None and not isinstance(slo, SLOConfig):
        raise ConfigError(f"slo: expected an SLOConfig, got {type(slo).__name__}")
    n = len(requests)
    reasons = requests["finish_reason"] if n else pd.Series([], dtype=object)
    done = requests[reasons.isin(COMPLETED_REASONS)] if n else requests
    num_finished = len(done)
    if n:
        start = float(requests["arrival_time"].min())
        end = float(np.nanmax(np.r_[requests["finish_time"].to_numpy(dtype=float), start]))
        if len(steps):
            end = max(end, float((steps["start"] + steps["duration"]).max()))
        duration = end - start
    else:
        duration = 0.0
    per_s = (lambda x: float(x) / duration) if duration > 0 else (lambda x: 0.0)
    out_tokens = int(done["num_output_tokens"].sum()) if num_finished else 0
    in_tokens = int(done["num_prompt_tokens"].sum()) if num_finished else 0

    if itls is None:
        itl_stats = None
        max_stall = float(done["max_itl_s"].max()) if num_finished and done["max_itl_s"].notna().any() else None
    else:
        itl_stats = stats(itls)
        max_stall = itl_stats["max"] if itl_stats else None

    num_good = int(meets_slo(requests, slo).sum()) if n else 0
    computed = steps["num_prefill_tokens"].sum() + steps["num_decode_tokens"].sum() + steps["num_padding_tokens"].sum() \
        if len(steps) else 0
    # prompt tokens of the requests that looked the prefix cache up (scheduled at least once): a
    # rejected request, or one that never left the queue, never queried it
    prompt_all = requests.loc[requests["first_scheduled_time"].notna(), "num_prompt_tokens"].sum() if n else 0
    summary = {
        "num_requests": n,
        "num_finished": num_finished,
        "num_rejected": int((reasons == "rejected").sum()),
        "rejected_reasons": rejected_reasons(add_reject_kinds(
            {}, requests.loc[reasons == "rejected", "reject_reason"] if n and "reject_reason" in requests else ())),
        "num_aborted": int((reasons == "aborted").sum()),
        "num_timed_out": int((reasons == "timed_out").sum()),
        "num_unfinished": int((reasons == "unfinished").sum()),
        "duration_s": duration,
        "throughput": {
            "requests_per_s": per_s(num_finished),
            "output_tokens_per_s": per_s(out_tokens),
            "total_tokens_per_s": per_s(out_tokens + in_tokens),
        },
        "ttft_s": stats(done["ttft_s"]) if num_finished else None,
        "tpot_s": stats(done["tpot_s"]) if num_finished else None,
        "itl_s": itl_stats,
        "e2e_s": stats(done["e2e_s"]) if num_finished else None,
        "queue_s": stats(done["queue_s"]) if num_finished else None,  # over the successes, as TTFT and its parts
        "ttft_parts": ttft_parts_of_sums(*_ttft_sums(done), num_finished),
        "max_stall_s": max_stall,
        "num_preemptions": int(requests["num_preemptions"].sum()) if n else 0,
        "num_swaps": int(requests["num_swaps"].sum()) if n else 0,
        "num_recomputes": int(requests["num_recomputes"].sum()) if n else 0,
        "goodput_requests_per_s": per_s(num_good),
        # of every request, as DistServe defines it: one rejected, timed out or aborted has missed
        "slo_attainment": num_good / n if n else None,
        "slo": None if slo is None or slo.is_empty else {k: v for k, v in vars(slo).items() if v is not None},
        "num_steps": len(steps),
        "padding_fraction": float(steps["num_padding_tokens"].sum() / computed) if computed else 0.0,
        "prefix_cache_hit_rate": float(requests["num_cached_tokens"].sum() / prompt_all) if prompt_all else 0.0,
        **offload_summary(requests, steps, prompt_all),
        **speculative_totals({name: int(requests[name].sum()) if name in requests else 0 for name in SPEC_COLUMNS}),
        "kv_usage": {"mean": _time_weighted(steps, "kv_usage"),
                     "max": float(steps["kv_usage"].max()) if len(steps) else None},
        "num_waiting": {"mean": _time_weighted(steps, "num_waiting"),
                        "max": int(steps["num_waiting"].max()) if len(steps) else None},
        "num_running": {"mean": _time_weighted(steps, "num_running"),
                        "max": int(steps["num_running"].max()) if len(steps) else None},
        "step_time_s": stats(steps["duration"]) if len(steps) else None,
    }
    summary.update(_saturation(requests, reasons, start + duration if n else 0.0))
    # what the run cost: the simulator knows the hardware and fills these (sim.cost); an engine run does not
    summary.update(dict.fromkeys(COST_KEYS))
    return summary


TTFT_PARTS = ("client_send_s", "api_server_s", "engine_queue_s", "prefill_steps_s", "first_chunk_s")


def _ttft_sums(done: "pd.DataFrame") -> tuple[float, float, float]:
    """Over finished requests: sums of (first schedule - arrival), (first token - first schedule), prompt tokens."""
    if not len(done):
        return 0.0, 0.0, 0.0
    arrival = done["arrival_time"].to_numpy(dtype=float)
    scheduled = done["first_scheduled_time"].to_numpy(dtype=float)
    first = done["first_token_time"].to_numpy(dtype=float)
    return (float(np.nansum(scheduled - arrival)), float(np.nansum(first - scheduled)),
            float(done["num_prompt_tokens"].sum()))


def ttft_parts_of_sums(to_schedule: float, to_first_token: float, prompt_tokens: float, num_finished: int) -> dict | None:
    """The mean TTFT as named parts (`TTFT_PARTS`), as the request times alone tell them: until the
    first schedule is engine queue, from it to the first token the prefill steps; a front end that
    knows its ingress and egress (`sim.frontend.FrontendConfig.split_ttft_parts`) moves them to the
    API server and first-chunk parts. `mean_prompt_tokens` beside them (what an ingress scales with)."""
    if not num_finished:
        return None
    return {"client_send_s": 0.0, "api_server_s": 0.0, "engine_queue_s": to_schedule / num_finished,
            "prefill_steps_s": to_first_token / num_finished, "first_chunk_s": 0.0,
            "mean_prompt_tokens": prompt_tokens / num_finished}


def _saturation(requests: pd.DataFrame, reasons: pd.Series, end: float) -> dict:
    """`saturated`, `offered_rate`, `sustainable_rate` (req/s), `backlog_growth` (records.saturation)."""
    queued = requests[reasons != "rejected"] if len(requests) else requests
    if len(queued) == 0:
        sat = saturation(np.empty(0), np.empty(0), end)
    else:
        sat = saturation(queued["arrival_time"].to_numpy(dtype=float),
                         queued["first_token_time"].to_numpy(dtype=float), end,
                         priority=queued["priority"].to_numpy() if "priority" in queued else None)
    return {"saturated": sat["saturated"], "offered_rate": sat["offered_rate_per_s"],
            "sustainable_rate": sat["sustainable_rate_per_s"], "backlog_growth": sat["backlog_growth"]}


OFFLOAD_STEP_COLUMNS = ("num_offload_load_blocks", "num_offload_store_blocks", "offload_load_bytes",
                        "offload_store_bytes")


def offload_summary(requests: pd.DataFrame, steps: pd.DataFrame, prompt_all) -> dict:
    """The KV offload tier's part of the summary (`offload_totals`) from the two tables."""
    if "num_offload_load_blocks" not in steps or "num_cpu_cached_tokens" not in requests:
        return {}
    return offload_totals(int(requests["num_cpu_cached_tokens"].sum()),
                          {name: int(steps[name].sum()) for name in OFFLOAD_STEP_COLUMNS}, prompt_all)


def offload_totals(cpu_cached_tokens: int, sums: dict, prompt_all) -> dict:
    """The share of prompt tokens the KV offload tier's loads served (`cpu_prefix_cache_hit_rate`; the
    GPU tier's is `prefix_cache_hit_rate`) and the blocks and bytes moved each way (`offload`), from
    the steps' offload columns summed (`sums`). Empty for a run that moved nothing to or from a tier."""
    if not cpu_cached_tokens and not sums["num_offload_store_blocks"] and not sums["num_offload_load_blocks"]:
        return {}
    return {
        "cpu_prefix_cache_hit_rate": float(cpu_cached_tokens / prompt_all) if prompt_all else 0.0,
        "offload": {
            "num_load_blocks": sums["num_offload_load_blocks"], "num_store_blocks": sums["num_offload_store_blocks"],
            "load_bytes": sums["offload_load_bytes"], "store_bytes": sums["offload_store_bytes"],
        },
    }


SPEC_COLUMNS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")  # requests table, speculative decoding


def speculative_totals(sums: dict) -> dict:
    """Speculative decoding's part of the summary from the requests' `SPEC_COLUMNS` summed: the
    `acceptance_rate` (accepted / verified draft tokens), `mean_accepted_tokens` (accepted drafts
    per verify step, vLLM's num_accepted_tokens / num_drafts) and `speculative` {the three sums,
    `mean_acceptance_length`: tokens a verify step emits, 1 + mean_accepted_tokens}. Empty for a run
    that verified no draft."""
    drafts = sums["num_drafts"]
    if not drafts:
        return {}
    accepted, verified = sums["num_accepted_tokens"], sums["num_draft_tokens"]
    mean = accepted / drafts
    return {
        "acceptance_rate": accepted / verified if verified else 0.0,
        "mean_accepted_tokens": mean,
        "speculative": {"num_drafts": drafts, "num_draft_tokens": verified, "num_accepted_tokens": accepted,
                        "mean_acceptance_length": 1.0 + mean},
    }


def format_summary(summary: dict, clock: str = "simulated") -> str:
    """A small human-readable table of the headline figures (the CLI prints it; `records.display`);
    `clock` says whose time the duration is ("measured" for a run of the real engine)."""
    def cell(block: dict | None, key: str) -> str:
        return f"{ms(block.get(key)) if block else '-':>10}"

    tp = summary["throughput"]
    lines = [
        f"requests       {number(summary['num_requests'])} ({number(summary['num_finished'])} finished, "
        f"{number(summary['num_rejected'])} rejected, {number(summary.get('num_aborted', 0))} aborted"
        + (f", {number(summary['num_timed_out'])} timed out" if summary.get("num_timed_out") else "") + ")",
        *(f"rejected       {number(r['count'])}: {rejection_example(r)}"
          for r in summary.get("rejected_reasons") or ()),
        f"duration       {number(summary['duration_s'])} s {clock}, {number(summary['num_steps'])} steps",
        f"throughput     {number(tp['requests_per_s'])} req/s, {number(tp['output_tokens_per_s'])} output tok/s, "
        f"{number(tp['total_tokens_per_s'])} total tok/s",
        f"goodput        {number(summary['goodput_requests_per_s'])} req/s"
        + (f" (SLO {summary['slo']}, attainment {percent(summary['slo_attainment'])})"
           if summary.get("slo") and summary.get("slo_attainment") is not None else ""),
        "",
        f"{'latency (ms)':14} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10} {'max':>10}"
        + ("   (saturated run: a growing backlog, not a steady state)" if summary.get("saturated") else ""),
    ]
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"),
                       ("queue_s", "queue")):
        block = summary.get(key)
        lines.append(f"{label:14} " + " ".join(cell(block, k) for k in ("mean", "p50", "p90", "p99", "max")))
    parts = summary.get("ttft_parts")
    if parts:
        names = (("client_send_s", "send"), ("api_server_s", "API server"), ("engine_queue_s", "queue"),
                 ("prefill_steps_s", "prefill steps"), ("first_chunk_s", "first chunk"))
        edges = ("client_send_s", "api_server_s", "first_chunk_s")
        if any(parts[k] for k in edges):
            lines.append("TTFT parts     " + " + ".join(f"{label} {ms(parts[k])}" for k, label in names) + " ms (means)")
        else:  # no front end simulated: printing its parts as 0 ms would read as measured zeros
            lines.append(f"TTFT parts     queue {ms(parts['engine_queue_s'])} + prefill steps "
                         f"{ms(parts['prefill_steps_s'])} ms (means; send, API server, first chunk: "
                         "no [frontend] simulated)")
    stall = summary["max_stall_s"]
    kv = summary["kv_usage"]
    lines += [
        "",
        f"max stall      {ms(stall)} ms" if stall is not None else "max stall      -",
        f"preemptions    {number(summary['num_preemptions'])} ({number(summary['num_swaps'])} swaps, "
        f"{number(summary['num_recomputes'])} recomputes)",
        f"KV usage       mean {percent(kv['mean'])}, max {percent(kv['max'])}" if kv["mean"] is not None
        else "KV usage       -",
        f"padding        {percent(summary['padding_fraction'])} of computed tokens",
        f"prefix cache   {percent(summary['prefix_cache_hit_rate'])} of prompt tokens hit",
    ]
    if "offload" in summary:
        o = summary["offload"]
        lines.append(f"CPU KV tier    {summary['cpu_prefix_cache_hit_rate']:.1%} of prompt tokens loaded; "
                     f"{o['load_bytes'] / 2**30:.2f} GiB in, {o['store_bytes'] / 2**30:.2f} GiB out")
    if "speculative" in summary:
        lines.append(f"speculative    {percent(summary['acceptance_rate'])} of drafts accepted; "
                     f"{number(summary['speculative']['mean_acceptance_length'])} tokens per verify step")
    if summary.get("cost_per_million_output_tokens") is not None:
        lines.append(f"cost           ${number(summary['cost_per_million_output_tokens'])} per 1M output tokens "
                     f"({number(summary['gpu_hours'])} GPU-hours, ${number(summary['cost_usd'])})")
    if summary.get("energy_j_per_output_token") is not None:
        lines.append(f"energy         {number(summary['energy_j_per_output_token'])} J per output token "
                     f"(mean {number(summary['mean_power_w'])} W per GPU)")
    scaling = summary.get("autoscaling")
    if scaling:
        lines.append(f"autoscaling    up to {number(scaling['max_replicas_up'])} replicas (mean "
                     f"{number(scaling['mean_replicas_up'])}) on {scaling['metric']} (target "
                     f"{number(scaling['target'], trim=True)}); {number(scaling['num_scale_ups'])} scale-ups, "
                     f"{number(scaling['num_scale_downs'])} scale-downs, "
                     f"{number(scaling['provisioning_delay_s'])} s to provision")
    load = saturation_line(summary)
    if load:
        lines.append(load)
    return "\n".join(lines)


def saturation_line(summary: dict) -> str | None:
    """One line on whether the run kept up with its offered load (None when it cannot tell)."""
    offered = summary.get("offered_rate")
    if offered is None:
        return None
    if not summary.get("saturated"):
        return f"load           kept up with the offered {number(offered)} req/s (queues did not grow)"
    sustainable = summary.get("sustainable_rate")
    about = f"~{number(sustainable)} req/s" if sustainable is not None else "less"
    return (f"SATURATED      offered {number(offered)} req/s, sustains {about}: queues grew through the run, "
            "so the latency figures describe a growing backlog, not a steady state")

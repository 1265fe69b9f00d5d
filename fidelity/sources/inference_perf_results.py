"""What an inference-perf run leaves in its folder: per-request and summary metrics, read with the
client's own definitions (its TPOT and ITL are per streamed chunk: `fidelity.metric_definitions`),
and what its `shared_prefix` profile says of the requests it measured.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fidelity.runs import measured_table
from fidelity.sources.inference_perf import SharedPrefixWorkload
from fidelity.sources.inference_perf_profile import SharedPrefixProfile
from policies import ConfigError
from policies.config import check_number
from records.files import read_json, read_json_object

if TYPE_CHECKING:  # the run readers' tables
    import pandas as pd


def read_inference_perf_requests(path: Path) -> pd.DataFrame:
    """inference-perf's `per_request_lifecycle_metrics.json` (failures dropped).

    Each entry has `start_time`, `end_time` and `error`; `computed_metrics` (TTFT, TPOT, token
    counts) only when the report config asks for them (off by default), so without them the same
    quantities come from `info` as inference-perf computes them: input tokens from
    `info.request_metrics.text.input_tokens` (or the older top-level `info.input_tokens`), output
    tokens from `info.response_metrics.output_tokens`, TTFT = first output token time - start,
    E2E = end - start. TPOT is per token: (last - first output token time) / (output tokens - 1)
    from `info`; with `computed_metrics`, whose TPOT and ITL are per streamed chunk, (E2E - TTFT) /
    (output tokens - 1) (`fidelity.metric_definitions`).
    """
    entries = read_json(path, "inference-perf per-request metrics")
    if not isinstance(entries, list):
        raise ConfigError(f"inference-perf per-request metrics: {path} does not hold a JSON list of per-request "
                          "entries")
    rows = []
    for i, e in enumerate(entries, 1):
        if not isinstance(e, dict) or e.get("error"):
            continue
        try:
            row = _entry_row(e)
        except KeyError as exc:
            raise ConfigError(f"{path}: entry {i} has no {exc.args[0]!r} (a successful entry has start_time, "
                              "end_time and computed_metrics or info)") from None
        except (TypeError, ValueError, AttributeError) as exc:  # a count or time not a number, a section not an object
            raise ConfigError(f"{path}: entry {i}: expected objects of numbers for its times and token counts "
                              f"({exc})") from None
        if row is not None:
            rows.append(row)
    if not rows:
        raise ConfigError(f"{path}: no successful request with token counts (computed_metrics or info)")
    for r in rows:
        if not math.isfinite(r["tpot_s"]) and r["num_output_tokens"] > 1:
            r["tpot_s"] = (r["e2e_s"] - r["ttft_s"]) / (r["num_output_tokens"] - 1)
    return measured_table({k: [r[k] for r in rows] for k in rows[0]}, path)


def _entry_row(e: dict) -> dict | None:
    """One successful entry of `read_inference_perf_requests` as a row, or None where `info` lacks
    its token counts or times (raises KeyError, TypeError or ValueError on a damaged entry)."""
    c = e.get("computed_metrics")
    if c:
        return {
            "arrival_time": float(e["start_time"]), "num_prompt_tokens": int(c["input_tokens"]),
            "num_output_tokens": int(c["output_tokens"]),
            "ttft_s": float(c["time_to_first_token"]) if c.get("time_to_first_token") is not None else math.nan,
            "e2e_s": float(c["request_latency"]),
            "tpot_s": math.nan,  # derived per token by the caller
        }
    info = e.get("info") or {}
    req = info.get("request_metrics") or {}
    n_in = (req.get("text") or {}).get("input_tokens", info.get("input_tokens"))
    resp = info.get("response_metrics") or {}
    n_out = resp.get("output_tokens")
    if n_in is None or n_out is None or e.get("start_time") is None or e.get("end_time") is None:
        return None
    start, times = float(e["start_time"]), resp.get("output_token_times") or []
    ttft = float(times[0]) - start if len(times) > 1 else math.nan
    # first to last token stamp over the tokens (not the stamps: a stream may carry several per token)
    tpot = (float(times[-1]) - float(times[0])) / (int(n_out) - 1) if len(times) > 1 and int(n_out) > 1 else math.nan
    return {"arrival_time": start, "num_prompt_tokens": int(n_in), "num_output_tokens": int(n_out),
            "ttft_s": ttft, "e2e_s": float(e["end_time"]) - start, "tpot_s": tpot}


def read_summary_means(path: Path, requested_output: float | None = None) -> dict[str, float]:
    """Mean TTFT and E2E from inference-perf's `summary_lifecycle_metrics.json` (successes only), and
    the per-token TPOT of the means, (E2E - TTFT) / (n - 1) (the summary's own TPOT is per streamed
    chunk: `fidelity.metric_definitions`). n is `requested_output`, the mean max_tokens the client
    asked for, when given (under ignore_eos the server generates exactly that; the summary's
    output_len counts the re-tokenized text, which can fall well short), else the summary's mean
    output_len. `num_successes` / `num_failures`: the summary's counts, and `achieved_rate_per_s`:
    its sends per second (`load_summary.achieved_rate`), where it has them."""
    data = read_json_object(path, "inference-perf summary")
    ok = _section(path, data, "successes")
    lat = _section(path, ok, "latency", "successes.") or _section(path, data, "latency")
    names = {"ttft_s": "time_to_first_token", "e2e_s": "request_latency"}
    out = {}
    for key, name in names.items():
        if isinstance(lat.get(name), dict) and "mean" in lat[name]:
            check_number(f"inference-perf summary: {path}: latency.{name}.mean", lat[name]["mean"])
            out[key] = float(lat[name]["mean"])
    n = (ok.get("output_len") or {}).get("mean") if isinstance(ok.get("output_len"), dict) else None
    if requested_output is not None:
        n = requested_output
    out["tpot_s"] = math.nan
    if isinstance(n, (int, float)) and n > 1 and "ttft_s" in out and "e2e_s" in out:
        out["tpot_s"] = (out["e2e_s"] - out["ttft_s"]) / (float(n) - 1)
    for key, part in (("num_successes", ok), ("num_failures", data.get("failures") or {})):
        if isinstance(part, dict) and isinstance(part.get("count"), (int, float)):
            out[key] = float(part["count"])  # requests the means are over, and those the client gave up on
    rate = _section(path, data, "load_summary").get("achieved_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        out["achieved_rate_per_s"] = float(rate)
    return out


def read_summary_lengths(path: Path) -> tuple[float, float] | None:
    """(mean prompt, mean output; nan where absent) tokens of inference-perf's successes in its
    `summary_lifecycle_metrics.json` (older summaries keep them at the top), or None where it has no
    mean prompt length."""
    data = read_json_object(path, "inference-perf summary")
    ok = _section(path, data, "successes") or data
    prompt, output = ok.get("prompt_len") or {}, ok.get("output_len") or {}
    if not isinstance(prompt, dict) or prompt.get("mean") is None:
        return None
    out = output.get("mean") if isinstance(output, dict) else None
    check_number(f"inference-perf summary: {path}: prompt_len.mean", prompt["mean"], 0)
    if out is not None:
        check_number(f"inference-perf summary: {path}: output_len.mean", out, 0)
    return float(prompt["mean"]), float(out) if out is not None else math.nan


def _section(path: Path, data: dict, key: str, where: str = "") -> dict:
    """`data[key]` of an inference-perf summary: an object, or {} where absent; anything else is
    refused naming the file and the key."""
    part = data.get(key)
    if part is None:
        return {}
    if not isinstance(part, dict):
        raise ConfigError(f"inference-perf summary: {path}: {where}{key}: expected an object, got {part!r:.60}")
    return part


def requested_output_mean(profile: dict | None) -> float | None:
    """The mean max_tokens a `shared_prefix` profile's requests ask for when the server generates
    exactly that (ignore_eos), over the generator's prompts (sent in turn); None otherwise."""
    sp = shared_prefix_profile(profile)
    if sp is None or not sp.ignore_eos:
        return None
    return float(np.mean([max(1, o) for *_, o in SharedPrefixWorkload(sp).prompts]))


def shared_prefix_profile(profile: dict | None):
    """The run's inference-perf `shared_prefix` profile (`SharedPrefixProfile`), or None."""
    data = (profile or {}).get("data")
    if not (isinstance(data, dict) and data.get("type") == "shared_prefix"):
        return None
    return SharedPrefixProfile.from_dict(profile)


def prefix_from_shared_prefix(requests: pd.DataFrame, profile: dict | None) -> pd.DataFrame:
    """inference-perf `shared_prefix` (single turn): each prompt starts with its group's system
    prompt. Which group a measured request belonged to is not recorded, so requests are dealt to the
    groups in turn (the generator cycles its shuffled prompts over all groups; what the prefix cache
    sees is that each group's system prompt recurs, which dealing keeps)."""
    sp = shared_prefix_profile(profile)
    if sp is None or not len(requests) or sp.enable_multi_turn_chat:
        return requests
    n_sys = int(round(sp.system_prompt_len.mean))
    if n_sys <= 0:
        return requests
    requests = requests.copy()
    requests["prefix_group"] = np.arange(len(requests)) % sp.num_groups
    requests["num_prefix_tokens"] = np.minimum(n_sys, requests["num_prompt_tokens"] - 1).clip(lower=0)
    return requests

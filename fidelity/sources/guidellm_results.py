"""guidellm's measurements of a run: its own report (`benchmarks.json`, any name), the per-request CSV.

What a guidellm user has after a run is this report, not a per-request CSV. It holds one entry per
benchmark (a sweep's synchronous, throughput and constant-rate phases), each with its requests by
status and its metrics. Two layouts, read from guidellm's source: 0.2-0.3 (`args`, `run_stats`,
`request_loader`; a request's send is `start_time`) and 0.4 on (`config`, `scheduler_state`, a
top-level `args` and `metadata.guidellm_version`; the send is `request_start_time`). In both a
request carries `time_to_first_token_ms` (from its send), `request_latency` and
`inter_token_latency_ms` = (last token - first token) / (output tokens - 1): vLLM's per-token TPOT
(`fidelity.metric_definitions`). Its `time_per_output_token_ms` (E2E / output tokens) is not used.

Where guidellm kept only a sample of a benchmark's requests (`--sample-requests`, 0.3's
`--output-sampling`), the sends cannot be replayed: the run is then the profile the report records,
simulated as guidellm drives it (`fidelity.sources.guidellm.GuidellmWorkload`), against the means of
the benchmarks' metrics (over every request, not just the sample). Errored and incomplete requests
are left out of the timings, as guidellm leaves them out of its own successful figures; the run's
notes count them. A file is known by its content: guidellm names it after `--output-path`.

Also here: the per-request CSV some campaigns make of the report (`read_guidellm_requests`), its
join to vLLM's spans (`successes_with_spans`) and the profile's shared prefixes
(`prefix_from_guidellm`).
"""
from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fidelity.benchmark_stats import per_token_mean
from fidelity.runs import measured_table, read_table
from fidelity.sources.guidellm import (RATE_TYPES, SWEEP_SUBSTRATEGIES, GuidellmWorkload, guidellm_prefixes,
                                      guidellm_release, is_guidellm_profile)
from policies import ConfigError
from records.files import read_json_object

#: the guidellm release a report without `metadata` is read as, by its layout: 0.2-0.3's (`args`,
#: `run_stats` per benchmark; they share the behaviour servesim models: constant rates open with an
#: initial burst), or 0.4's (`config`, `scheduler_state`: `metadata.guidellm_version` came in 0.5.0)
OLD_LAYOUT_RELEASE = "0.3"
NO_METADATA_RELEASE = "0.4"


def report_release(data: dict) -> tuple[str | None, str | None]:
    """(release, how it was inferred) of a parsed guidellm report: its `metadata.guidellm_version`
    (0.5.0 on; how: None), else the release its layout belongs to, said in one line."""
    recorded = (data.get("metadata") or {}).get("guidellm_version")
    if recorded:
        return str(recorded), None
    first = (data.get("benchmarks") or [{}])[0]
    if isinstance(first, dict) and "config" in first:
        return NO_METADATA_RELEASE, ("guidellm release not recorded: the report's layout (config, scheduler_state, "
                                     f"no metadata, which 0.5.0 added) is {NO_METADATA_RELEASE}'s, read as "
                                     f"{NO_METADATA_RELEASE}")
    return OLD_LAYOUT_RELEASE, ("guidellm release not recorded: the report's layout (args, run_stats) is "
                                f"0.2-0.3's, read as {OLD_LAYOUT_RELEASE}")


def is_guidellm_report(data) -> bool:
    """True for a parsed guidellm report: a mapping whose `benchmarks` each list `requests.successful`."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list) or not data["benchmarks"]:
        return False
    return all(isinstance(b, dict) and isinstance(b.get("requests"), dict)
               and isinstance(b["requests"].get("successful"), list) for b in data["benchmarks"])


@dataclass(frozen=True)
class ReportBenchmarks:
    """A report's benchmarks as guidellm measured them (`fidelity.benchmarks` sets a simulation
    beside them): one row each (`_report_benchmarks`), the benchmark each kept request was measured in
    by its id, and each benchmark's start on a replay's clock (seconds after the report's first
    kept send; None where the report does not give them)."""

    rows: tuple[dict, ...]
    phases: dict[str, int]
    starts: tuple[float, ...] | None


@dataclass
class GuidellmReport:
    """What a report says about its run: per-request timings (empty when guidellm kept a sample),
    the benchmarks' means where it did, each benchmark as measured, the load profile its arguments
    describe, its release, notes."""

    requests: pd.DataFrame
    benchmarks: ReportBenchmarks
    summary: dict = field(default_factory=dict)
    profile: dict | None = None
    version: str | None = None
    model: str | None = None
    notes: list[str] = field(default_factory=list)


def read_guidellm_report(path: Path, data: dict | None = None) -> GuidellmReport:
    """The report at `path` (`data`: already parsed). Refused with the reason: a sampled report
    whose arguments describe no load servesim can regenerate, or one with no served request."""
    if data is None:
        data = read_json_object(path, "guidellm report")
    if not is_guidellm_report(data):
        raise ValueError(f"{path}: not a guidellm report (expected benchmarks, each with requests.successful)")
    benchmarks = data["benchmarks"]
    old = "config" not in benchmarks[0]  # 0.2-0.3: args / run_stats per benchmark
    version, inferred = report_release(data)
    profile = _profile(data, old)
    if profile is not None:
        profile["client"] = {"version": version}
    notes = [inferred] if inferred else []
    totals = [_totals(b, old) for b in benchmarks]
    kept = [[r for r in (_row(x, old) for x in b["requests"]["successful"]) if r is not None] for b in benchmarks]
    measured = _report_benchmarks(benchmarks, kept, totals)
    dropped = sum(t.get("errored", 0) + t.get("incomplete", 0) for t in totals)
    if dropped:
        notes.append(f"guidellm: {dropped} errored or incomplete requests left out (no timings)")
    if any(_warmed(b) for b in benchmarks):
        notes.append("guidellm: warm-up or cool-down requests were sent but not reported: not replayed")
    sampled = [i for i, (b, t) in enumerate(zip(benchmarks, totals))
               if len(b["requests"]["successful"]) < t.get("successful", 0)]
    model = report_model(data)
    if sampled:
        why = "its arguments describe no synthetic load servesim can regenerate"
        if is_guidellm_profile(profile):
            try:
                GuidellmWorkload(profile)
                why = ""
            except ConfigError as exc:  # data the generator does not model (multi-turn rows, say)
                why = f"its load is not modelled ({exc})"
        if why:
            raise ValueError(f"{path}: guidellm kept a sample of the requests of benchmark(s) {sampled} "
                             f"(--sample-requests) and {why}: nothing to replay; rerun guidellm without "
                             "--sample-requests")
        kept = sum(len(benchmarks[i]["requests"]["successful"]) for i in sampled)
        total = sum(totals[i]["successful"] for i in sampled)
        notes.append(f"guidellm kept {kept} of {total} requests of benchmark(s) {sampled} (--sample-requests): "
                     "its load profile simulated, against its metrics' means")
        summary = {**_summary(benchmarks, totals), "num_failures": float(dropped)}
        return GuidellmReport(measured_table({}), measured, summary, profile, version, model, notes)
    rows = [r for rows in kept for r in rows]
    if not rows:
        raise ValueError(f"{path}: no request of this guidellm report was served")
    table = measured_table({k: [r[k] for r in rows] for k in rows[0]}, path)
    # the requests the client gave up on, beside the replayed ones (`fidelity.client_timeout.served_row`)
    summary = {"num_failures": float(dropped)} if dropped else {}
    return GuidellmReport(table, measured, summary, profile, version, model, notes)


def report_args(data: dict) -> dict:
    """The client arguments the report records, by guidellm's own names: 0.4 and later its `args`, with
    the backend's resolved `timeout` (`backend.timeout`); 0.2-0.3 the first benchmark's `args`."""
    benchmarks = data.get("benchmarks") or [{}]
    first = benchmarks[0] if isinstance(benchmarks[0], dict) else {}
    if "config" not in first:
        args = first.get("args")
        return dict(args) if isinstance(args, dict) else {}
    args = dict(data["args"]) if isinstance(data.get("args"), dict) else {}
    backend = (first.get("config") or {}).get("backend")
    if isinstance(backend, dict) and "timeout" in backend:
        args["backend.timeout"] = backend["timeout"]
    return args


def _report_benchmarks(benchmarks: list[dict], kept: list[list[dict]], totals: list[dict]) -> ReportBenchmarks:
    """Each benchmark as guidellm measured it: strategy, target (req/s or streams), served and failed
    requests, requests per second over its duration, mean TTFT and ITL (ms; per token, as guidellm
    weights it: `fidelity.benchmark_stats`) and E2E (s) of its requests, from those it kept (`kept`:
    `_row`s) where it kept them all, else from its metrics; with the benchmark of each kept request
    and each benchmark's start."""
    out = []
    for k, (b, rows, t) in enumerate(zip(benchmarks, kept, totals)):
        old = "config" not in b
        strategy = ((b.get("args") if old else b.get("config")) or {}).get("strategy") or {}
        kind = strategy.get("type_")
        target = strategy.get("rate") if kind in ("constant", "poisson") else strategy.get("streams")
        if rows and len(rows) >= t.get("successful", 0):
            ttft, e2e = np.mean([r["ttft_s"] for r in rows]), np.mean([r["e2e_s"] for r in rows])
            with_itl = [r for r in rows if math.isfinite(r["tpot_s"])]  # per token, as guidellm's metrics
            itl = per_token_mean([r["tpot_s"] for r in with_itl], [r["num_output_tokens"] - 1 for r in with_itl])
        else:
            mean = (lambda name: float((((b.get("metrics") or {}).get(name) or {}).get("successful") or {})
                                       .get("mean", math.nan)))
            ttft, e2e, itl = mean("time_to_first_token_ms") / 1e3, mean("request_latency"), mean("inter_token_latency_ms") / 1e3
        duration = b.get("duration") or (b.get("end_time", math.nan) - b.get("start_time", math.nan))
        n = t.get("successful", len(rows))
        out.append({"benchmark": k, "strategy": kind, "target": target, "requests": n,
                    "failed": t.get("errored", 0) + t.get("incomplete", 0),
                    "requests_per_s": n / duration if duration and duration > 0 else math.nan,
                    "ttft_mean_ms": 1e3 * float(ttft), "itl_mean_ms": 1e3 * float(itl), "e2e_mean_s": float(e2e)})
    phases = {r["req_id"]: k for k, rows in enumerate(kept) for r in rows}
    sends = [r["arrival_time"] for rows in kept for r in rows]
    starts = [b.get("start_time") for b in benchmarks]
    known = sends and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in starts)
    return ReportBenchmarks(tuple(out), phases, tuple(float(x) - min(sends) for x in starts) if known else None)


def _row(r: dict, old: bool) -> dict | None:
    """One successful request's timings (s), or None where guidellm recorded no first token."""
    timings = ((r.get("info") or {}).get("timings") or {}) if not old else {}
    start = r.get("start_time") if old else r.get("request_start_time", timings.get("request_start"))
    ttft, e2e, n_out = r.get("time_to_first_token_ms"), r.get("request_latency"), r.get("output_tokens")
    if start is None or ttft is None or e2e is None or not n_out:
        return None
    itl = r.get("inter_token_latency_ms")
    return {"req_id": str(r.get("response_id") or r.get("request_id") or ""), "arrival_time": float(start),
            "num_prompt_tokens": int(r.get("prompt_tokens") or 0), "num_output_tokens": int(n_out),
            "ttft_s": float(ttft) / 1e3, "e2e_s": float(e2e),
            "tpot_s": float(itl) / 1e3 if itl is not None and int(n_out) > 1 else math.nan}


def _totals(benchmark: dict, old: bool) -> dict:
    """Requests by status over the whole benchmark (not just those kept in the report)."""
    totals = benchmark.get("request_totals") if old else (benchmark.get("metrics") or {}).get("request_totals")
    if not isinstance(totals, dict):
        return {k: len(v) for k, v in benchmark["requests"].items() if isinstance(v, list)}
    return {k: int(v) for k, v in totals.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _warmed(benchmark: dict) -> bool:
    """True where the benchmark had a warm-up or cool-down phase (0.4 on: excluded from its requests)."""
    config = benchmark.get("config") or {}
    for key in ("warmup", "cooldown"):
        phase = config.get(key)
        if isinstance(phase, dict) and any(phase.get(k) for k in ("percent", "value")):
            return True
    return False


def _summary(benchmarks: list[dict], totals: list[dict]) -> dict:
    """Means over every successful request of every benchmark, from the benchmarks' metrics; TPOT of
    the means, (E2E - TTFT) / (mean output tokens - 1), as `RealRun.tpot_of_means` scores it."""
    weights, sums = 0.0, {"ttft_s": 0.0, "e2e_s": 0.0, "n_out": 0.0, "n_prompt": 0.0}
    names = {"ttft_s": ("time_to_first_token_ms", 1e-3), "e2e_s": ("request_latency", 1.0),
             "n_out": ("output_token_count", 1.0), "n_prompt": ("prompt_token_count", 1.0)}
    for b, t in zip(benchmarks, totals):
        n = t.get("successful", 0)
        if not n:
            continue
        means = {}
        for key, (name, scale) in names.items():
            stats = ((b.get("metrics") or {}).get(name) or {}).get("successful") or {}
            if not isinstance(stats.get("mean"), (int, float)):
                raise ValueError(f"guidellm report: benchmark metrics.{name}.successful.mean missing: no means")
            means[key] = float(stats["mean"]) * scale
        weights += n
        for key in sums:
            sums[key] += n * means[key]
    out = {k: v / weights for k, v in sums.items()} if weights else {}
    n_out = out.pop("n_out", math.nan)
    out["tpot_s"] = (out["e2e_s"] - out["ttft_s"]) / (n_out - 1) if weights and n_out > 1 else math.nan
    out["num_successes"] = weights
    out["prompt_len"], out["output_len"] = out.pop("n_prompt", math.nan), n_out
    return out


def report_model(data: dict) -> str | None:
    """The model a report's client named, where it did (guidellm may leave it to the server's first)."""
    first = data["benchmarks"][0]
    if "config" not in first:  # 0.2-0.3: the worker's backend, "None" where the server chose
        model = (first.get("worker") or {}).get("backend_model")
    else:
        model = (data.get("args") or {}).get("model") or ((first.get("config") or {}).get("backend") or {}).get("model")
    return str(model) if model and model != "None" else None


def parse_data(text) -> dict | None:
    """guidellm's `--data` when it is synthetic (prompt_tokens, output_tokens), as a mapping: JSON,
    a Python literal or `key=value,...`; None for a dataset (a file, a Hub name)."""
    if isinstance(text, dict):
        return text if "prompt_tokens" in text else None
    if not isinstance(text, str):
        return None
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        return value if isinstance(value, dict) and "prompt_tokens" in value else None
    pairs = [p.split("=", 1) for p in text.split(",")]
    if not all(len(p) == 2 for p in pairs):
        return None
    out = {}
    for key, value in pairs:
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out if "prompt_tokens" in out else None


def _profile(data: dict, old: bool) -> dict | None:
    """The run's load profile as `fidelity.sources.guidellm.GuidellmWorkload` reads one (rate-type,
    rate, max-requests, random-seed, data), from the report's arguments; only `data` where the
    strategy is one it does not model; None where the data is a dataset."""
    first = data["benchmarks"][0]
    if old:  # 0.2-0.3: the profile, the request cap and the data per benchmark
        args = first.get("args") or {}
        prof = args.get("profile") or {}
        kind = prof.get("type_")
        if kind == "async":
            kind = prof.get("strategy_type")
        rate = prof.get("sweep_size") if kind == "sweep" else prof.get("rate")
        sub = prof.get("rate_type")  # what a 0.2-0.3 sweep runs after its throughput benchmark
        seed = prof.get("random_seed", 42)
        text = (first.get("request_loader") or {}).get("data")
        max_requests = args.get("max_number")
    else:
        args = data.get("args") or {}
        kind, rate, seed = args.get("profile"), args.get("rate"), args.get("random_seed", 42)
        sub = ((first.get("config") or {}).get("profile") or {}).get("strategy_type")  # 0.4-0.6's sweep
        text = args.get("data")
        text = text[0] if isinstance(text, list) and len(text) == 1 else text
        max_requests = args.get("max_requests")
    synthetic = parse_data(text)
    if synthetic is None:
        return None
    profile: dict = {"data": synthetic}
    if isinstance(rate, list) and (len(rate) == 1 or kind in ("sweep", "throughput")):
        rate = rate[0] if rate else None  # one benchmark's rate, a sweep's size, a throughput's bound
    if kind in RATE_TYPES and max_requests and (kind not in ("constant", "poisson", "concurrent") or rate):
        profile.update({"rate-type": kind, "max-requests": int(max_requests), "random-seed": int(seed or 42)})
        if rate is not None:
            profile["rate"] = int(rate) if kind == "sweep" else rate
        if kind == "sweep" and sub in SWEEP_SUBSTRATEGIES and sub != "constant":
            profile["strategy-type"] = sub
    rampup = (data.get("args") or {}).get("rampup") if not old else None
    if isinstance(rampup, (int, float)) and not isinstance(rampup, bool) and rampup > 0:
        profile["rampup"] = float(rampup)
    caps = [((b.get("config") or {}).get("strategy") or {}).get("max_concurrency") for b in data["benchmarks"]
            if ((b.get("config") or {}).get("strategy") or {}).get("type_") not in ("synchronous", "concurrent")]
    if caps and isinstance(caps[0], int) and not isinstance(caps[0], bool):  # the bound the run resolved
        profile["max-concurrency"] = caps[0]
    return profile


# --- a run's measurements ------------------------------------------------------------------------
CLIENT_COLUMNS = ("request_start_time", "prompt_tokens", "output_tokens", "ttft_ms", "request_latency_s", "itl_ms")


def read_guidellm_requests(path: Path) -> pd.DataFrame:
    """guidellm's per-request CSV (client side). guidellm's ITL is vLLM's TPOT (ENGINE-SEMANTICS §8)."""
    df = read_table(path, CLIENT_COLUMNS, numeric=CLIENT_COLUMNS)
    if "status" in df:
        df = df[df["status"].astype(str).str.startswith("success")]
    ttft = df["ttft_ms"].astype(float) / 1e3
    return measured_table({
        "req_id": df["response_id"].astype(str) if "response_id" in df else range(len(df)),
        "arrival_time": df["request_start_time"].astype(float),
        "num_prompt_tokens": df["prompt_tokens"], "num_output_tokens": df["output_tokens"],
        "ttft_s": ttft, "e2e_s": df["request_latency_s"].astype(float),
        "tpot_s": (df["itl_ms"].astype(float) / 1e3).where(df["output_tokens"] > 1),
    }, path)


def successes_with_spans(folder: Path) -> pd.DataFrame | None:
    """guidellm's successful requests (`guidellm_per_request.csv`) joined to vLLM's spans of the same
    requests (`per_request_server_spans.csv`) by response id (a span's `request_id` is the response
    id plus `-<choice>`); the span's columns keep their names, the client's `prompt_tokens` and
    `output_tokens` get `_client`. None when either file is missing."""
    client_path, spans_path = folder / "guidellm_per_request.csv", folder / "per_request_server_spans.csv"
    if not (client_path.is_file() and spans_path.is_file()):
        return None
    client, spans = pd.read_csv(client_path), pd.read_csv(spans_path)
    if "status" not in client or "response_id" not in client or "request_id" not in spans:
        return None
    client = client[client["status"].astype(str).str.startswith("success")]
    spans = spans.assign(response_id=spans["request_id"].astype(str).str.replace(r"-\d+$", "", regex=True))
    return client.merge(spans, on="response_id", how="inner", suffixes=("_client", ""))


def prefix_from_guidellm(requests: pd.DataFrame, profile: dict | None) -> pd.DataFrame:
    """guidellm's synthetic shared prefixes (`fidelity.sources.guidellm.guidellm_prefixes`): which
    request drew which is not recorded, so they are dealt in turn, in the drawn proportions."""
    data = (profile or {}).get("data")
    prefixes = guidellm_prefixes(data, guidellm_release(profile or {})) if isinstance(data, dict) else []
    if prefixes and len(requests):
        requests = requests.copy()
        dealt = [prefixes[i % len(prefixes)] for i in range(len(requests))]
        requests["prefix_group"] = [key for key, _ in dealt]
        requests["num_prefix_tokens"] = np.minimum([t for _, t in dealt], requests["num_prompt_tokens"] - 1).clip(lower=0)
    return requests

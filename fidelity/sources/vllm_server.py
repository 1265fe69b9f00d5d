"""vLLM server runs: a folder with the server's arguments, the load generator's profile and measurements.

The layout of ../shared/data/groundtruth/vllm-0.11-jan2026 (and of any folder laid out the same way):
`exp-config.yaml` (vLLM server arguments, inference-sim naming), `profile.yaml` (the load
generator's profile), `vllm.log` (the engine's reported KV capacity and version) and per-request
timings in `per_request_server_spans.csv` (vLLM OTLP spans), `per_request_lifecycle_metrics.json`
(inference-perf), `guidellm_per_request.csv` (guidellm), `requests.csv` (servesim's own table) or
a client's result JSON of any name, known by its content (`fidelity.sources.client_report`: `vllm
bench serve`'s, guidellm's report, whose arguments also give the load profile where the folder has
no profile.yaml); a `summary_lifecycle_metrics.json` alone gives means only. inference-perf writes
its reports where the profile's `storage.local_storage.path` says (a `results/` folder in the run folder, say):
measurement files are looked for in the run folder, then there (`report_folders`). The `config.yaml`
it writes beside them is its own resolved config (`model_dump` of what that release parsed: keys it
did not know are absent, its defaults filled in): when present it is the profile the client ran with.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd

from fidelity.runs import (REQUEST_COLUMNS, RealRun, ServerArgs, canonical_gpu, measured_table, read_table,
                          recorded_bool, recorded_gib, recorded_release, release_parts)
from fidelity.sources.client_report import find_client_report
from fidelity.sources.guidellm_results import (prefix_from_guidellm, read_guidellm_report, read_guidellm_requests,
                                               report_args, report_model, report_release)
from fidelity.sources.inference_perf_results import (prefix_from_shared_prefix, read_inference_perf_requests,
                                                     read_summary_means, requested_output_mean)
from fidelity.sources.vllm_bench import read_vllm_bench
from policies import ConfigError
from records.yaml_file import read_yaml


# --- YAML / profiles -----------------------------------------------------------------------------
def server_args_from_exp_config(exp: dict, gpu: str | None = None) -> ServerArgs:
    """`ServerArgs` from an `exp-config.yaml` mapping (vLLM server arguments, inference-sim naming)."""
    if "model" not in exp:
        raise ConfigError("exp-config.model: missing; the run's model name (e.g. meta-llama/Llama-3.1-8B) is required")

    def opt_int(key: str, *aliases: str) -> int | None:
        for k in (key, *aliases):
            if exp.get(k) is not None:
                v = exp[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < 1:
                    raise ConfigError(f"exp-config.{k}: expected a positive integer, got {v!r}")
                return int(v)
        return None

    def flag(key: str, default: bool | None) -> bool | None:
        return recorded_bool(f"exp-config.{key}", exp[key]) if exp.get(key) is not None else default

    version = recorded_release("exp-config.vllm_version", exp["vllm_version"]) if exp.get("vllm_version") is not None \
        else None
    return ServerArgs(
        model=str(exp["model"]),
        gpu=canonical_gpu(exp.get("gpu") or exp.get("hardware") or gpu),
        tensor_parallel_size=opt_int("tensor_parallelism", "tensor_parallel_size", "tp") or 1,
        data_parallel_size=opt_int("data_parallel_size", "dp") or 1,
        enable_expert_parallel=flag("enable_expert_parallel", False),
        max_model_len=opt_int("max_model_len"),
        max_num_batched_tokens=opt_int("max_num_batched_tokens"),
        max_num_seqs=opt_int("max_num_seqs"),
        enable_chunked_prefill=flag("enable_chunked_prefill", True),
        enable_prefix_caching=flag("enable_prefix_caching", True),
        block_size=opt_int("block_size") or 16,
        num_gpu_blocks=opt_int("num_gpu_blocks"),
        engine_version=version,
        gpu_memory_utilization=_fraction(exp.get("gpu_memory_utilization")),
        kv_cache_dtype=str(exp["kv_cache_dtype"]) if exp.get("kv_cache_dtype") else None,
        kv_offloading_size=recorded_gib("exp-config.kv_offloading_size", exp.get("kv_offloading_size")),
        kv_offloading_backend=str(exp["kv_offloading_backend"]) if exp.get("kv_offloading_backend") else None,
        async_scheduling=flag("async_scheduling", None),
    )


def _fraction(value) -> float | None:
    """exp-config's `gpu_memory_utilization`, a fraction in (0, 1], or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"exp-config.gpu_memory_utilization: expected a fraction in (0, 1], got {value!r}")
    return float(value)


_KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
# the engine's release as a server log states it: the V1 engine's banner ("Initializing a V1 LLM
# engine (v0.11.0) with config"), the v0 engine's ("Initializing an LLM engine (v0.6.3) with config")
# and the API server's first line ("vLLM API server version 0.6.3")
_VERSION_LINE = re.compile(r"Initializing an? (?:V1 )?LLM engine \((v[^)\s]+)\)|vLLM API server version (\S+)")


def scan_vllm_log(path: Path) -> dict:
    """The last reported KV cache size (tokens) and engine version ("X.Y.Z") in a vLLM server log, if any."""
    out: dict = {}
    if not path.is_file():
        return out
    with open(path, errors="replace") as f:
        for line in f:
            if m := _KV_LINE.search(line):
                out["num_kv_tokens"] = int(m.group(1).replace(",", ""))
            elif m := _VERSION_LINE.search(line):
                out["engine_version"] = recorded_release(f"{path}: the engine's version", m.group(1) or m.group(2))
    return out


def same_release(a: str, b: str) -> bool:
    """Whether two releases agree as far as both are spelled ("0.11" and "0.11.0" do)."""
    n = min(len(a.split(".")), len(b.split(".")))
    return release_parts(a)[:n] == release_parts(b)[:n]


# --- per-request measurement files --------------------------------------------------------------
SPAN_COLUMNS = ("request_id", "start_unix_ns", "prompt_tokens", "completion_tokens", "ttft_s", "e2e_s")
SERVESIM_COLUMNS = ("req_id", "arrival_time", "num_prompt_tokens", "num_output_tokens", "ttft_s", "e2e_s")


def read_vllm_spans(path: Path) -> pd.DataFrame:
    """vLLM's OTLP `llm_request` spans as CSV: the server arrival is the span start."""
    df = read_table(path, SPAN_COLUMNS, numeric=SPAN_COLUMNS[1:])
    return measured_table({
        "req_id": df["request_id"].astype(str),
        "arrival_time": df["start_unix_ns"].astype("float64") / 1e9,
        "num_prompt_tokens": df["prompt_tokens"], "num_output_tokens": df["completion_tokens"],
        "ttft_s": df["ttft_s"].astype(float), "e2e_s": df["e2e_s"].astype(float),
    }, path)


def read_servesim_requests(path: Path) -> pd.DataFrame:
    """A servesim `requests.csv` (sim or engine results) used as a measurement."""
    df = read_table(path, SERVESIM_COLUMNS, numeric=SERVESIM_COLUMNS[1:])
    return measured_table({
        "req_id": df["req_id"], "arrival_time": df["arrival_time"].astype(float),
        "num_prompt_tokens": df["num_prompt_tokens"], "num_output_tokens": df["num_output_tokens"],
        "ttft_s": df["ttft_s"].astype(float), "e2e_s": df["e2e_s"].astype(float),
    }, path)


# in order of preference: server-side timings first (what the engine itself did)
MEASUREMENT_FILES = (
    ("per_request_server_spans.csv", read_vllm_spans),
    ("per_request_lifecycle_metrics.json", read_inference_perf_requests),
    ("guidellm_per_request.csv", read_guidellm_requests),
    ("requests.csv", read_servesim_requests),
)


# the kind of each measurement file (`fidelity.metric_definitions.DEFINITIONS`)
MEASURED_BY = {"per_request_server_spans.csv": "vllm-spans", "per_request_lifecycle_metrics.json": "inference-perf",
               "guidellm_per_request.csv": "guidellm", "requests.csv": "servesim"}


def report_folders(path: Path, profile: dict | None = None) -> list[Path]:
    """The run folder, then the folders in it where the client wrote its reports: the last part of
    the profile's `storage.local_storage.path`, and `results/` (inference-perf's usual name)."""
    path = Path(path)
    names = []
    storage = ((profile or {}).get("storage") or {}).get("local_storage") if isinstance(profile, dict) else None
    if isinstance(storage, dict) and storage.get("path"):
        names.append(Path(str(storage["path"])).name)
    names.append("results")
    out = [path]
    for name in names:
        if name and (path / name).is_dir() and path / name not in out:
            out.append(path / name)
    return out


def run_file(path: Path, name: str, profile: dict | None = None) -> Path | None:
    """`name` in the run folder or one of its report folders (`report_folders`), or None."""
    for folder in report_folders(path, profile):
        if (folder / name).is_file():
            return folder / name
    return None


def client_resolved_config(path: Path, profile: dict | None = None) -> tuple[dict | None, Path | None]:
    """inference-perf's own dump of the config it ran with (`config.yaml` in its report folder), if any."""
    for folder in report_folders(path, profile)[1:]:
        file = folder / "config.yaml"
        if file.is_file():
            data = read_yaml(file)
            if isinstance(data.get("data"), dict) and isinstance(data.get("load"), dict):
                return data, file
    return None, None


def ignored_profile_keys(profile: dict | None, resolved: dict | None, prefix: str = "") -> list[str]:
    """Dotted keys of `profile` the client's resolved config lacks: what that release did not know."""
    if not isinstance(profile, dict) or not isinstance(resolved, dict):
        return []
    out = []
    for key, value in profile.items():
        if key not in resolved:
            out.append(prefix + str(key))
        elif isinstance(value, dict) and isinstance(resolved[key], dict):
            out.extend(ignored_profile_keys(value, resolved[key], f"{prefix}{key}."))
    return out


# --- one folder per run ---------------------------------------------------------------------------
def load_server_run(path: Path, source: str = "vllm-server", require_measurements: bool = True) -> RealRun:
    """A folder with `exp-config.yaml`, `profile.yaml` and per-request (or summary) measurements.

    With `require_measurements=False` a folder holding only the configuration loads too (to simulate it).
    """
    path = Path(path)
    exp_file = path / "exp-config.yaml"
    if not exp_file.is_file():
        raise FileNotFoundError(f"{path}: no exp-config.yaml (the run's vLLM server arguments)")
    exp = read_yaml(exp_file)
    profile = read_yaml(path / "profile.yaml") if (path / "profile.yaml").is_file() else None
    profile_file = path / "profile.yaml" if profile is not None else None
    resolved, resolved_file = client_resolved_config(path, profile)
    ignored: list[str] = []
    if resolved is not None:  # what the client release really ran with
        ignored = ignored_profile_keys(profile, resolved)
        profile, profile_file = resolved, resolved_file
    log = scan_vllm_log(run_file(path, "vllm.log", profile) or path / "vllm.log")
    # per-request measurements: a named file, else a client's result known by its content (its
    # name is the client's choice), found and parsed once (it may also name the model)
    named = next(((name, reader, file) for name, reader in MEASUREMENT_FILES
                  if (file := run_file(path, name, profile)) is not None), None)
    report = find_client_report(report_folders(path, profile))  # also for its arguments (`client_args`)
    guidellm = (read_guidellm_report(report[1], report[2])
                if named is None and report is not None and report[0] == "guidellm" else None)
    model_from = "exp-config.yaml"
    if "model" not in exp and report is not None:
        model = report[2].get("model_id") if report[0] == "vllm-bench" else report_model(report[2])
        if model:
            exp, model_from = {**exp, "model": str(model)}, report[1].name
    server = server_args_from_exp_config(exp)
    logged = log.get("engine_version")
    if logged and server.engine_version is not None and not same_release(server.engine_version, logged):
        # the run's records disagree on what ran: refused rather than one chosen silently. exp-config
        # says what the experiment meant to launch, the log what the engine said it was, and either
        # can be stale (a log may hold several launches; its last is read): the user knows which
        raise ConfigError(f"exp-config.vllm_version: {exp['vllm_version']!r}, but vllm.log's engine reports "
                          f"{logged}; correct exp-config.yaml, or remove vllm_version to use the log's")
    if logged and (server.engine_version is None or logged.count(".") > server.engine_version.count(".")):
        server = replace(server, engine_version=logged)  # unrecorded, or the log's patch release too
    if log.get("num_kv_tokens") and server.num_gpu_blocks is None:
        server = replace(server, num_gpu_blocks=log["num_kv_tokens"] // server.block_size)
    requests = pd.DataFrame(columns=list(REQUEST_COLUMNS))
    summary: dict = {}
    measured_by, measured_file = "", None
    assumed: list[str] = []
    cap, client_benchmarks = None, None
    if named is not None:
        name, reader, measured_file = named
        requests, measured_by = reader(measured_file), MEASURED_BY[name]
    elif report is not None and report[0] == "vllm-bench":
        (requests, sends, cap, failed), measured_by, measured_file = read_vllm_bench(*report[1:]), "vllm-bench", \
            report[1]
        assumed += [sends] if sends else []
        if failed:  # beside the replayed requests (`fidelity.client_timeout.served_row`): nothing lost
            summary = {"num_failures": float(failed)}
            assumed.append(f"vllm bench: {failed} failed request(s) left out (no timings)" +
                           ("; each held one of max_concurrency's slots until it failed, which the replay "
                            "leaves free" if cap is not None else ""))
    elif guidellm is not None:
        requests, summary, measured_by, measured_file = guidellm.requests, guidellm.summary, "guidellm", report[1]
        client_benchmarks = guidellm.benchmarks
        assumed += guidellm.notes
        if profile is None and guidellm.profile is not None:  # the load the client's arguments describe
            profile, profile_file = guidellm.profile, report[1]
    if report is not None and report[0] == "guidellm" and isinstance(profile, dict) \
            and not (profile.get("client") or {}).get("version"):
        # the release the report records or its layout shows, whichever file holds the measurements
        version, inferred = report_release(report[2])
        profile = {**profile, "client": {**(profile.get("client") or {}), "version": version}}
        if inferred and guidellm is None:  # else among the report's notes already
            assumed.append(inferred)
    if (file := run_file(path, "summary_lifecycle_metrics.json", profile)) is not None:
        summary = read_summary_means(file, requested_output_mean(profile))
        measured_by = measured_by or "inference-perf-summary"
    if not len(requests) and not summary and require_measurements:
        raise FileNotFoundError(
            f"{path}: no measurements; expected one of "
            f"{', '.join(n for n, _ in MEASUREMENT_FILES)}, a vllm bench serve result or guidellm report JSON, or "
            "summary_lifecycle_metrics.json")
    requests = prefix_from_guidellm(requests, profile)
    requests = prefix_from_shared_prefix(requests, profile)
    recorded = {k: (v, model_from if k == "model" else "exp-config.yaml") for k, v in exp.items()}
    for key in ("engine_version", "num_kv_tokens"):
        if key in log and key not in recorded:
            recorded[key] = (log[key], "vllm.log")
    client_args = ({k: (v, report[1].name) for k, v in report_args(report[2]).items()}
                   if report is not None and report[0] == "guidellm" else {})
    return RealRun(name=path.name, source=source, path=path, server=server, requests=requests, recorded_args=recorded,
                   client_args=client_args,
                   measured_by=measured_by, measured_file=measured_file,
                   tpot_of_means=not len(requests) and bool(summary),
                   profile=profile, summary=summary, profile_file=profile_file, profile_ignored=tuple(ignored),
                   assumed=tuple(assumed), client_max_concurrency=cap, client_benchmarks=client_benchmarks)

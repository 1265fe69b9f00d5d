"""Real serving runs in one common form: what was served, how it was configured, what was measured.

A `RealRun` is read from a run folder (or, for DistServe, one `.exp` file) of
../shared/data/groundtruth or of any folder laid out the same way:

- vLLM server runs (`exp-config.yaml` + `profile.yaml` + per-request timings in
  `per_request_server_spans.csv` (vLLM OTLP spans), `per_request_lifecycle_metrics.json` (inference-perf),
  `guidellm_per_request.csv` (guidellm) or `requests.csv` (servesim's own table); a
  `summary_lifecycle_metrics.json` alone gives means only);
- LLMServingSim's vLLM 0.19 replays (`vllm/meta.json` + `vllm/requests.jsonl`);
- DistServe's vLLM runs on A100 (`opt-13b-sharegpt/vllm-N-RATE.exp`).

Every source is turned into the same `requests` table (arrival, lengths, prefix group, measured
TTFT/E2E/TPOT with vLLM's definitions) and `ServerArgs` (vLLM's argument names).
"""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

# columns of RealRun.requests; measured latencies are NaN when a run has only a summary
REQUEST_COLUMNS = (
    "req_id", "arrival_time", "num_prompt_tokens", "num_output_tokens", "prefix_group", "num_prefix_tokens",
    "ttft_s", "e2e_s", "tpot_s",
)
METRICS = ("ttft_s", "tpot_s", "e2e_s")

# GPU names as the runs' folders / device strings spell them -> servesim's GPU catalog names
GPU_ALIASES = {
    "rtx4090": "RTX4090", "geforce rtx 4090": "RTX4090", "nvidia geforce rtx 4090": "RTX4090",
    "rtxpro6000": "RTXPRO6000", "rtx pro 6000": "RTXPRO6000",
    "nvidia rtx pro 6000 blackwell server edition": "RTXPRO6000",
    "h100": "H100", "h100-80gb": "H100", "nvidia h100 80gb hbm3": "H100",
    "a100": "A100", "a100-80gb": "A100", "a100-80g": "A100",
}


def canonical_gpu(name: str | None) -> str | None:
    """servesim's catalog name for a GPU spelled as a run spells it (unknown names pass through)."""
    if name is None:
        return None
    return GPU_ALIASES.get(str(name).strip().lower(), str(name))


@dataclass(frozen=True)
class ServerArgs:
    """The serving engine's configuration of one run, in vLLM's argument names.

    `None` means the run did not record it (the engine's default applies). `num_gpu_blocks` is the
    KV capacity the engine itself reported, when the run logged it.
    """

    model: str
    gpu: str | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    block_size: int = 16
    num_gpu_blocks: int | None = None
    engine_version: str | None = None  # "0.11", "0.19", ... (None: unknown)
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None  # vLLM's --kv-cache-dtype ("auto", "fp8", ...)


@dataclass
class RealRun:
    """One measured run: its name, source, server arguments, workload and per-request measurements."""

    name: str
    source: str
    path: Path
    server: ServerArgs
    requests: pd.DataFrame
    profile: dict | None = None  # the load generator's profile (inference-perf or guidellm), parsed
    summary: dict = field(default_factory=dict)  # measured means when a run has no per-request rows

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def has_per_request(self) -> bool:
        """True when arrivals and lengths of every request are known (the run can be replayed)."""
        return len(self.requests) > 0 and bool(self.requests["arrival_time"].notna().all())

    def measured(self) -> dict[str, float]:
        """Mean TTFT, TPOT and E2E in seconds (vLLM bench-serve definitions)."""
        out = {}
        for m in METRICS:
            col = self.requests[m] if m in self.requests else pd.Series(dtype=float)
            col = col[np.isfinite(col.astype(float))] if len(col) else col
            out[m] = float(col.mean()) if len(col) else float(self.summary.get(m, math.nan))
        return out


def _table(rows: dict[str, list | np.ndarray]) -> pd.DataFrame:
    """The common requests table, sorted by arrival, arrival times relative to the first one."""
    df = pd.DataFrame(rows)
    n = len(df)
    defaults = {"req_id": list(range(n)), "prefix_group": -1, "num_prefix_tokens": 0}
    for col in REQUEST_COLUMNS:
        if col not in df:
            df[col] = defaults.get(col, math.nan)
    df = df.sort_values("arrival_time", kind="stable").reset_index(drop=True)
    if n:
        df["arrival_time"] = df["arrival_time"] - df["arrival_time"].iloc[0]
    for col in ("num_prompt_tokens", "num_output_tokens", "prefix_group", "num_prefix_tokens"):
        df[col] = df[col].astype(int)
    if "tpot_s" not in rows and n:
        df["tpot_s"] = tpot(df["ttft_s"], df["e2e_s"], df["num_output_tokens"])
    return df[list(REQUEST_COLUMNS)]


def tpot(ttft: pd.Series, e2e: pd.Series, num_output_tokens: pd.Series) -> pd.Series:
    """vLLM's TPOT: (E2E - TTFT) / (output tokens - 1), NaN for one-token answers."""
    n = num_output_tokens.astype(float)
    return ((e2e - ttft) / (n - 1)).where(n > 1)


# --- YAML / profiles -----------------------------------------------------------------------------
def read_yaml(path: Path) -> dict:
    """A YAML (or JSON) mapping; an empty file is an empty mapping."""
    import yaml  # a base dependency; imported here so that `import sim` stays light

    with open(path) as f:
        data = yaml.safe_load(f)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def server_args_from_exp_config(exp: dict, gpu: str | None = None) -> ServerArgs:
    """`ServerArgs` from an `exp-config.yaml` mapping (vLLM server arguments, inference-sim naming)."""
    if "model" not in exp:
        raise ValueError("exp-config.model: missing; the run's model name (e.g. meta-llama/Llama-3.1-8B) is required")

    def opt_int(key: str, *aliases: str) -> int | None:
        for k in (key, *aliases):
            if exp.get(k) is not None:
                v = exp[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < 1:
                    raise ValueError(f"exp-config.{k}: expected a positive integer, got {v!r}")
                return int(v)
        return None

    return ServerArgs(
        model=str(exp["model"]),
        gpu=canonical_gpu(exp.get("gpu") or exp.get("hardware") or gpu),
        tensor_parallel_size=opt_int("tensor_parallelism", "tensor_parallel_size", "tp") or 1,
        data_parallel_size=opt_int("data_parallel_size", "dp") or 1,
        enable_expert_parallel=bool(exp.get("enable_expert_parallel", False)),
        max_model_len=opt_int("max_model_len"),
        max_num_batched_tokens=opt_int("max_num_batched_tokens"),
        max_num_seqs=opt_int("max_num_seqs"),
        enable_chunked_prefill=bool(exp.get("enable_chunked_prefill", True)),
        enable_prefix_caching=bool(exp.get("enable_prefix_caching", True)),
        block_size=opt_int("block_size") or 16,
        num_gpu_blocks=opt_int("num_gpu_blocks"),
        engine_version=str(exp["vllm_version"]) if exp.get("vllm_version") else None,
        gpu_memory_utilization=_fraction(exp.get("gpu_memory_utilization")),
        kv_cache_dtype=str(exp["kv_cache_dtype"]) if exp.get("kv_cache_dtype") else None,
    )


def _fraction(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"exp-config.gpu_memory_utilization: expected a fraction in (0, 1], got {value!r}")
    return float(value)


_KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_VERSION_LINE = re.compile(r"V1 LLM engine \(v(\d+\.\d+)")


def scan_vllm_log(path: Path) -> dict:
    """The last reported KV cache size (tokens) and engine version in a vLLM server log, if any."""
    out: dict = {}
    if not path.is_file():
        return out
    with open(path, errors="replace") as f:
        for line in f:
            if m := _KV_LINE.search(line):
                out["num_kv_tokens"] = int(m.group(1).replace(",", ""))
            elif m := _VERSION_LINE.search(line):
                out["engine_version"] = m.group(1)
    return out


# --- per-request measurement files --------------------------------------------------------------
def read_vllm_spans(path: Path) -> pd.DataFrame:
    """vLLM's OTLP `llm_request` spans as CSV: the server arrival is the span start."""
    df = pd.read_csv(path)
    return _table({
        "req_id": df["request_id"].astype(str),
        "arrival_time": df["start_unix_ns"].astype("float64") / 1e9,
        "num_prompt_tokens": df["prompt_tokens"], "num_output_tokens": df["completion_tokens"],
        "ttft_s": df["ttft_s"].astype(float), "e2e_s": df["e2e_s"].astype(float),
    })


def read_inference_perf_requests(path: Path) -> pd.DataFrame:
    """inference-perf's `per_request_lifecycle_metrics.json` (failures dropped).

    Each entry has `start_time`, `end_time` and `error`; `computed_metrics` (TTFT, TPOT, token
    counts) only when the report config asks for them (off by default), so without them the same
    quantities come from `info` as inference-perf computes them: input tokens from
    `info.request_metrics.text.input_tokens` (or the older top-level `info.input_tokens`), output
    tokens from `info.response_metrics.output_tokens`, TTFT = first output token time - start,
    TPOT = (last - first output token time) / (output tokens - 1), E2E = end - start.
    """
    with open(path) as f:
        entries = json.load(f)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of per-request entries")
    rows = []
    for e in entries:
        if not isinstance(e, dict) or e.get("error"):
            continue
        c = e.get("computed_metrics")
        if c:
            rows.append({
                "arrival_time": float(e["start_time"]), "num_prompt_tokens": int(c["input_tokens"]),
                "num_output_tokens": int(c["output_tokens"]),
                "ttft_s": float(c["time_to_first_token"]) if c.get("time_to_first_token") is not None else math.nan,
                "e2e_s": float(c["request_latency"]),
                # inference-perf's own TPOT: (last token - first token) / (output tokens - 1), as vLLM's
                "tpot_s": float(c["time_per_output_token"]) if c.get("time_per_output_token") is not None else math.nan,
            })
            continue
        info = e.get("info") or {}
        req = info.get("request_metrics") or {}
        n_in = (req.get("text") or {}).get("input_tokens", info.get("input_tokens"))
        resp = info.get("response_metrics") or {}
        n_out = resp.get("output_tokens")
        if n_in is None or n_out is None or e.get("start_time") is None or e.get("end_time") is None:
            continue
        start, times = float(e["start_time"]), resp.get("output_token_times") or []
        ttft = float(times[0]) - start if len(times) > 1 else math.nan
        tpot = (float(times[-1]) - float(times[0])) / (int(n_out) - 1) if len(times) > 1 and int(n_out) > 1 else math.nan
        rows.append({"arrival_time": start, "num_prompt_tokens": int(n_in), "num_output_tokens": int(n_out),
                     "ttft_s": ttft, "e2e_s": float(e["end_time"]) - start, "tpot_s": tpot})
    if not rows:
        raise ValueError(f"{path}: no successful request with token counts (computed_metrics or info)")
    return _table({k: [r[k] for r in rows] for k in rows[0]})


def read_servesim_requests(path: Path) -> pd.DataFrame:
    """A servesim `requests.csv` (sim or engine results) used as a measurement."""
    df = pd.read_csv(path)
    return _table({
        "req_id": df["req_id"], "arrival_time": df["arrival_time"].astype(float),
        "num_prompt_tokens": df["num_prompt_tokens"], "num_output_tokens": df["num_output_tokens"],
        "ttft_s": df["ttft_s"].astype(float), "e2e_s": df["e2e_s"].astype(float),
    })


def read_summary_means(path: Path) -> dict[str, float]:
    """Mean TTFT/TPOT/E2E from inference-perf's `summary_lifecycle_metrics.json` (successes only)."""
    with open(path) as f:
        data = json.load(f)
    lat = (data.get("successes") or {}).get("latency") or data.get("latency") or {}
    names = {"ttft_s": "time_to_first_token", "tpot_s": "time_per_output_token", "e2e_s": "request_latency"}
    return {k: float(lat[v]["mean"]) for k, v in names.items() if isinstance(lat.get(v), dict) and "mean" in lat[v]}


def read_guidellm_requests(path: Path) -> pd.DataFrame:
    """guidellm's per-request CSV (client side). guidellm's ITL is vLLM's TPOT (ENGINE-SEMANTICS §8)."""
    df = pd.read_csv(path)
    if "status" in df:
        df = df[df["status"].astype(str).str.startswith("success")]
    ttft = df["ttft_ms"].astype(float) / 1e3
    return _table({
        "req_id": df["response_id"].astype(str) if "response_id" in df else range(len(df)),
        "arrival_time": df["request_start_time"].astype(float),
        "num_prompt_tokens": df["prompt_tokens"], "num_output_tokens": df["output_tokens"],
        "ttft_s": ttft, "e2e_s": df["request_latency_s"].astype(float),
        "tpot_s": (df["itl_ms"].astype(float) / 1e3).where(df["output_tokens"] > 1),
    })


# in order of preference: server-side timings first (what the engine itself did)
MEASUREMENT_FILES = (
    ("per_request_server_spans.csv", read_vllm_spans),
    ("per_request_lifecycle_metrics.json", read_inference_perf_requests),
    ("guidellm_per_request.csv", read_guidellm_requests),
    ("requests.csv", read_servesim_requests),
)


def _prefix_from_guidellm(requests: pd.DataFrame, profile: dict | None) -> pd.DataFrame:
    """guidellm's synthetic `prefix_tokens`: one prefix shared by every request of the run."""
    data = (profile or {}).get("data")
    n_prefix = int(data.get("prefix_tokens") or 0) if isinstance(data, dict) else 0
    if n_prefix > 0 and len(requests):
        requests = requests.copy()
        requests["prefix_group"] = 0
        requests["num_prefix_tokens"] = np.minimum(n_prefix, requests["num_prompt_tokens"] - 1).clip(lower=0)
    return requests


def shared_prefix_profile(profile: dict | None):
    """The run's inference-perf `shared_prefix` profile (`SharedPrefixProfile`), or None."""
    data = (profile or {}).get("data")
    if not (isinstance(data, dict) and data.get("type") == "shared_prefix"):
        return None
    from fidelity.sources.inference_perf import SharedPrefixProfile

    return SharedPrefixProfile.from_dict(profile)


def _prefix_from_shared_prefix(requests: pd.DataFrame, profile: dict | None) -> pd.DataFrame:
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
    log = scan_vllm_log(path / "vllm.log")
    server = server_args_from_exp_config(exp)
    if log.get("engine_version") and server.engine_version is None:
        server = replace(server, engine_version=log["engine_version"])
    if log.get("num_kv_tokens") and server.num_gpu_blocks is None:
        server = replace(server, num_gpu_blocks=log["num_kv_tokens"] // server.block_size)
    requests = pd.DataFrame(columns=list(REQUEST_COLUMNS))
    summary: dict = {}
    for name, reader in MEASUREMENT_FILES:
        if (path / name).is_file():
            requests = reader(path / name)
            break
    if (path / "summary_lifecycle_metrics.json").is_file():
        summary = read_summary_means(path / "summary_lifecycle_metrics.json")
    if not len(requests) and not summary and require_measurements:
        raise FileNotFoundError(
            f"{path}: no measurements; expected one of "
            f"{', '.join(n for n, _ in MEASUREMENT_FILES)} or summary_lifecycle_metrics.json")
    requests = _prefix_from_guidellm(requests, profile)
    requests = _prefix_from_shared_prefix(requests, profile)
    return RealRun(name=path.name, source=source, path=path, server=server, requests=requests,
                   profile=profile, summary=summary)


def load_llmservingsim_run(path: Path) -> RealRun:
    """An LLMServingSim bench example: vLLM 0.19 offline engine, engine-side timestamps per request."""
    path = Path(path)
    meta = json.loads((path / "vllm" / "meta.json").read_text())
    kw = meta.get("engine_kwargs", {})
    kv = meta.get("kv_cache") or {}
    device = (meta.get("hardware") or {}).get("device_name")
    gpu = canonical_gpu(device) if device else canonical_gpu(path.parent.name)
    server = ServerArgs(
        model=str(kw.get("model", meta.get("model"))), gpu=gpu,
        tensor_parallel_size=int(kw.get("tensor_parallel_size") or 1),
        data_parallel_size=int(kw.get("data_parallel_size") or 1),
        enable_expert_parallel=bool(kw.get("enable_expert_parallel", False)),
        max_model_len=kw.get("max_model_len"), max_num_batched_tokens=kw.get("max_num_batched_tokens"),
        max_num_seqs=kw.get("max_num_seqs"),
        enable_prefix_caching=bool(kv.get("enable_prefix_caching", True)),
        block_size=int(kv.get("block_size") or 16), num_gpu_blocks=kv.get("num_gpu_blocks"),
        engine_version=".".join(str(meta.get("vllm_version", "0.19")).split(".")[:2]),
    )
    recs = [json.loads(line) for line in (path / "vllm" / "requests.jsonl").read_text().splitlines() if line.strip()]
    queued = np.array([r["queued_ts"] for r in recs], dtype=float)
    first = np.array([r["first_token_ts"] for r in recs], dtype=float)
    last = np.array([r["last_token_ts"] for r in recs], dtype=float)
    # the README's definitions (they reproduce LLMServingSim's summary.txt): times from queued_ts
    requests = _table({
        "req_id": [str(r["request_id"]) for r in recs], "arrival_time": queued,
        "num_prompt_tokens": [int(r["input_toks"]) for r in recs],
        "num_output_tokens": [int(r["output_toks"]) for r in recs],
        "ttft_s": first - queued, "e2e_s": last - queued,
    })
    name = f"{path.parent.name}/{path.name}"
    return RealRun(name=name, source="llmservingsim-vllm-0.19", path=path, server=server, requests=requests)


_DISTSERVE_NAME = re.compile(r"^vllm-(\d+)-([\d.]+)\.exp$")

# The vLLM baseline's `--max-num-batched-tokens`, which DistServe's files do not record. What the
# runs show (`distserve_prefill_batches`): prompts whose first tokens arrive within 0.6 ms of each
# other were prefilled in one step (a v0 step is prefill-only; the next step is >= 20 ms away), and
# five of the eight runs co-schedule 1699 + 1728 = 3427 prompt tokens in one step (3456 padded), so
# the budget was raised above vLLM's default of 2048 (a prefill batch never exceeds it). Those same
# steps pad a 323-token prompt to 1728 (1405 padding tokens): vLLM 0.2.2-0.3's `max_paddings=256`
# cap was not in force. The exact value is not observable from the batches (the engine is
# KV-bound whenever a queue forms); 16384 is the power of two whose activation reserve, under
# vLLM's profiling rule (`specs.memory`), leaves the KV capacity the loaded runs plateau at
# (up to 55.9k tokens of prompts + outputs in flight while requests queue, ~57k counting partly
# filled blocks and the 1% watermark; the rule gives 57.8k at 16384, 61k at vLLM's default 2048).
DISTSERVE_MAX_NUM_BATCHED_TOKENS = 16384
# first tokens closer than this were sampled by the same step (the gap between steps is >= 20 ms)
DISTSERVE_SAME_STEP_S = 0.002


def distserve_prefill_steps(path: Path) -> list[list[dict]]:
    """The request records of each prefill step of one DistServe vLLM run, in order, read off its
    measured first tokens (vLLM v0 runs prefill-only steps: requests whose first tokens arrive
    within `DISTSERVE_SAME_STEP_S` of each other were prefilled together)."""
    recs = ast.literal_eval(Path(path).read_text().split("\n", 1)[0])
    recs = sorted(recs, key=lambda r: r["first_token_time"])
    steps: list[list[dict]] = []
    last = -math.inf
    for r in recs:
        if r["first_token_time"] - last >= DISTSERVE_SAME_STEP_S:
            steps.append([])
        steps[-1].append(r)
        last = r["first_token_time"]
    return steps


def distserve_prefill_batches(path: Path) -> list[list[int]]:
    """The prompt lengths of each prefill step of one DistServe vLLM run (`distserve_prefill_steps`).
    Evidence for the server arguments the files do not record."""
    return [[int(r["prompt_len"]) for r in step] for step in distserve_prefill_steps(path)]


def distserve_prefill_gaps(path: Path) -> list[tuple[int, float]]:
    """(prompt tokens, seconds) for each one-prompt prefill step of one DistServe vLLM run whose
    request was already waiting when the previous prefill step ended: prefill-first, the v0 engine
    prefills it in the very next step, so the gap between the two steps' first tokens is that
    prefill's time plus any host time between steps (an upper bound on the prefill itself)."""
    steps = distserve_prefill_steps(path)
    gaps = []
    for prev, cur in zip(steps, steps[1:]):
        end = prev[0]["first_token_time"]
        if len(cur) == 1 and cur[0]["issue_time"] < end:
            gaps.append((int(cur[0]["prompt_len"]), cur[0]["first_token_time"] - end))
    return gaps


def load_distserve_run(path: Path) -> RealRun:
    """One DistServe alignment file `vllm-N-RATE.exp`: vLLM serving OPT-13B on one A100-80GB.

    The file's first line is a Python literal list of per-request records (times in seconds of a
    monotonic clock, latencies in ms). vLLM of early 2024 (the v0 engine): no chunked prefill, no
    prefix caching, its default `gpu_memory_utilization=0.9`. The KV capacity is left to vLLM's own
    profiling rule (`specs.memory`): `profile_data/max_num_tokens.csv` next to the runs is the
    capacity of DistServe's *own* engine (its simulator's input for DistServe instances), not of the
    vLLM baseline, whose block pool is what 0.9 x 80 GB less weights and activations leaves.
    """
    path = Path(path)
    first_line = path.read_text().split("\n", 1)[0]
    recs = ast.literal_eval(first_line)
    if not isinstance(recs, list) or not recs:
        raise ValueError(f"{path}: expected a list of per-request records on the first line")
    issue = np.array([r["issue_time"] for r in recs], dtype=float)
    requests = _table({
        "arrival_time": issue,
        "num_prompt_tokens": [int(r["prompt_len"]) for r in recs],
        "num_output_tokens": [int(r["output_len"]) for r in recs],
        "ttft_s": np.array([r["ttft_ms"] for r in recs]) / 1e3,
        "e2e_s": np.array([r["latency_ms"] for r in recs]) / 1e3,
    })
    # the v0 engine (no chunked prefill), release not recorded: no padding cap, so not 0.2.2-0.3's
    # padded batches (policies.presets.VLLM_V0_VERSIONS); 256 seqs: vLLM v0's default. The token budget is not vLLM's default (max(max_model_len, 2048) =
    # 2048 for OPT-13B) but inferred from the runs themselves, see DISTSERVE_MAX_NUM_BATCHED_TOKENS
    server = ServerArgs(model="facebook/opt-13b", gpu="A100", tensor_parallel_size=1, max_model_len=2048,
                        max_num_batched_tokens=DISTSERVE_MAX_NUM_BATCHED_TOKENS, max_num_seqs=256,
                        enable_chunked_prefill=False,
                        enable_prefix_caching=False, engine_version=None, gpu_memory_utilization=0.9)
    return RealRun(name=path.stem, source="distserve-a100-opt13b", path=path, server=server, requests=requests)


def find_runs(root: Path) -> list[RealRun]:
    """Every run under `root`, in a stable order (a run folder itself is accepted too)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such folder")
    runs: list[RealRun] = []
    for d in sorted([root, *[p for p in root.rglob("*") if p.is_dir()]]):
        if (d / "exp-config.yaml").is_file():
            source = d.parent.name if d != root else "vllm-server"
            runs.append(load_server_run(d, source=source))
        elif (d / "vllm" / "requests.jsonl").is_file() and (d / "vllm" / "meta.json").is_file():
            runs.append(load_llmservingsim_run(d))
        elif not d.name.endswith("-workload"):  # DistServe's measured files (its inputs sit in *-workload)
            runs.extend(load_distserve_run(f) for f in sorted(d.glob("vllm-*.exp")) if _DISTSERVE_NAME.match(f.name))
    return runs

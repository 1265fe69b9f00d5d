"""`config_dict_for_run(run) -> dict`: the simulator config (as `load_config` reads it) of a real run.

The run's server arguments give the model, GPU, TP, scheduler limits (the `vllm` preset of the run's
version for what it leaves unset) and cache; its recorded arrivals become a replayed trace, or its
load generator's profile the `workload` section (`fidelity.from_run` says how). Below
`fidelity.predict` and `fidelity.idle_host`, which simulate runs from it, and `fidelity.from_run`,
which adds the measured GPU model and front end to it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

import numpy as np

from fidelity.client_timeout import client_timeout
from fidelity.client_workload import write_resolved_profile
from fidelity.runs import (DEFAULT_GPU, SUPPORTED_VERSIONS, RealRun, ServerArgs, async_scheduling,  # noqa: F401 (re-exported)
                           engine_version, kv_offloading_backend, release, reserve_full_isl, v0_engine,
                           v1_chunks_prompts)
from fidelity.sources.guidellm import is_guidellm_profile
from fidelity.sources.inference_perf import SharedPrefixWorkload
from fidelity.sources.inference_perf_profile import SharedPrefixProfile
from fidelity.sources.inference_perf_results import shared_prefix_profile
from policies import ConfigError, FinishReason, SchedulerConfig
from policies.presets import VLLM_V0_VERSIONS
from records.files import read_json_object
from sim.workload.traces import write_trace_csv
from specs.gpu_spec import get_gpu
from specs.model_catalog import get_model

MODELS_DIR = Path(__file__).resolve().parent / "models"
V0_WATERMARK = 0.01  # vLLM v0 `SelfAttnBlockSpaceManager(watermark=0.01)`
# the last release whose KV profiling counts torch's peak allocation only (`specs.memory` "v0-peak"):
# vllm-project/vllm#2031 (2023-12-12, after 0.2.4's bump) moved it to `mem_get_info`
V0_PEAK_PROFILING_UNTIL = (0, 2, 4)


def v0_memory_profiling(server: ServerArgs) -> str:
    """`hardware.memory_profiling` of a v0 engine: "v0-peak" for a recorded release <= 0.2.4, else "v0"
    (an unrecorded release: the later rule, as before releases were told apart)."""
    r = release(server)
    return "v0-peak" if r is not None and r[0] == 0 and r <= V0_PEAK_PROFILING_UNTIL else "v0"


def v0_max_paddings(server: ServerArgs) -> int:
    """The prefill batch's padding cap of a v0 engine: the recorded `max_paddings`, else the recorded
    release's default (`policies.presets.VLLM_V0_VERSIONS`), else 0 (no cap: release unknown)."""
    if server.max_paddings is not None:
        return int(server.max_paddings)
    r = release(server)
    return int(VLLM_V0_VERSIONS.get(f"{r[0]}.{r[1]}", {}).get("max_paddings", 0)) if r else 0


SUFFIXES = ("-instruct", "-chat", "-hf", "-base", "-it", "-2507", "-v0.1", "-v0.2", "-v0.3")


def model_name_candidates(name: str) -> list[str]:
    """Spellings to try for a HF model id: as given, without the org, without instruct/chat/version
    suffixes or a `Meta-` prefix, and Llama 3.x as Llama 3 (the same layer shapes)."""
    base = name.split("/")[-1]
    out = [name, base]
    b = base.lower()
    changed = True
    while changed:
        changed = False
        for suffix in SUFFIXES:
            if b.endswith(suffix):
                b, changed = b[: -len(suffix)], True
                out.append(b)
    if b.startswith("meta-"):
        b = b[len("meta-"):]
        out.append(b)
    for minor in ("3.1", "3.2", "3.3"):
        if f"llama-{minor}-" in b:
            out.append(b.replace(f"llama-{minor}-", "llama-3-"))
    return out


#: HF config.json files a run folder may carry for its model (the name a campaign would save it as)
RUN_MODEL_CONFIGS = ("config.json", "model_config.json")


def run_model_config(run_dir: Path | None) -> Path | None:
    """The model's Hugging Face config.json in a run folder (it has `model_type`), or None."""
    for name in RUN_MODEL_CONFIGS if run_dir is not None else ():
        path = Path(run_dir) / name
        try:
            if path.is_file() and "model_type" in read_json_object(path, "model config"):
                return path
        except (OSError, ValueError):
            continue
    return None


def aiconfigurator_model_config(name: str) -> Path | None:
    """aiconfigurator-core's copy of a model's HF config.json (`model_configs/<org>--<name>_config.json`),
    when that extra is installed and holds the model, else None."""
    try:
        spec = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model_configs"
    wanted = f"{name.replace('/', '--')}_config.json".lower()
    for path in folder.glob("*_config.json") if "/" in name else ():
        if path.name.lower() == wanted:
            return path
    return None


def resolve_model_name(name: str, run_dir: Path | None = None) -> str:
    """A name `specs` knows for a HF model id: the config.json the run folder carries, a shipped
    config.json (`MODELS_DIR`), a catalog name or alias, or aiconfigurator-core's copy of the model's
    config (with that extra)."""
    base = name.split("/")[-1].lower()
    shipped = [str(f) for f in sorted(MODELS_DIR.glob("*.json"), reverse=True) if base.startswith(f.stem.lower())]
    own, theirs = run_model_config(run_dir), aiconfigurator_model_config(name)
    candidates = ([str(own)] if own else []) + shipped + model_name_candidates(name) + ([str(theirs)] if theirs else [])
    why = ""
    for cand in candidates:
        try:
            get_model(cand)
            return cand
        except ConfigError as exc:  # a config.json servesim cannot read: say why if nothing else fits
            why = why or (f" ({exc})" if cand.endswith(".json") else "")
        except (ValueError, OSError):
            continue
    raise ConfigError(f"model.name: {name!r} is not in the model catalog{why}; put its Hugging Face config.json "
                      f"in the run folder (config.json), or give it with --set model.name=PATH")


def _large_gpu(gpu: str) -> bool:
    """vLLM's default-limits rule: >= 70 GiB and not an A100."""
    spec = get_gpu(gpu)
    return spec.memory_bytes >= 70 * 2**30 and not spec.name.upper().startswith("A100")


def scheduler_section(server: ServerArgs, gpu: str, usage: str) -> dict:
    """The `scheduler` section: vLLM's policy and limits for the run's version, its own values first."""
    if v0_engine(server):
        # vLLM v0 without chunked prefill: whole prompts, prefill-first batches (ENGINE-SEMANTICS §1.3)
        section = {"policy": "continuous", "max_num_batched_tokens": server.max_num_batched_tokens or 2048,
                   "max_num_seqs": server.max_num_seqs or 256, "preemption": "recompute"}
        if max_paddings := v0_max_paddings(server):  # vLLM 0.2.2-0.3: padded prompt batches, padding capped
            section["max_paddings"] = max_paddings
    else:
        preset = SchedulerConfig.preset("vllm", version=engine_version(server), usage=usage, large_gpu=_large_gpu(gpu))
        budget = server.max_num_batched_tokens or preset.max_num_batched_tokens
        unchunked = not v1_chunks_prompts(server)  # v1 0.11.1+ with chunked prefill off: whole prompts
        if unchunked and not server.max_num_batched_tokens:  # vLLM's default then: at least max_model_len
            budget = max(budget, server.max_model_len or SchedulerConfig.max_model_len)
        # an unrecorded max_num_seqs is the release's default lowered to the budget, as vLLM's EngineArgs do
        section = {"policy": "vllm", "max_num_batched_tokens": budget,
                   "max_num_seqs": server.max_num_seqs or min(preset.max_num_seqs, budget), "preemption": "recompute"}
        if reserve_full_isl(server):  # vLLM 0.19+: admission needs the whole prompt's blocks free
            section["reserve_full_isl"] = True
        if unchunked:  # decodes and whole prompts share a step (not v0's prefill-only steps)
            section["enable_chunked_prefill"] = False
    if server.max_model_len:
        section["max_model_len"] = server.max_model_len
    if section["policy"] == "vllm" and async_scheduling(server):  # recorded, else the release's default
        section["async_scheduling"] = True  # a request arriving during step n joins step n+2
    return section


def replay_prefix(run: RealRun) -> tuple[int, int]:
    """(groups, prefix tokens) when every recorded request starts with one of a few equally long
    shared prefixes (a shared_prefix profile's system prompts, guidellm's prefix), else (0, 0)."""
    df = run.requests
    if not len(df) or "prefix_group" not in df or (df["prefix_group"] < 0).any():
        return 0, 0
    n = df["num_prefix_tokens"].unique()
    if len(n) != 1 or n[0] <= 0 or (df["num_prompt_tokens"] <= n[0]).any():
        return 0, 0
    return int(df["prefix_group"].nunique()), int(n[0])


def trace_file(run: RealRun, cache_dir: str | Path | None = None, strip_prefix: int = 0) -> Path:
    """The run's requests as a trace CSV in servesim's own format (cached by content), each prompt
    `strip_prefix` tokens shorter (the workload's prefix groups add them back)."""
    df = run.requests.assign(num_prompt_tokens=run.requests["num_prompt_tokens"] - strip_prefix)
    digest = hashlib.sha1(df[["arrival_time", "num_prompt_tokens", "num_output_tokens"]].to_csv().encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "servesim-fidelity"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}.csv"
    if not path.is_file():
        _atomic_trace(path, df["arrival_time"].to_numpy(), df["num_prompt_tokens"].to_numpy(),
                      df["num_output_tokens"].to_numpy())
    return path


def _atomic_trace(path: Path, arrival, prompt, output) -> None:
    """Write a trace CSV under a temporary name, then rename: parallel runs never read half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_trace_csv(tmp, arrival, prompt, output)
    os.replace(tmp, path)


def profile_trace(profile: dict, seed: int = 0, cache_dir: str | Path | None = None) -> tuple[Path, int]:
    """An inference-perf shared_prefix profile's requests as a trace CSV, and the system prompt length.

    The exact generator is run against a server that answers at once: every send time, stage start
    (after the previous stage's window plus `load.interval`) and prompt length (growing turn by turn
    in a multi-turn chat) is as inference-perf would produce against a server that keeps up. The
    trace's prompt lengths leave out the group's system prompt, which the `workload` section's
    prefix groups add back (so the prefix cache can hit on it).
    """
    wl = SharedPrefixWorkload(profile, seed=seed)
    sys_len = int(round(float(np.mean(wl.system_prompt_lens)))) if wl.system_prompt_lens else 0
    pending = sorted(wl.start(), key=lambda r: r.arrival_time)
    rows = []
    while pending:
        r = pending.pop(0)
        r.output_token_ids = [0] * r.max_tokens
        r.finish_reason = FinishReason.LENGTH
        rows.append((r.arrival_time, max(1, r.num_prompt_tokens - sys_len), r.max_tokens))
        pending.extend(wl.on_finish(r, r.arrival_time))
        pending.sort(key=lambda q: q.arrival_time)
    arr = np.array(rows, dtype=float)
    digest = hashlib.sha1(arr.tobytes()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "servesim-fidelity"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ip-{digest}.csv"
    if not path.is_file():
        _atomic_trace(path, arr[:, 0], arr[:, 1].astype(int), arr[:, 2].astype(int))
    return path, sys_len


#: why a run's profile cannot drive a simulation: neither generator reads its data
PROFILE_DATA_ERROR = ("profile.data: expected inference-perf's data.type: shared_prefix or guidellm's synthetic data "
                      "(prompt_tokens, output_tokens) with a rate-type")


def profile_workload_section(profile: dict, seed: int = 0, cache_dir: str | Path | None = None) -> dict:
    """The `workload` section closest to an inference-perf profile given as a mapping only: its
    generator's requests as a trace, with its shared-prefix groups (`config_dict_for_run` runs a
    profile file, and every guidellm profile, by its exact generator)."""
    if not (isinstance(profile.get("data"), dict) and profile["data"].get("type") == "shared_prefix"):
        raise ConfigError(PROFILE_DATA_ERROR)
    p = SharedPrefixProfile.from_dict(profile)
    path, sys_len = profile_trace(profile, seed, cache_dir)
    section = {"kind": "trace", "trace": str(path), "too_long": "keep", "seed": seed}
    if sys_len > 0:
        section.update(num_prefix_groups=p.num_groups, prefix_len=sys_len, users_per_group=p.num_prompts_per_group)
    return section


def config_dict_for_run(run: RealRun, gpu: str | None = None, workload: str = "auto",
                        cache_dir: str | Path | None = None, workload_section: dict | None = None,
                        model: str | None = None) -> dict:
    """The config (as a dict `load_config` reads) that describes `run` (`model`: a name or config.json
    path to use instead of resolving the model the run names, `resolve_model_name`).

    `workload`: "replay" (the recorded requests), "profile" (the load generator's profile) or "auto"
    (replay when per-request arrivals are known). `workload_section` replaces the workload section
    (for a caller that passes its own Workload to `simulate`).
    """
    if workload not in ("auto", "replay", "profile"):
        raise ConfigError(f"workload: {workload!r} is not allowed; choose one of auto, replay, profile")
    s = run.server
    gpu = gpu or s.gpu or DEFAULT_GPU
    usage = "llm" if run.source.startswith("llmservingsim") else "api_server"
    hardware = {"gpu": gpu, "tp": s.tensor_parallel_size}
    if s.num_gpu_blocks:
        hardware["num_gpu_blocks"] = int(s.num_gpu_blocks)
    if s.gpu_memory_utilization:
        hardware["gpu_memory_utilization"] = s.gpu_memory_utilization
    if v0_engine(s):  # the v0 engine (as `scheduler_section`): its profiling sizes the pool
        hardware["memory_profiling"] = v0_memory_profiling(s)
    model_section = {"name": model or resolve_model_name(s.model, run.path)}
    if s.kv_cache_dtype and s.kv_cache_dtype.startswith("fp8"):
        model_section["kv_cache_dtype"] = "fp8"
    data = {
        "model": model_section,
        "hardware": hardware,
        "scheduler": scheduler_section(s, gpu, usage),
        "cache": {"block_size": s.block_size, "enable_prefix_caching": bool(s.enable_prefix_caching)},
    }
    offload_backend = kv_offloading_backend(s)
    if offload_backend:  # vLLM's KV offloading: a CPU tier of the prefix cache (policies.kv_offload)
        data["cache"]["offload_size_gb"] = float(s.kv_offloading_size)
        data["cache"]["offload_backend"] = offload_backend
    if v0_engine(s):
        # the v0 block manager keeps 1% of the GPU blocks free when admitting a prompt (or swapping
        # one in), so that an admission does not at once force a decode preemption (ENGINE-SEMANTICS
        # §1.3); v1 has no watermark
        data["cache"]["watermark"] = V0_WATERMARK
    # a multi-turn chat is simulated by its generator even when its sends were measured: a replay
    # would know neither the sessions' earlier turns in each prompt nor that a turn waits for the last
    profile_file = run.profile_file or run.path / "profile.yaml"
    sp = shared_prefix_profile(run.profile) if workload == "auto" and profile_file.is_file() else None
    chat = sp is not None and sp.enable_multi_turn_chat
    use_replay = workload == "replay" or (workload == "auto" and run.has_per_request and not chat)
    if workload_section is not None:  # the caller simulates with its own Workload object
        data["workload"] = workload_section
    elif use_replay:
        if not run.has_per_request:
            raise ConfigError(f"workload: run {run.name} has no per-request arrivals to replay; use profile")
        groups, prefix = replay_prefix(run)
        data["workload"] = {"kind": "trace", "trace": str(trace_file(run, cache_dir, prefix)), "too_long": "keep"}
        if run.client_max_concurrency:  # sends made up, not recorded: the client's bound keeps them
            data["workload"]["max_concurrency"] = run.client_max_concurrency
        if groups:  # the shared prefixes, so that the prefix cache can hit on them as in the run
            data["workload"].update(num_prefix_groups=groups, prefix_len=prefix, users_per_group=1)
    else:
        if not run.profile:
            raise ConfigError(f"workload: run {run.name} has neither per-request arrivals nor a profile.yaml")
        data_section = run.profile.get("data")
        folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "servesim-fidelity"
        if profile_file.is_file() and isinstance(data_section, dict) and data_section.get("type") == "shared_prefix":
            # the exact generator: multi-turn sessions wait for their previous turn, stages drain;
            # sending what the run's client release sent, or what its measured lengths say it sent
            data["workload"] = {"kind": "inference_perf", "profile": str(write_resolved_profile(run, folder))}
        elif is_guidellm_profile(run.profile):  # its benchmarks as guidellm drives them, in the run's release
            data["workload"] = {"kind": "guidellm", "profile": str(write_resolved_profile(run, folder))}
        else:
            data["workload"] = profile_workload_section(run.profile, cache_dir=cache_dir)
    timeout, _ = client_timeout(run)
    if timeout is not None:  # the client gives up where it did (an overloaded run's failures)
        data["workload"]["request_timeout_s"] = timeout
    return data

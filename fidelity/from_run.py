"""`config_from_run(run_dir, overrides) -> Config`: a simulator config rebuilt from a real run's folder.

The folder's `exp-config.yaml` gives vLLM's server arguments (`model`, `tensor_parallelism`,
`max_model_len`, `max_num_batched_tokens`, `max_num_seqs`; optional `gpu`), and `profile.yaml` the
load generator's profile (inference-perf `data.type: shared_prefix` + `load.stages`, or guidellm's).
LLMServingSim and DistServe run folders are read too (see `fidelity.run_folders`). Unset limits take
the `vllm` preset's defaults for the run's vLLM version; the GPU comes from the run or from
`--set hardware.gpu=...` (runs that name none default to `DEFAULT_GPU`).

The workload: a run with recorded per-request arrivals is replayed (a trace CSV in our own format,
written to a cache folder); otherwise the profile is turned into the `workload` section. An
inference-perf `shared_prefix` profile becomes `kind = "inference_perf"` with the run's
`profile.yaml`: `build_workload` then runs the exact generator (multi-turn sessions whose next turn
waits for the previous answer, stages that drain before the next starts), so `servesim simulate
--from-run` keeps those semantics; a guidellm profile becomes `kind = "guidellm"` (its benchmarks
as guidellm drives them, `fidelity.sources.guidellm`). An inference-perf profile given only as a
mapping (no file) falls back to the closest plain description (`profile_workload_section`: the generator's requests as a trace, against
a server that keeps up, with shared-prefix groups). The config dict itself is `fidelity.run_config`'s
(`config_dict_for_run`, re-exported here); this module adds the measured GPU model and front end.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from calibrate.fit import fit_op
from calibrate.importers import import_profile
from calibrate.model_dims import dims_of_spec
from fidelity.client_timeout import client_timeout
from fidelity.client_workload import check_workload
from fidelity.eager_host import CUDA_GRAPHS_ORIGIN, eager_host, runs_eager
from fidelity.predict import compute_prior, host_prior
from fidelity.run_config import (DEFAULT_GPU, MODELS_DIR, SUFFIXES,  # noqa: F401 (re-exported)
                                 SUPPORTED_VERSIONS, V0_WATERMARK, config_dict_for_run, engine_version,
                                 model_name_candidates, profile_trace,
                                 profile_workload_section, replay_prefix, resolve_model_name, scheduler_section,
                                 trace_file)
from fidelity.run_folders import find_runs
from fidelity.runs import RealRun
from fidelity.sources.distserve import load_distserve_run
from fidelity.sources.vllm_server import load_server_run
from policies import ConfigError
from sim.config import load_config
from sim.notes import with_notes
from specs.gpu_spec import get_gpu
from specs.memory import bytes_per_block, weight_bytes_per_gpu


def load_run(run_dir: str | Path) -> RealRun:
    """The one run in `run_dir` (a server run folder, an LLMServingSim example or a DistServe .exp file)."""
    p = Path(run_dir)
    if not p.exists():
        raise FileNotFoundError(f"--from-run: {p}: no such folder")
    if p.is_file() and p.suffix == ".exp":
        return load_distserve_run(p)
    if (p / "exp-config.yaml").is_file():
        return load_server_run(p, require_measurements=False)
    runs = find_runs(p)
    if len(runs) != 1:
        raise ConfigError(f"--from-run: {p} holds {len(runs)} runs; give one run's folder")
    return runs[0]


def _override(overrides: Sequence[str], key: str) -> str | None:
    """The value a `--set key=value` override gives (the last one), else None."""
    values = [o.split("=", 1)[1].strip().strip('"') for o in overrides if o.replace(" ", "").startswith(key + "=")]
    return values[-1] if values else None


def config_from_run(run_dir: str | Path, overrides: Sequence[str] = (), workload: str = "auto",
                    measured_kernels: bool = True):
    """A `Config` rebuilt from the run folder's server arguments and load profile, then `overrides`.

    With `measured_kernels` (and no `hardware.latency`/`hardware.profile` override), the step
    times come from the measured per-op data `servesim reproduce` uses for that GPU, model and TP
    (`measured_profile_file`), so both commands predict with the same GPU model; without such data
    the config keeps the roofline.
    """
    run = load_run(run_dir)
    # what the run's own files cannot say (its GPU; a model servesim has no shapes for) may be given
    gpu, model = _override(overrides, "hardware.gpu"), _override(overrides, "model.name")
    data = config_dict_for_run(run, gpu=gpu, workload=workload, model=model)
    if run.server.data_parallel_size > 1:  # that many engines, requests dealt in turn (as reproduce does)
        data["cluster"] = {"num_replicas": run.server.data_parallel_size, "router": "round_robin"}
    config = load_config(data, overrides)
    measured = data["hardware"].get("num_gpu_blocks")
    moved = kv_capacity_moved(run, config, model is not None, measured or 0)
    if measured and moved and _override(overrides, "hardware.num_gpu_blocks") is None:
        del data["hardware"]["num_gpu_blocks"]  # the engine's count was of its own memory and shapes
        config = with_notes(load_config(data, overrides), [
            f"hardware: the run's KV capacity ({measured} blocks, counted by its engine) holds for its own "
            f"{', '.join(moved)}; derived again for the {', '.join(moved)} set"])
    if config.workload.kind == "inference_perf":
        check = check_workload(run)
        if check is not None:  # which client behaviour is simulated, and how it compares with the run's
            config = with_notes(config, check.lines())
    timeout, origin = client_timeout(run)
    if timeout is not None and config.workload.request_timeout_s == timeout:  # not overridden
        config = with_notes(config, [f"workload: the client gives up on a request after {timeout:g} s ({origin})"])
    chosen = any(o.replace(" ", "").startswith(("hardware.latency=", "hardware.profile=")) for o in overrides)
    if measured_kernels and not chosen and config.hardware.latency == "roofline":
        path = measured_profile_file(config, run)
        if path is not None:
            config = replace(config, hardware=replace(config.hardware, latency="profiled", profile=str(path)))
            eager = eager_host(config.hardware.gpu) if runs_eager(run) else None
            if eager is not None:
                config = with_notes(config, [
                    f"hardware: vLLM {run.server.engine_version} predates CUDA graphs ({CUDA_GRAPHS_ORIGIN}): an eager "
                    f"engine, aiconfigurator's kernels beside its launch path, host work {eager.describe()} "
                    f"({eager.origin})"])
            front = any(o.replace(" ", "").startswith("frontend.") for o in overrides)
            if not front and not config.frontend.enabled:
                prior = host_prior("aiconfigurator", run, config.hardware.gpu)
                if prior.frontend_s or prior.frontend_per_token_s:  # what lies outside the engine, as reproduce adds it
                    config = replace(config, frontend=replace(config.frontend, request_overhead_s=prior.frontend_s,
                                                              tokenize_s_per_token=prior.frontend_per_token_s))
                    config = with_notes(config, [
                        f"frontend: {prior.frontend_s * 1e3:.2f} ms + {prior.frontend_per_token_s * 1e6:.2f} us/prompt "
                        "token outside the engine: a vLLM API server's, measured on idle engines of other runs "
                        "(the idle-host layer, fidelity.predict.host_prior)"])
    return config


def kv_capacity_moved(run: RealRun, config, model_given: bool, blocks: int) -> list[str]:
    """The settings of `config` (overridden) that make the run's own count of KV `blocks` not apply:
    its GPU, TP, memory share or model. A GPU the run does not record is the one it ran on when given,
    unless those blocks alone would not fit in its memory beside the weights."""
    moved = []
    if run.server.gpu:
        if _gpu_name(run.server.gpu) != _gpu_name(config.hardware.gpu):
            moved.append("hardware.gpu")
    elif blocks:
        spec, hw = config.model.spec(), config.hardware
        need = blocks * bytes_per_block(spec, hw.tp, config.cache.block_size) + weight_bytes_per_gpu(spec, hw.tp)
        if need > hw.gpu_spec().memory_bytes:
            moved.append("hardware.gpu")
    if config.hardware.tp != run.server.tensor_parallel_size:
        moved.append("hardware.tp")
    util = run.server.gpu_memory_utilization
    if util and config.hardware.gpu_memory_utilization != util:
        moved.append("hardware.gpu_memory_utilization")
    return moved + (["model.name"] if model_given else [])


def _gpu_name(name: str) -> str:
    """The catalog's name of a GPU (aliases alike), else the name as given."""
    try:
        return get_gpu(name).name
    except ConfigError:
        return name


def measured_profile_file(config, run: RealRun | None = None, cache_dir: str | Path | None = None) -> Path | None:
    """A profile file of the config's model, GPU and TP imported from aiconfigurator's per-op data
    (`calibrate.importers`), with the engine's host time per step and the sustained-compute factor
    of its GEMMs as `reproduce` predicts them (`fidelity.predict.host_prior`, `compute_prior`:
    measured on idle engines of other runs, or documented; for a vLLM release without CUDA graphs,
    the eager engine's launch path and host work, `fidelity.eager_host`),
    cached by content; None when the extra is not installed or has no data for them."""
    try:
        eager = eager_host(config.hardware.gpu) if run is not None and runs_eager(run) else None
        prior = host_prior("aiconfigurator", run, config.hardware.gpu) if eager is None else None
        factor = compute_prior(run, config.hardware.gpu)
        dims = dims_of_spec(config.model.spec(), config.hardware.tp)
        host = list(eager.host_terms().values()) if eager is not None else [prior.schedule_s, prior.schedule_per_seq_s]
        dims_key = {**dims, "host": host, "eager": eager is not None, "compute_factor": factor}
        folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "servesim-fidelity"
        importer = Path(__file__).resolve().parents[1] / "calibrate" / "importers"
        stamp = "".join(p.read_text() for p in sorted(importer.glob("*.py")) if p.is_file())
        key = hashlib.sha1((json.dumps(dims_key, sort_keys=True) + config.hardware.gpu + stamp).encode()).hexdigest()[:16]
        path = folder / f"aiconfigurator-{config.hardware.gpu}-tp{config.hardware.tp}-{key}.json"
        if not path.is_file():
            if eager is not None:  # the eager engine's launch path and host work, in the import itself
                profile = import_profile("aiconfigurator", config.hardware.gpu, dims, config.hardware.tp,
                                         host="eager-launch", host_terms=eager.host_terms(), compute_factor=factor)
                profile.meta["host_terms_origin"] = eager.origin
            else:
                profile = import_profile("aiconfigurator", config.hardware.gpu, dims, config.hardware.tp, host="none",
                                         compute_factor=factor)
                profile.ops["step_overhead"] = fit_op("step_overhead", [
                    [n, prior.schedule_s + n * prior.schedule_per_seq_s] for n in (1, 16, 256, 4096)],
                    source=f"host time per step {prior.schedule_s * 1e3:.3f} ms + "
                           f"{prior.schedule_per_seq_s * 1e6:.0f} us/seq (fidelity.predict.host_prior)")
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            profile.save(tmp)
            os.replace(tmp, path)
        return path
    except Exception:  # noqa: BLE001 - no extra, no data for this GPU/model/TP: the roofline stays
        return None


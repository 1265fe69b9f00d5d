"""Simulate one real run from its configuration: `predict_run(run, overhead) -> Prediction`.

The pieces: the config `config_dict_for_run` rebuilds; the workload (the recorded requests, or the
load generator's profile); a GPU step-time model chosen by what measured data exists for the run's
GPU and model, most specific first:

1. `layer-profile`: LLMServingSim's per-layer vLLM profile of that GPU/model/TP (next to the run);
2. `distserve`: DistServe's fitted vLLM iteration times on A100 (next to the run);
3. `aiconfigurator`: calibrate's importer of aiconfigurator's per-op database (H100, H200, A100, B200,
   GB200, L40S, RTX PRO 6000: its `SYSTEMS`), when installed;
4. `roofline`: the config's own latency model (`sim.latency.build_latency_model`).

The GPU model is wrapped in `HostOverheadLatencyModel` (named host terms: a fit's, or `host_prior`). Data-parallel runs
(`data_parallel_size` > 1) are simulated as that many engines, requests dealt round-robin.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.importers import import_profile
from calibrate.model_dims import dims_of_spec
from fidelity.client_workload import resolved_profile
from fidelity.eager_host import CUDA_GRAPHS_ORIGIN, eager_host, runs_eager
from fidelity.host_layer import shipped_layer
from fidelity.host_overhead import HostOverhead, HostOverheadLatencyModel, apply_frontend
from fidelity.overhead_fit import hidden_parts
from fidelity.ray_serving_path import FULL_TEXT_ENTRYPOINT, serving_path_terms
from fidelity.metric_definitions import definition
from fidelity.replay import ReplayWorkload
from fidelity.run_config import PROFILE_DATA_ERROR, config_dict_for_run
from fidelity.runs import METRICS, RealRun, recorded_bool, tpot, v0_engine, v1_engine
from fidelity.sources.distserve import DistServeLatencyModel, distserve_host_prior
from fidelity.sources.guidellm import guidellm_workload, is_guidellm_profile
from fidelity.sources.inference_perf import SharedPrefixWorkload
from fidelity.sources.inference_perf_results import shared_prefix_profile
from fidelity.sources.llmservingsim import LayerProfileLatencyModel
from fidelity.ttft_parts import PARTS, predicted_parts
from policies import ConfigError
from records.files import read_json_object
from sim.config import load_config
from sim.latency import build_latency_model
from sim.latency.eager import EagerLatencyModel
from sim.latency.profiled import ProfiledLatencyModel
from sim.latency.roofline import RooflineConstants
from sim.runner import simulate
from sim.workload.concurrency import ConcurrencyCap

GPU_MODEL_KINDS = ("auto", "layer-profile", "distserve", "aiconfigurator", "aiconfigurator-eager", "roofline")
# where unfitted host terms come from: other runs (any source), documented constants, or other sources only
HOST_MODES = ("measured", "prior", "source-out")


@dataclass
class Prediction:
    """A simulated run: per-request predictions (one row per recorded request), steps, mean metrics."""

    run: RealRun
    requests: pd.DataFrame  # req_id, arrival_time, first_token_time, finish_time, ttft_s, e2e_s, tpot_s, ...
    steps: pd.DataFrame  # start, duration, gpu_s, num_tokens, num_seqs, num_sampled, engine
    gpu_model: str
    workload: str
    overhead: HostOverhead
    notes: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # where the unfitted host terms came from (source-out)
    ttft_part_origins: dict[str, str] = field(default_factory=dict)  # fidelity.ttft_parts.PARTS -> origin
    gpu_model_note: str = ""  # what the GPU step-time data holds besides a profile (report.csv column)

    def means(self) -> dict[str, float]:
        """Mean TTFT, TPOT, E2E; TPOT of the means when the run's is (`RealRun.tpot_of_means`)."""
        out = {}
        for m in METRICS:
            v = self.requests[m].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            out[m] = float(v.mean()) if v.size else float("nan")
        if self.run.tpot_of_means:
            done = self.requests[np.isfinite(self.requests["e2e_s"].to_numpy(dtype=float))]
            n = float(done["num_output_tokens"].mean()) if len(done) else float("nan")
            out["tpot_s"] = (out["e2e_s"] - out["ttft_s"]) / (n - 1) if n > 1 else float("nan")
        return out


def layer_profile_folder(run: RealRun) -> Path | None:
    """LLMServingSim's per-layer profile for the run's GPU, model and TP, if shipped next to the run."""
    for root in run.path.parents:
        perf = root / "profiler" / "perf"
        if perf.is_dir():
            model = run.server.model.split("/")[-1]
            for cand in sorted(perf.glob(f"{run.path.parent.name}/*/{model}/bf16/tp{run.server.tensor_parallel_size}")):
                return cand
            return None
    return None


def run_link(run: RealRun) -> tuple[float | None, float | None]:
    """(bytes/s, seconds) of the GPU link the run's own hardware description gives (LLMServingSim's
    cluster `config.json`: `link_bw` in GB/s, `link_latency` in ns), or (None, None)."""
    path = run.path / "config.json"
    if not path.is_file():
        return None, None
    try:
        cfg = read_json_object(path, "config.json")
    except ValueError:  # unreadable: no link given (ConfigError is a ValueError)
        return None, None
    bw, lat = cfg.get("link_bw"), cfg.get("link_latency")
    return (float(bw) * 1e9 if bw else None), (float(lat) * 1e-9 if lat is not None else None)


def distserve_profile(run: RealRun) -> Path | None:
    for root in run.path.parents:
        cand = root / "profile_data" / "profiler-a100-80g.vllm.json"
        if cand.is_file():
            return cand
    return None


_AICONFIGURATOR: dict[tuple, object] = {}  # (gpu, model, tp, factor, eager) -> Profile, or the exception raised


def _aiconfigurator_profile(gpu: str, spec, tp: int, compute_factor: float = 1.0, eager: dict | None = None):
    """calibrate's import of aiconfigurator's data (optional extra) for a `ModelSpec`, cached with
    its failures (slow to load). `eager`: host terms of an eager engine (`fidelity.eager_host`), put
    in the profile beside its launch path; else kernel time only."""
    key = (gpu, spec, tp, round(compute_factor, 6), tuple(sorted((eager or {}).items())))
    if key not in _AICONFIGURATOR:
        try:
            # kernel time only (the engine's host time: `host_prior`'s named terms or a fit's), or an
            # eager engine's launch path and host work, which no named term repeats
            host = dict(host="eager-launch", host_terms=eager) if eager is not None else dict(host="none")
            _AICONFIGURATOR[key] = import_profile("aiconfigurator", gpu, dims_of_spec(spec, tp), tp,
                                                  compute_factor=compute_factor, **host)
        except Exception as exc:  # noqa: BLE001 - any failure means "no data": fall back
            _AICONFIGURATOR[key] = exc
    hit = _AICONFIGURATOR[key]
    if isinstance(hit, Exception):
        raise hit
    return hit


def host_prior(gpu_model: str, run: RealRun | None = None, gpu: str | None = None,
               measured: bool = True) -> HostOverhead:
    """The host terms a run is predicted with when no fit is given, by GPU step-time source.

    Per-op kernel databases (`aiconfigurator`) hold no host time, so a step adds the engine's:

    - vLLM v1 (chunked prefill) on an H100, with `measured`: the per-step host time measured on
      idle engines of the shipped vLLM 0.11 H100 runs and the front-end part of their TTFTs
      (`fidelity.idle_host`; for a run timed at its client, also the client's TTFT beyond vLLM's
      span, per request and prompt token: `layer_frontend`), each the median over the runs other
      than `run` (never a run's own measurement);
    - otherwise the project's documented constants (`sim.latency.RooflineConstants`: a per-step
      and a per-sequence term, not fitted to any run).

    DistServe's coefficients (`distserve`) time vLLM v0's forward pass alone: with `measured`, the
    v0 engine's host time per running sequence and its front end, read off the timestamps of the
    *other* DistServe runs (`fidelity.sources.distserve.distserve_host_prior`).

    A fit replaces these terms rather than adding to them. The other sources time whole engine
    steps or layers (their host time is in the data), an eager engine's model holds its host work
    (`fidelity.eager_host`) and the roofline carries its own: no terms.
    """
    if gpu_model == "distserve" and measured and run is not None and distserve_profile(run) is not None:
        return distserve_host_prior(run, distserve_profile(run))
    if gpu_model != "aiconfigurator":
        return HostOverhead()

    c = RooflineConstants()
    step_s, front_s, per_token = c.step_overhead_s, 0.0, 0.0
    layer = _measured_layer(run, gpu) if measured else None
    if layer is not None:
        name = run.name if run is not None else None
        step_s = layer.host_s_for(name) if layer.host_s_for(name) is not None else step_s
        front_s, per_token = layer_frontend(layer, run, name)
    return HostOverhead(schedule_s=step_s, schedule_per_seq_s=c.per_seq_overhead_s, frontend_s=front_s,
                        frontend_per_token_s=per_token)


def client_timed(run: RealRun | None) -> bool:
    """True when the run's TTFT was timed at its client (it ends when the first chunk arrives there)."""
    return run is not None and definition(run.measured_by, "ttft_s").startswith("client")


def layer_frontend(layer, run: RealRun | None, name: str | None = None) -> tuple[float, float]:
    """(seconds, seconds per prompt token) of a vLLM v1 API server's front end from an idle-host
    layer (medians over its runs other than `name`): the span's gap between arrival and the engine
    queue (and the first token back), plus, for a run timed at its client, the line of what a
    client's TTFT holds beyond the span (its send, HTTP, tokenizing, the first chunk's way back)."""
    front = layer.frontend_s_for(name) or 0.0
    line = layer.client_frontend_for(name) if client_timed(run) else None
    return (front + line[0], line[1]) if line is not None else (front, 0.0)


def _measured_layer(run: RealRun | None, gpu: str | None, source_out: bool = False):
    """The shipped idle-engine layer when it applies to the run (vLLM v1 on an H100), else None;
    with `source_out`, None also when the layer was measured on runs of the run's own source."""
    gpu = (gpu or (run.server.gpu if run is not None else None) or "H100").upper()
    v1 = run is None or not v0_engine(run.server)
    if not (v1 and gpu.startswith("H100")):
        return None

    layer = shipped_layer()
    # a run the layer measured is of the layer's source, whatever folder it was loaded from
    if source_out and layer is not None and run is not None and (
            run.source in layer_sources(layer) or run.name in layer.to_dict()["fitted_on"]):
        return None
    return layer


def layer_sources(layer) -> set[str]:
    """The sources (campaign folders) an idle-host layer was measured on."""
    return {s.strip() for s in str(layer.source).split(",") if s.strip()}


#: our own serve stack's measured HTTP front end (`servesim serve --calibrate-frontend`): the
#: per-request time before the engine sees a prompt, used where a run's own source may not be
SERVE_STACK_FRONTEND = Path(__file__).resolve().parents[1] / "examples" / "profiles" / "tiny-llama-frontend.json"


#: our own engine's CPU calibration (`servesim calibrate`, `meta.engine_step_fit`): its host time per
#: engine step and per scheduled sequence, fitted on our engine's own steps (no serving run); the meta
#: of one named calibration, kept apart from examples/profiles so that re-measuring those does not
#: move the source-out figures
OUR_ENGINE_HOST = Path(__file__).resolve().parent / "host" / "our-engine-cpu.json"


def our_engine_host() -> dict | None:
    """`step_s` and `per_seq_s` of our engine's host time per step (`OUR_ENGINE_HOST`), or None.

    A fit's per-step constant below 0 is not host time but the ops' isolated floor coming off
    (`meta.in_step_offset_s`): the host time per step is then 0, as in the profile's `step_overhead`."""
    try:
        params = read_json_object(OUR_ENGINE_HOST, "our engine's host time")["meta"]["engine_step_fit"]["params"]
        host = {k: float(params[k]) for k in ("step_s", "per_seq_s")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {**host, "step_s": max(host["step_s"], 0.0)}


def api_server(run: RealRun) -> bool:
    """True when the run's requests came through an HTTP API server (not an offline engine)."""
    return not run.source.startswith("llmservingsim")


def serve_stack_frontend() -> dict | None:
    """The `frontend` terms of our serve stack's front-end profile (`SERVE_STACK_FRONTEND`), or None."""
    try:
        terms = read_json_object(SERVE_STACK_FRONTEND, "serve stack frontend")["frontend"]
        return {k: float(v) for k, v in terms.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def source_out_prior(gpu_model: str, run: RealRun, gpu: str | None = None) -> tuple[HostOverhead, list[str]]:
    """(host terms, what they came from) for predicting `run` with nothing measured on its own
    source (`reproduce --fit source`):

    - host time per step: an idle-host layer only if measured on other sources; else, for vLLM v1
      (chunked prefill), our own engine's host time per step and per sequence (`OUR_ENGINE_HOST`:
      its engine core, like ours, is a Python loop that schedules, prepares inputs and samples);
      else the documented constants (`sim.latency.RooflineConstants`); DistServe's coefficients
      hold the per-step constant in their intercept, so there only the per-sequence constant; an
      eager engine's model (`aiconfigurator-eager`) holds the engine's host work, so there none;
    - an API-server run's front end: for vLLM v1 on an H100, a real vLLM API server's, measured on
      requests alone in the engines of another source (the idle-host layer: the spans' gap, plus
      the client's TTFT beyond the span where the run's is the client's, `layer_frontend`); else
      our own serve stack's measured ingress (`SERVE_STACK_FRONTEND`, `request_overhead_s`), plus
      its first chunk's egress where the run's TTFT is the client's
      (`fidelity.metric_definitions`: DistServe's, inference-perf's, guidellm's);
    - a vLLM v0 engine (no chunked prefill) runs in the API server's process, as our serve stack's
      engine does: each step also pays what ours pays per streamed output and per streaming step
      (`engine_s_per_output`, `engine_s_per_step`). vLLM v1's engine core has its own process.
    """
    c = RooflineConstants()
    evidence: list[str] = []
    stack = serve_stack_frontend() if api_server(run) else None
    # a TTFT timed at the client (DistServe's, inference-perf's, guidellm's) ends when the first chunk
    # reaches it: our stack's egress of that chunk is part of it, as its ingress is
    client_side = gpu_model == "distserve" or client_timed(run)
    front, per_token, per_out, per_step = 0.0, 0.0, 0.0, 0.0
    layer = _measured_layer(run, gpu, source_out=True) if gpu_model == "aiconfigurator" else None
    if api_server(run) and layer is not None and layer.frontend_s_for(None) is not None:
        front, per_token = layer_frontend(layer, run)
        beyond = " + the client's TTFT beyond the span" if per_token else ""
        evidence.append(f"front end {front * 1e3:.1f} ms + {per_token * 1e6:.2f} us/prompt token: a vLLM API "
                        f"server's, on requests alone in the engine ({layer.source}: span gap{beyond})")
        stack = None
    if stack is not None and gpu_model in ("aiconfigurator", "aiconfigurator-eager", "distserve"):
        front = stack.get("request_overhead_s", 0.0) + (stack.get("stream_overhead_s", 0.0) if client_side else 0.0)
        evidence.append(f"front end {front * 1e3:.1f} ms: our serve stack ({SERVE_STACK_FRONTEND.name}"
                        f"{', ingress + first chunk' if client_side else ', ingress'})")
        if v0_engine(run.server):
            per_out, per_step = stack.get("engine_s_per_output", 0.0), stack.get("engine_s_per_step", 0.0)
            evidence.append(f"v0 engine in the API process: {per_out * 1e3:.2f} ms per streamed output, "
                            f"{per_step * 1e3:.3f} ms per step: our serve stack")
    ray_step, ray_seq, ray_token = 0.0, 0.0, 0.0
    ray = ray_path_terms(run) if v0_engine(run.server) else None
    if ray is not None:
        ray_step, ray_seq, ray_token, why = ray
        evidence.append(why)
    if gpu_model in ("distserve", "aiconfigurator-eager"):
        if gpu_model == "distserve":
            per_seq, why = c.per_seq_overhead_s, "per-sequence host time: documented constant " \
                                                 "(RooflineConstants.per_seq_overhead_s)"
        else:
            per_seq, why = 0.0, "the engine's host work outside the forward pass: in the GPU model (fidelity.eager_host)"
        evidence.append(why)
        return HostOverhead(schedule_s=per_step + ray_step, schedule_per_seq_s=per_seq + ray_seq,
                            sample_per_seq_s=per_out, serialize_per_context_token_s=ray_token,
                            frontend_s=front), evidence
    if gpu_model != "aiconfigurator":
        why = "the roofline carries its own host constants" if gpu_model == "roofline" else \
            "the GPU data times whole engine steps or layers"
        return HostOverhead(), [f"none: {why}"]
    ours = our_engine_host() if not v0_engine(run.server) else None
    per_seq = c.per_seq_overhead_s
    if layer is not None and layer.host_s_for(None) is not None:
        evidence.insert(0, f"host time per step: idle-host layer of {layer.source} ({', '.join(sorted(layer.per_run))})")
        step_s = layer.host_s_for(None)
    elif ours is not None:  # vLLM v1's engine core: a Python loop scheduling, preparing and sampling, as ours
        step_s, per_seq = ours["step_s"], ours["per_seq_s"]
        evidence.insert(0, f"host time per step {step_s * 1e3:.2f} ms + {per_seq * 1e3:.3f} ms per sequence: "
                           f"our engine's CPU step fit ({OUR_ENGINE_HOST.name} meta.engine_step_fit)")
    else:
        evidence.insert(0, "host time per step and per sequence: documented constants (RooflineConstants)")
        step_s = c.step_overhead_s
    return HostOverhead(schedule_s=step_s + per_step + ray_step, schedule_per_seq_s=per_seq + ray_seq,
                        sample_per_seq_s=per_out, serialize_per_context_token_s=ray_token, frontend_s=front,
                        frontend_per_token_s=per_token), evidence


def ray_path_terms(run: RealRun) -> tuple[float, float, float, str] | None:
    """What vLLM v0's Ray serving path adds to each step of `run` (`fidelity.ray_serving_path`), as
    its recorded `engine_use_ray`, `worker_use_ray` and entry point say; None without either flag."""
    def recorded(name):
        return (run.recorded_args.get(name) or (None,))[0]

    def flag(name):  # a recorded "false" is off (bool("false") is True)
        value, where = run.recorded_args.get(name) or (None, "")
        return value is not None and recorded_bool(f"{name} ({where})", value)
    return serving_path_terms(flag("engine_use_ray"), flag("worker_use_ray"),
                              recorded("entrypoint") == FULL_TEXT_ENTRYPOINT)


def compute_prior(run: RealRun | None = None, gpu: str | None = None, measured: bool = True,
                  source_out: bool = False) -> float:
    """How much slower the compute-bound share of a GEMM runs in a busy engine than aiconfigurator
    timed it alone: measured on idle engines of the other shipped runs (`fidelity.idle_host`)
    for vLLM v1 on an H100 (with `source_out`, only runs of other sources); for a release without
    CUDA graphs on an A100 or H100, the machine's factor chosen on Splitwise's step times together
    with the eager engine's host work (`fidelity.eager_host`); else 1 (as measured)."""
    host = eager_host(gpu or run.server.gpu) if measured and run is not None and runs_eager(run) else None
    if host is not None:
        return host.compute_factor
    layer = _measured_layer(run, gpu, source_out) if measured else None
    value = layer.compute_factor_for(run.name if run is not None else None) if layer is not None else None
    return value if value is not None else 1.0


def gpu_latency_model(run: RealRun, config, kind: str = "auto", compute_factor: float | None = None,
                      source_out: bool = False):
    """(step-time model, its kind) for the run's GPU and model; `compute_factor` (aiconfigurator):
    None = `compute_prior`.

    `auto` takes the most specific data there is: a per-layer profile next to the run, DistServe's
    coefficients for its OPT-13B runs, aiconfigurator's kernels (in an eager engine,
    `aiconfigurator-eager`, for a vLLM release without CUDA graphs: `fidelity.eager_host`), the
    roofline. With `source_out`, no choice made on the run's own source's measurements: DistServe's
    curves time its campaign's own engine steps (`llm_engine.step()`), so a run of a release
    without CUDA graphs takes the eager engine model instead where it can be built; asked for by
    name, DistServe's vLLM file keeps its own prefill fit (the choice of the other file's came
    from the DistServe runs' first-token gaps), and its alignment factors are divided out
    (`DISTSERVE_ALIGNMENT`: DistServe set them aligning its simulator with these runs)."""
    if kind not in GPU_MODEL_KINDS:
        raise ValueError(f"gpu_model: {kind!r} is not allowed; choose one of {', '.join(GPU_MODEL_KINDS)}")
    spec = config.model.spec()
    if kind in ("auto", "layer-profile"):
        folder = layer_profile_folder(run)
        if folder is not None:
            gpu = config.hardware.gpu_spec()
            link, latency = run_link(run)
            link = link or gpu.nvlink_bandwidth or gpu.pcie_bandwidth
            kw = {"link_latency": latency} if latency is not None else {}
            return LayerProfileLatencyModel(folder, spec.num_layers, spec.hidden_size, config.hardware.tp,
                                            spec.num_experts, spec.num_experts_per_tok, link,
                                            ep_size=run.server.data_parallel_size if run.server.enable_expert_parallel else 1,
                                            **kw), "layer-profile"
        if kind == "layer-profile":
            raise ValueError(f"gpu_model: no per-layer profile next to run {run.name}")
    wants_eager = kind == "aiconfigurator-eager" or (kind == "auto" and runs_eager(run))
    # under source-out the eager model goes before DistServe's own curve, otherwise after it
    eager = _eager_model(run, config, compute_factor, source_out, required=kind != "auto") \
        if wants_eager and (kind != "auto" or source_out) else None
    if kind in ("auto", "distserve") and eager is None:
        path = distserve_profile(run)
        if path is not None and run.server.model == "facebook/opt-13b":
            return DistServeLatencyModel(path, run.server.model, config.hardware.tp, own_prefill=source_out,
                                         pre_alignment=source_out), "distserve"
        if kind == "distserve":
            raise ValueError(f"gpu_model: no DistServe coefficients for run {run.name}")
    if eager is None and wants_eager and kind == "auto" and not source_out:
        eager = _eager_model(run, config, compute_factor, source_out, required=False)
    if eager is not None:
        return eager, "aiconfigurator-eager"
    if kind in ("auto", "aiconfigurator"):
        try:
            factor = compute_prior(run, config.hardware.gpu, source_out=source_out) if compute_factor is None \
                else compute_factor
            profile = _aiconfigurator_profile(config.hardware.gpu, spec, config.hardware.tp, factor)
            return ProfiledLatencyModel(profile, block_size=config.cache.block_size), "aiconfigurator"
        except Exception as exc:  # not installed, or no data for this GPU/model: fall through
            if kind == "aiconfigurator":
                raise ValueError(f"gpu_model: aiconfigurator has no data for {spec.name} on "
                                 f"{config.hardware.gpu} tp={config.hardware.tp} ({exc})") from None

    return build_latency_model(config), "roofline"


def _eager_model(run: RealRun, config, compute_factor: float | None, source_out: bool,
                 required: bool) -> EagerLatencyModel | None:
    """aiconfigurator's kernels in an eager engine with the host work of `fidelity.eager_host` for the
    run's GPU (`compute_factor` None: `compute_prior`), or None where it cannot be built (`required`:
    a ValueError saying why)."""
    spec, gpu, tp = config.model.spec(), config.hardware.gpu, config.hardware.tp
    host = eager_host(gpu)
    if host is None:
        if required:
            raise ValueError(f"gpu_model: no eager engine host terms for {gpu} (fidelity.eager_host covers "
                             "A100 and H100)")
        return None
    try:
        factor = compute_prior(run, gpu, source_out=source_out) if compute_factor is None else compute_factor
        profile = _aiconfigurator_profile(gpu, spec, tp, factor, eager=host.host_terms())
    except Exception as exc:  # noqa: BLE001 - not installed, or no data for this GPU/model
        if required:
            raise ValueError(f"gpu_model: aiconfigurator has no data for {spec.name} on {gpu} tp={tp} ({exc})") from None
        return None
    return EagerLatencyModel(profile, block_size=config.cache.block_size)


def eager_note(model: EagerLatencyModel, run: RealRun, gpu: str | None) -> str:
    """What the eager engine model of a run is made of, for the report."""
    launch = model.profile.meta.get("eager_launch", {})
    found = eager_host(gpu)
    host = f"{found.describe()}, {found.origin}" if found is not None else "none"
    why = (f"vLLM {run.server.engine_version} predates CUDA graphs ({CUDA_GRAPHS_ORIGIN})" if runs_eager(run)
           else "asked for")
    return (f"an eager engine ({why}): aiconfigurator's kernels overlapped with a launch path of "
            f"{launch.get('launch_s', 0.0) * 1e3:.1f} ms a step ({launch.get('source', 'none')}); host work outside "
            f"the forward pass: {host}")


def _workload(run: RealRun, requests: pd.DataFrame | None, kind: str):
    if kind == "replay":
        replay = ReplayWorkload(requests if requests is not None else run.requests)
        if run.client_max_concurrency:  # made-up sends under the client's bound (vllm bench)
            if run.server.data_parallel_size > 1:
                raise ValueError(f"run {run.name}: a client's max_concurrency over {run.server.data_parallel_size} "
                                 "data-parallel engines is not modelled (its sends are not recorded)")
            return ConcurrencyCap(replay, run.client_max_concurrency)
        return replay
    if kind == "guidellm":
        return guidellm_workload(resolved_profile(run))  # with the guidellm release the run records
    return SharedPrefixWorkload(resolved_profile(run))  # what the run's client release (or its lengths) says


def _workload_kind(run: RealRun, workload: str) -> str:
    """What `predict_run` sends: "replay" (the recorded requests), "profile" (inference-perf's
    shared_prefix generator) or "guidellm" (its benchmarks, driven by the simulated server). A
    profile neither generator reads is refused with `config_dict_for_run`'s line (not guidellm's
    complaint about a missing rate-type)."""
    # a multi-turn chat's turns carry their session's earlier turns (cached in the prefix cache, and
    # sent only after the previous answer): a replay of the sends knows neither, the generator both
    sp = shared_prefix_profile(run.profile) if workload == "auto" else None
    chat = sp is not None and sp.enable_multi_turn_chat
    if workload == "replay" or (workload == "auto" and run.has_per_request and not chat):
        return "replay"
    data = (run.profile or {}).get("data")
    if not run.profile or (isinstance(data, dict) and data.get("type") == "shared_prefix"):
        return "profile"  # (no profile: config_dict_for_run says the run has neither)
    if is_guidellm_profile(run.profile):
        return "guidellm"
    raise ConfigError(PROFILE_DATA_ERROR)


#: a workload section for a config whose simulation brings its own Workload object (load_config needs one)
STAND_IN_WORKLOAD = {"kind": "constant", "rate": 1.0, "num_requests": 1}


def why_unpredictable(run: RealRun, gpu: str | None = None, workload: str = "auto",
                       gpu_model: str = "auto") -> str | None:
    """Why `run` cannot be simulated from what it records, or None: a model servesim has no shapes
    for, a GPU or a server argument outside what it models, no requests to replay and no profile,
    or no data of the step-time source `gpu_model` names for its GPU and model.
    `reproduce` lists such a run with its reason and predicts the others, as a workload's
    unservable request is rejected and counted rather than stopping the run."""
    if not run.has_per_request and not run.profile:
        return f"run {run.name} records neither per-request arrivals nor a load profile (profile.yaml)"
    try:  # the config predict_run builds, with a stand-in workload (the run's own is read later)
        _workload_kind(run, workload)  # a profile neither generator reads is refused as simulate refuses it
        data = config_dict_for_run(run, gpu=gpu, workload=workload, workload_section=dict(STAND_IN_WORKLOAD))
        config = load_config(data)
        if run.client_max_concurrency:  # made-up sends under a client's bound: the replay must keep it
            _workload(run, None, "replay")
        if gpu_model not in ("auto", "roofline"):  # a named source must have data for this run
            gpu_latency_model(run, config, gpu_model)
    except ValueError as exc:  # a ConfigError: one line naming the field
        return str(exc)
    return None


def predict_run(run: RealRun, overhead: HostOverhead | None = None, workload: str = "auto",
                gpu: str | None = None, gpu_model: str = "auto", overrides: tuple[str, ...] = (),
                record: bool = False, host: str = "measured", compute_factor: float | None = None) -> Prediction:
    """Simulate `run` from its configuration and return the per-request predictions (`overhead`
    None: the GPU model's `host_prior`, measured on other runs or, `host="prior"`, documented, or,
    `host="source-out"`, `source_out_prior`: nothing measured on the run's own source;
    `compute_factor` None: `compute_prior` likewise)."""
    if host not in HOST_MODES:
        raise ValueError(f"host: {host!r} is not allowed; choose one of {', '.join(HOST_MODES)}")
    source_out = host == "source-out"
    measured_run = run
    if source_out:  # no server argument inferred from the source's own timings
        run = run.without_inferred_args()

    kind = _workload_kind(run, workload)
    placeholder = dict(STAND_IN_WORKLOAD) if kind == "guidellm" else None
    data = config_dict_for_run(run, gpu=gpu, workload=workload, workload_section=placeholder)
    config = load_config(data, overrides)
    dp = max(1, run.server.data_parallel_size)
    shards = [run.requests.iloc[i::dp] for i in range(dp)] if kind == "replay" else [None] * dp
    req_tables, step_tables, label, evidence = [], [], "", []
    for engine, shard in enumerate(shards):
        factor = compute_factor if compute_factor is not None else (
            compute_prior(run, config.hardware.gpu, source_out=source_out) if host != "prior" else 1.0)
        base, label = gpu_latency_model(run, config, gpu_model, compute_factor=factor, source_out=source_out)
        if overhead is None and source_out:
            overhead, evidence = source_out_prior(label, run, config.hardware.gpu)
        elif overhead is None:
            overhead = host_prior(label, run, config.hardware.gpu, measured=host == "measured")
        latency = HostOverheadLatencyModel(base, overhead, record=True)
        wl = _workload(run, shard, kind)
        result = simulate(config, latency_model=latency, workload=wl)
        req = result.requests.copy()
        req["engine"] = engine
        front = [e for e in evidence if e.startswith("front end")]  # source-out: where it came from
        parts, origins = predicted_parts(req, config.frontend if config.frontend.enabled else None,
                                         overhead.frontend_s, label, overhead.frontend_per_token_s,
                                         steps=result.steps if v1_engine(run.server) else None,
                                         frontend_origin=front[0] if front else "")
        req[list(PARTS)] = parts[list(PARTS)].to_numpy()  # TTFT's named parts (they sum to ttft_s)
        req_tables.append(req)
        steps = result.steps[["start", "duration"]].copy().reset_index(drop=True)
        log = latency.steps_log()
        if len(log) == len(steps):
            steps = pd.concat([steps, log], axis=1)
            if config.scheduler.async_scheduling:  # the part overlap hid leaves the step's equation
                steps["host_hidden"], steps["gpu_hidden"] = hidden_parts(steps, overhead)
        steps["engine"] = engine
        step_tables.append(steps)
    requests = pd.concat(req_tables, ignore_index=True)
    requests["tpot_s"] = tpot(requests["ttft_s"], requests["e2e_s"], requests["num_output_tokens"])
    requests = apply_frontend(requests, overhead)
    notes = [f"compute-bound GEMM share x {factor:.3f}"] if label.startswith("aiconfigurator") and factor != 1.0 else []
    if source_out and measured_run.inferred_args:
        evidence.append("engine defaults for " + ", ".join(sorted(measured_run.inferred_args)) +
                        " (inferred from the source's timings otherwise)")
    gpu_note = base.alignment_note() if isinstance(base, DistServeLatencyModel) else \
        eager_note(base, measured_run, config.hardware.gpu) if label == "aiconfigurator-eager" else ""
    if gpu_note and source_out:  # the report's `fitted_on` names it with the host terms' origins
        evidence.insert(0, "GPU step times: " + gpu_note)
    return Prediction(run=measured_run, requests=requests, steps=pd.concat(step_tables, ignore_index=True), gpu_model=label,
                      workload=kind, overhead=overhead, notes=notes, evidence=evidence, ttft_part_origins=origins,
                      gpu_model_note=gpu_note)

"""Importers of published per-op measurements into servesim profiles (same format as `calibrate`).

- `aiconfigurator`: the per-op database inside the PyPI package `aiconfigurator-core` (Apache-2.0;
  H100/H200/A100/B200/GB200/L40S/RTX PRO 6000 GEMM, context and generation attention, NCCL and
  vLLM custom all-reduce).
- `h100_microbench`: ../shared/data/profiles/h100-kernel-microbench (Apache-2.0; H100 GEMM and
  attention kernels).

`import_profile(source, gpu, model, tp)` dispatches by name; `kernels="vidur"` overlays Vidur's
eager-PyTorch kernels (`vidur`, continued beyond their grid by `beyond_grid`), `host="eager-launch"`
records the launch path of an engine without CUDA graphs (`eager_launch`).
"""
from __future__ import annotations

from pathlib import Path

from calibrate.importers.aiconfigurator import import_aiconfigurator
from calibrate.importers.derived import host_overhead_op
from calibrate.importers.eager_launch import add_eager_launch, host_work_ops
from calibrate.importers.h100_microbench import import_h100_microbench
from calibrate.importers.vidur import vidur_overlay
from policies import ConfigError
from sim.latency.profile import Profile

SOURCES = ("aiconfigurator", "h100-microbench")
KERNELS = ("native", "vidur")
#: `calibrate.importers.derived.HOSTS` (additive host time) plus "eager-launch" (`sim.latency.eager`)
HOSTS = ("graphs", "eager", "eager-launch", "none")
#: help of `servesim calibrate import`'s options that name these sources (the command takes them from here)
HELP = {
    "data_dir": "h100-microbench: the folder (default ../shared/data/...)",
    "kernels": "native (the source's kernel tables, default) or vidur (layer GEMMs, elementwise ops and "
               "all-reduce from vidur-per-op: eager PyTorch, 2023-era)",
    "raw_grid": "vidur: continue Vidur's grids beyond 4096 tokens with their last segment's slope (default: in "
                "proportion to the tokens, calibrate.importers.beyond_grid)",
    "host_terms": "eager-launch: host work outside the forward, ms a step, a sequence and a step with prompts "
                  "(default: with `servesim calibrate import --source aiconfigurator` on an A100 or H100, the 2023 "
                  "vLLM's terms fitted on Splitwise's step times, fidelity/host/vllm-2023-eager-host.json; else the "
                  "CUDA-graph engine's 1.5 ms + 5 us/seq)",
}


def import_profile(source: str, gpu: str, model, tp: int = 1, data_dir: str | Path | None = None,
                   host: str = "graphs", kernels: str = "native", compute_factor: float = 1.0,
                   extend_grids: bool = True, call_s: float | None = None, calls_per_layer: int | None = None,
                   host_terms: dict | None = None) -> Profile:
    """Build a profile for `model` (a known name, a config.json path, or a dims dict from
    `dims_of_spec`) at tensor parallelism `tp` on `gpu` from published data.

    `host` adds the engine's per-step host time (`calibrate.importers.derived.host_overhead_op`):
    "graphs" (a CUDA-graph engine, the default), "eager" (no CUDA graphs, NCCL all-reduce only,
    launches as an additive constant) or "none" (kernel time only). "eager-launch" is an engine
    without CUDA graphs modelled as `sim.latency.eager.EagerLatencyModel` (step = max(kernels,
    launch path) + host work outside the forward): it writes `meta.eager_launch`
    (`calibrate.importers.eager_launch.add_eager_launch`: `calls_per_layer`, default 14 / 12 at TP 1,
    x `call_s`, default the node's measured host time of one eager op call) and the host work
    outside the forward from `host_terms` ({"step_s", "per_seq_s", "prefill_s"}, seconds; default
    the CUDA-graph engine's constants of "graphs", a floor: the 2023 vLLM of the Splitwise data
    spends ~9 ms a step, `benchmarks/splitwise_check.py` prints fitted terms).

    `kernels="vidur"` replaces the layer GEMMs, elementwise ops and all-reduce with Vidur's
    eager-PyTorch measurements (`calibrate.importers.vidur`: the software of a 2023-era eager
    engine), continued in proportion to their input beyond Vidur's grid (`extend_grids=False`: the
    slope of the last grid segment); attention stays from `source`. `compute_factor`
    (aiconfigurator): the compute-bound share of each GEMM slowed by it (the clock a busy engine
    sustains).
    """
    if source not in SOURCES:
        raise ConfigError(f"source: {source!r} is not allowed; choose one of {', '.join(SOURCES)}")
    if host not in HOSTS:
        raise ConfigError(f"host: {host!r} is not allowed; choose one of {', '.join(HOSTS)}")
    if kernels not in KERNELS:
        raise ConfigError(f"kernels: {kernels!r} is not allowed; choose one of {', '.join(KERNELS)}")
    if host != "eager-launch":
        for name, v in (("call_s", call_s), ("calls_per_layer", calls_per_layer), ("host_terms", host_terms)):
            if v is not None:
                raise ConfigError(f"{name}: only used with host='eager-launch', not host={host!r}")
    elif host_terms is not None:
        want = ("step_s", "per_seq_s", "prefill_s")
        if not isinstance(host_terms, dict) or sorted(host_terms) != sorted(want):
            raise ConfigError(f"host_terms: expected an object with exactly {', '.join(want)} (seconds), "
                              f"got {host_terms!r}")
    if source == "aiconfigurator":
        profile = import_aiconfigurator(gpu, model, tp, nccl_only=host == "eager", compute_factor=compute_factor)
    else:
        profile = import_h100_microbench(gpu, model, tp, data_dir=data_dir)
    if kernels == "vidur":
        profile.meta.setdefault("gpu", gpu.upper().replace("-SXM", "").replace("_SXM", ""))
        vidur_overlay(profile, extend=extend_grids)
    if host == "eager-launch":
        add_eager_launch(profile, gpu, call_s=call_s, calls_per_layer=calls_per_layer)
        if host_terms is None:
            profile.ops["step_overhead"] = host_overhead_op(profile.model, "graphs")
        else:
            profile.ops.update(host_work_ops(host_terms["step_s"], host_terms["per_seq_s"], host_terms["prefill_s"],
                                             "given: host work outside the forward pass"))
    else:
        op = host_overhead_op(profile.model, host)
        if op is not None:
            profile.ops["step_overhead"] = op
    profile.meta["host"] = host
    return profile

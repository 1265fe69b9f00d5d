"""The host launch path of an eager engine (no CUDA graphs), for profiles of 2023-era engines.

Without CUDA graphs the host issues every kernel of every layer from Python while the GPU runs what
was already issued, so a step lasts ``max(GPU time of the kernels, host time to issue them) + host
work outside the forward`` (`sim.latency.eager.EagerLatencyModel`): small or heavily sharded steps
wait for the host, large ones for the GPU. This module gives the launch path, layers x op calls a
layer (`add_eager_launch`) x host time of one eager op call (`eager_call_host_s`), from
measurements that are not the data it is checked against; it does not depend on the batch (the
same ops are issued for one sequence or 64). Nothing here is fitted to step times.

The host work *outside* the forward pass (scheduling, input preparation, sampling; the GPU idles)
is a separate term: `host_work_ops` turns a per-step, per-sequence and per-prompt-step constant into
the profile's `step_overhead` and `prefill_overhead` (`fidelity.sources.splitwise` fits them).
Figures measured with it: docs/results/2026-12-02-docstring-history.md.
"""
from __future__ import annotations

import pandas as pd

from calibrate.fit import fit_op
from calibrate.importers.aiconfigurator import package_dir, system_of
from policies import ConfigError
from sim.latency.profile import Profile, layer_kind

#: kernel-issuing op calls per decoder layer of an eager 2023 vLLM Llama layer (see `add_eager_launch`)
CALLS_PER_LAYER = 14
CALLS_PER_LAYER_TP1 = 12
SMALL_MESSAGE_BYTES = 65536


def eager_call_host_s(gpu: str) -> tuple[float, str]:
    """(seconds, source) of host time per eager op call on `gpu`'s node, from aiconfigurator-core.

    aiconfigurator-core times vLLM's custom all-reduce both eagerly and inside a CUDA graph
    (``comm/vllm/<version>/custom_allreduce_perf.parquet``, backends ``vllm_eager`` / ``vllm_graph``).
    For small messages (<= 64 KB) the kernel is a few us, so the median of (eager - graph) over sizes,
    GPU counts and vLLM versions is what issuing one op from Python costs on that node. It is the only
    measured per-call host cost of an eager op on these machines in the data here; a bare `F.linear`
    issues faster, a Python-level module call slower, so it stands for the average call.
    """
    key, system_name = system_of(gpu)
    root = package_dir() / "systems" / "data" / system_name / "comm" / "vllm"
    deltas, versions = [], []
    for path in sorted(root.glob("*/custom_allreduce_perf.parquet")) if root.is_dir() else []:
        df = pd.read_parquet(path)
        if "backend" not in df.columns:
            continue
        df = df[(df.op_name == "all_reduce") & (df.message_size <= SMALL_MESSAGE_BYTES)]
        med = df.groupby(["backend", "num_gpus", "message_size"]).latency.median().unstack(0)
        eager = [c for c in med.columns if str(c).endswith("eager")]
        graph = [c for c in med.columns if str(c).endswith("graph")]
        if not eager or not graph:
            continue
        d = (med[eager[0]] - med[graph[0]]).dropna()
        deltas.extend(float(v) * 1e-3 for v in d)  # ms -> s
        versions.append(path.parent.name)
    if not deltas:
        raise ConfigError(f"gpu: aiconfigurator-core has no eager and CUDA-graph all-reduce timings for {key}")
    deltas.sort()
    n = len(deltas)
    median = deltas[n // 2] if n % 2 else 0.5 * (deltas[n // 2 - 1] + deltas[n // 2])
    return median, (f"aiconfigurator-core {system_name} comm/vllm {'/'.join(versions)} custom all-reduce: "
                    f"eager - CUDA-graph latency, median over messages <= {SMALL_MESSAGE_BYTES // 1024} KB")


def add_eager_launch(profile: Profile, gpu: str | None = None, call_s: float | None = None,
                     calls_per_layer: int | None = None) -> dict:
    """Record the eager launch path in `profile.meta["eager_launch"]` (in place) and return it.

    `call_s` defaults to `eager_call_host_s(gpu)`; `calls_per_layer` to 14 (12 at TP 1): the
    kernel-issuing op calls of a Llama decoder layer in the eager vLLM of 2023 (0.1-0.2,
    `LlamaDecoderLayer`): input RMSNorm, QKV `F.linear`, rotary, `reshape_and_cache`, paged attention,
    O `F.linear`, its all-reduce, residual add, post-attention RMSNorm, gate/up `F.linear`,
    `silu_and_mul`, down `F.linear`, its all-reduce, residual add (no all-reduces at TP 1). Views,
    splits and `torch.empty` allocations issue no kernel and are not counted. A layer with learned
    positions (OPT: LayerNorm, fc1, ReLU, fc2; the positions added once at the embedding) issues the
    same calls less the rotary one.
    """
    tp = profile.model["tensor_parallel_size"]
    layers = profile.model["num_hidden_layers"]
    what = "given"
    if calls_per_layer is None:
        what = "eager vLLM 0.1-0.2 Llama layer"
        calls_per_layer = CALLS_PER_LAYER if tp > 1 else CALLS_PER_LAYER_TP1
        if layer_kind(profile.model, "position_embedding") == "learned":  # no rotary call a layer
            calls_per_layer, what = calls_per_layer - 1, "eager vLLM 0.1-0.2 OPT layer: no rotary"
    if isinstance(calls_per_layer, bool) or not isinstance(calls_per_layer, int) or calls_per_layer < 1:
        raise ConfigError(f"calls_per_layer: expected a positive integer, got {calls_per_layer!r}")
    if call_s is None:
        call_s, source = eager_call_host_s(gpu or str(profile.meta.get("gpu", "")))
    else:
        if not call_s > 0:
            raise ConfigError(f"call_s: expected a positive number of seconds, got {call_s!r}")
        source = "given"
    launch = {"calls_per_layer": calls_per_layer, "call_s": call_s, "num_layers": layers,
              "launch_s": layers * calls_per_layer * call_s,
              "source": f"{calls_per_layer} op calls a layer ({what}) x {call_s * 1e6:.1f} us a call ({source})"}
    profile.meta["eager_launch"] = launch
    return launch


def host_work_ops(step_s: float, per_seq_s: float, prefill_s: float, source: str) -> dict:
    """`step_overhead` (step_s + per_seq_s x sequences) and `prefill_overhead` (prefill_s a step with
    prompts): the engine's host work outside the forward pass, during which the GPU idles."""
    for name, v in (("step_s", step_s), ("per_seq_s", per_seq_s), ("prefill_s", prefill_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
            raise ConfigError(f"host_terms.{name}: expected seconds >= 0, got {v!r}")
    return {"step_overhead": fit_op("step_overhead", [[1, step_s + per_seq_s], [64, step_s + 64 * per_seq_s]],
                                    source=source),
            "prefill_overhead": fit_op("prefill_overhead", [[1, prefill_s], [64, prefill_s]], source=source)}

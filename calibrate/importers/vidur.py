"""Eager-engine kernel and all-reduce times from Vidur's profiling data (an overlay on another import).

../shared/data/profiles/vidur-per-op (github.com/microsoft/vidur `data/profiling/`, MIT) holds
per-op GPU times measured through a PyTorch reference model of each Llama-family network
(`F.linear` through cuBLAS, norms / rotary / SiLU / residual add as separate kernels, 2023-24
software) at TP 1/2/4/8, and `torch.distributed.all_reduce` (NCCL) times from Python on DGX nodes:
the software of an *eager* engine of that era (vLLM 0.1-0.2: no CUDA graphs, no custom all-reduce).
For such engines `vidur_overlay` replaces the layer's four GEMMs, activation, norms, rotary and
residual adds with Vidur's medians for the same model and TP (matched by dims, not by name), and
the all-reduce with Vidur's NCCL table for the node (`h100_dgx` / `a100_dgx`), whose Python-side
call costs tens of us even for a few KB, which a kernel-only table leaves out. Attention stays from
the base import (Vidur's covers one A100 shape). Beyond the last measured size each overlaid curve
continues in proportion to its input (`calibrate.importers.beyond_grid`; `extend=False` keeps the
last segment's slope). Nothing here is fitted to an end-to-end measurement; the numbers are Vidur's
medians as measured (figures: docs/results/2026-12-02-docstring-history.md).
"""
from __future__ import annotations

import csv
from pathlib import Path

from calibrate.fit import fit_op
from calibrate.importers.beyond_grid import extend_dense_grids
from calibrate.importers.measured_table import read_rows
from calibrate.importers.shared_data import shared_data_dir
from policies import ConfigError
from sim.latency.profile import Profile, layer_kind

DEFAULT_DIR = shared_data_dir() / "profiles" / "vidur-per-op"
GPUS = {"H100": "h100", "A100": "a100"}
# Vidur op name -> servesim op (post_attention_layernorm has the same shape as input_layernorm;
# servesim counts input_norm twice a layer and residual_add twice)
OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
       "mlp_down_proj": "down_proj", "mlp_act": "act", "input_layernorm": "input_norm", "attn_rope": "rotary",
       "add": "residual_add", "emb": "embed"}
#: the median column of each op (blank where Vidur did not time that op at that size)
MEDIANS = tuple(f"time_stats.{vop}.median" for vop in OPS)
AR_MEDIAN = "time_stats.all_reduce.median"
MS = 1e-3


#: the columns of a model's mlp.csv that say which model it timed, and at which TP
DIM_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd")


def _find_mlp_csv(root: Path, gpu_dir: str, dims: dict) -> tuple[Path, list[dict]]:
    """The mlp.csv whose model has `dims`' heads, KV heads and widths (by its first row), and its
    rows, checked (`calibrate.importers.measured_table`)."""
    want = (dims["num_attention_heads"], dims["num_key_value_heads"], dims["hidden_size"], dims["intermediate_size"])
    for path in sorted((root / "compute" / gpu_dir).rglob("mlp.csv")):
        with open(path, newline="") as f:
            row = next(csv.DictReader(f), None)
        try:
            found = row is not None and tuple(int(float(row[k])) for k in DIM_COLUMNS) == want
        except (KeyError, TypeError, ValueError):  # a damaged file: say what it lacks
            found = True
        if found:
            return path, read_rows(path, DIM_COLUMNS + ("num_tokens", "num_tensor_parallel_workers") + MEDIANS,
                                   optional=MEDIANS, label="data_dir")
    raise ConfigError(f"model: vidur-per-op has no {gpu_dir} per-op data for {dims['name']} (heads/kv heads/hidden/"
                      f"intermediate {want})")


def _medians(rows: list[dict], key: str, col: str) -> list[list[float]]:
    """[x, seconds] rows: every measured row kept (fit_op takes per-x medians; blank cells skipped)."""
    return [[r[key], r[col] * MS] for r in rows if r[col] is not None]


def vidur_overlay(profile: Profile, data_dir: str | Path | None = None, extend: bool = True) -> Profile:
    """Replace `profile`'s layer GEMMs, elementwise ops and all-reduce with Vidur's eager measurements
    (continued in proportion to their input beyond Vidur's grid unless `extend` is False)."""
    if layer_kind(profile.model, "mlp_kind") != "gated":  # matched by dims alone, a gated layer would stand in
        raise ConfigError(f"kernels: vidur-per-op times gated (Llama-family) MLPs only, not the "
                          f"{profile.model['mlp_kind']} MLP of {profile.model.get('name', 'this model')}")
    if layer_kind(profile.model, "quantization") != "none":  # its 16-bit GEMMs would replace the FP8 ones
        raise ConfigError(f"kernels: vidur-per-op times 16-bit GEMMs, not the {profile.model['quantization']} "
                          f"weights of {profile.model.get('name', 'this model')}")
    if profile.model.get("num_experts"):  # its dense MLP GEMMs would replace the fused MoE block
        raise ConfigError(f"kernels: vidur-per-op times dense MLPs only, not the {profile.model['num_experts']}-expert "
                          f"MoE of {profile.model.get('name', 'this model')}")
    root = Path(data_dir) if data_dir else DEFAULT_DIR
    if not root.is_dir():
        raise ConfigError(f"data_dir: vidur-per-op data not found at {root}")
    gpu = str(profile.meta.get("gpu", "")).upper()
    if gpu not in GPUS:
        raise ConfigError(f"gpu: vidur-per-op covers {', '.join(GPUS)}, not {gpu!r}")
    dims = profile.model
    tp = dims["tensor_parallel_size"]
    path, rows = _find_mlp_csv(root, GPUS[gpu], dims)
    rows = [r for r in rows if int(r["num_tensor_parallel_workers"]) == tp]
    if not rows:
        raise ConfigError(f"tp: vidur-per-op {path.parent.name} has no data at tensor parallelism {tp}")
    src = f"vidur-per-op {path.relative_to(root)}"
    for vop, op in OPS.items():
        pts = _medians(rows, "num_tokens", f"time_stats.{vop}.median")
        if pts:
            profile.ops[op] = fit_op(op, pts, source=f"{src} {vop} (eager PyTorch)")
    if tp > 1:
        ar_path = root / "network" / f"{GPUS[gpu]}_dgx" / "all_reduce.csv"
        # one node only: the A100 table also has the same worker counts spread over nodes
        # (devices_per_node < num_workers), i.e. over the network, ~10x slower
        ar = [r for r in read_rows(ar_path, ("num_workers", "devices_per_node", "size", AR_MEDIAN), label="data_dir")
              if int(r["num_workers"]) == tp and int(r["devices_per_node"]) == tp]
        if not ar:
            raise ConfigError(f"tp: vidur-per-op {ar_path.parent.name} has no all-reduce over {tp} GPUs")
        profile.ops["all_reduce"] = fit_op("all_reduce", _medians(ar, "size", AR_MEDIAN),
                                           source=f"vidur-per-op {ar_path.relative_to(root)} (torch.distributed "
                                                  "NCCL called from Python)")
    if extend:
        extend_dense_grids(profile, source_prefix="vidur-per-op")
    profile.meta["kernels"] = "vidur"
    profile.meta["notes"] = (str(profile.meta.get("notes", "")) + "; layer GEMMs, elementwise ops and all-reduce from "
                             "vidur-per-op (eager PyTorch, torch.distributed NCCL)").lstrip("; ")
    return profile

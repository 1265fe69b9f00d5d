"""Import the per-op database of `aiconfigurator-core` (NVIDIA, Apache-2.0) into a servesim profile.

The wheel ships measured kernel latencies (milliseconds) under
``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/*.parquet``:

- ``gemm/.../gemm_perf.parquet``: m, n, k, latency for bf16 ``torch.nn.functional.linear`` (and fp8)
  over a grid of n, k in {32..65536} and m in {1..32768}. A model's per-rank (k, n) rarely sits on the
  grid, so each GEMM is interpolated bilinearly in (n, k) at every grid m: at fixed m a GEMM's time is
  close to linear in n and in k once the tile is filled, and the bracketing grid points are at most
  a factor 1.5 apart.
- ``attention/.../context_attention_perf.parquet``: batch_size x isl prefills (``step`` 0), per-rank
  heads/KV heads/head dim. Rows become per-sequence points ``(isl, isl, latency / batch_size)``.
- ``attention/.../generation_attention_perf.parquet``: batch_size x KV length (``step``) decodes.
- ``comm/vllm/*/custom_allreduce_perf.parquet`` and ``comm/nccl/*/nccl_perf.parquet``: all-reduce
  over message bytes for 2/4/8 GPUs; vLLM uses its custom kernel for small messages and NCCL for
  large ones, so the curve takes the faster of the two at each size.

MoE, MLA and the other tables are not imported: `ProfiledLatencyModel` models dense Llama-family
layers. Norms, rotary, activation, KV writes, embedding and sampling are derived from the system's
memory bandwidth (`calibrate.importers.derived`); there is no per-step host overhead in the data.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
from pathlib import Path

from calibrate.fit import fit_op
from calibrate.importers.derived import derived_ops
from calibrate.model_dims import per_rank_shapes, resolve_model
from policies import ConfigError
from sim.latency.profiled import Profile

SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "A100": "a100_sxm"}
FRAMEWORKS = ("vllm", "sglang", "trtllm")  # preference order: servesim mirrors vLLM
MS = 1e-3


def package_dir() -> Path:
    """The installed `aiconfigurator_core` folder (without importing its compiled module)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("source: aiconfigurator needs the PyPI package aiconfigurator-core; "
                          "pip install 'servesim[aiconfigurator]'")
    return Path(list(spec.submodule_search_locations)[0])


def _version_key(v: str) -> tuple:
    parts = []
    for p in v.replace("rc", ".").replace("post", ".").split("."):
        parts.append(int(p) if p.isdigit() else -1)
    return tuple(parts)


def _table(system_dir: Path, op: str, filename: str, frameworks=FRAMEWORKS) -> tuple[Path, str]:
    """The newest `filename` of the most preferred framework that has it; (path, 'framework-version')."""
    for fw in frameworks:
        root = system_dir / op / fw
        if not root.is_dir():
            continue
        for version in sorted((d.name for d in root.iterdir() if d.is_dir()), key=_version_key, reverse=True):
            path = root / version / filename
            if path.is_file():
                return path, f"{fw}-{version}"
    raise ConfigError(f"gpu: {system_dir.name} has no {op}/{filename} in aiconfigurator-core")


def _interp_gemm(df, k: int, n: int) -> list[list[float]]:
    """[[m, seconds]] for a (k, n) GEMM, bilinear in (n, k) between the bracketing grid shapes."""
    import numpy as np

    ns, ks = np.array(sorted(df.n.unique())), np.array(sorted(df.k.unique()))

    def bracket(grid, v):
        if v <= grid[0]:
            return grid[0], grid[0], v / grid[0]  # scale below the grid: time ~ proportional
        if v >= grid[-1]:
            return grid[-1], grid[-1], v / grid[-1]
        i = int(np.searchsorted(grid, v))
        if grid[i] == v:
            return v, v, 1.0
        return grid[i - 1], grid[i], 1.0

    n0, n1, n_scale = bracket(ns, n)
    k0, k1, k_scale = bracket(ks, k)
    table = df.pivot_table(index="m", columns=["n", "k"], values="latency", aggfunc="median")
    wn = 0.0 if n1 == n0 else (n - n0) / (n1 - n0)
    wk = 0.0 if k1 == k0 else (k - k0) / (k1 - k0)
    rows = []
    for m, row in table.iterrows():
        try:
            corners = [row[(n0, k0)], row[(n1, k0)], row[(n0, k1)], row[(n1, k1)]]
        except KeyError:
            continue
        if any(c != c for c in corners):  # NaN: that grid cell was not measured at this m
            continue
        t = ((1 - wn) * (1 - wk) * corners[0] + wn * (1 - wk) * corners[1]
             + (1 - wn) * wk * corners[2] + wn * wk * corners[3])
        rows.append([float(m), float(t) * n_scale * k_scale * MS])
    return rows


def import_aiconfigurator(gpu: str, model: str, tp: int = 1, nccl_only: bool = False) -> Profile:
    """Profile of `model` at tensor parallelism `tp` on `gpu` (H100, H200 or A100) from aiconfigurator data.

    `nccl_only`: all-reduce from the NCCL table alone (engines without vLLM's custom all-reduce).
    """
    import pandas as pd
    import yaml

    key = gpu.upper().replace("-SXM", "").replace("_SXM", "")
    if key not in SYSTEMS:
        raise ConfigError(f"gpu: {gpu!r} is not allowed; choose one of {', '.join(SYSTEMS)}")
    dims = resolve_model(model, tp)
    root = package_dir() / "systems"
    system_dir = root / "data" / SYSTEMS[key]
    system = yaml.safe_load((root / f"{SYSTEMS[key]}.yaml").read_text())
    ops = {}

    # GEMMs
    gemm_path, gemm_src = _table(system_dir, "gemm", "gemm_perf.parquet")
    gemm = pd.read_parquet(gemm_path)
    gemm = gemm[(gemm.gemm_dtype == "bfloat16") & (gemm.kernel_source == "torch.nn.functional.linear")]
    if gemm.empty:
        gemm = pd.read_parquet(gemm_path)
        gemm = gemm[gemm.gemm_dtype == "bfloat16"]
    device_name = str(gemm.device.iloc[0])
    for op, (k, n) in per_rank_shapes(dims).items():
        ops[op] = fit_op(op, _interp_gemm(gemm, k, n), source=f"aiconfigurator {gemm_src} gemm (k={k}, n={n})")

    # attention, per-rank head counts
    heads = dims["num_attention_heads"] // tp
    kv_heads = max(dims["num_key_value_heads"] // tp, 1)
    hd = dims["head_dim"]

    def attn_rows(filename):
        path, src = _table(system_dir, "attention", filename)
        df = pd.read_parquet(path)
        keep = (df.head_dim == hd) & (df.num_heads == heads)
        for col, want in (("attn_dtype", "bfloat16"), ("kv_cache_dtype", "bfloat16"), ("window_size", 0)):
            if col in df.columns:  # older tables (A100) lack some columns
                keep &= df[col] == want
        df = df[keep]
        exact = df[df.num_key_value_heads == kv_heads]
        if exact.empty:
            raise ConfigError(f"model: aiconfigurator {src} has no {filename.split('_')[0]} attention for "
                              f"{heads} heads / {kv_heads} KV heads / head_dim {hd} per rank (tp={tp})")
        sources = sorted(exact.kernel_source.unique())
        exact = exact[exact.kernel_source == sources[0]]  # one kernel (fa3 before fa4)
        return exact, f"aiconfigurator {src} {sources[0]}"

    ctx, src = attn_rows("context_attention_perf.parquet")
    ctx = ctx[ctx.step == 0]
    pts = [[float(r.isl), float(r.isl), float(r.latency) * MS / int(r.batch_size)] for r in ctx.itertuples()]
    ops["attn_prefill"] = fit_op("attn_prefill", pts, source=f"{src} context attention, per sequence")
    gen, src = attn_rows("generation_attention_perf.parquet")
    pts = [[float(r.batch_size), float(r.step), float(r.latency) * MS] for r in gen.itertuples()]
    ops["attn_decode"] = fit_op("attn_decode", pts, source=f"{src} generation attention")

    # all-reduce: the faster of vLLM's custom kernel (eager) and NCCL at each message size
    if tp > 1:
        best: dict[int, float] = {}
        srcs = []
        tables = [("comm", "nccl_perf.parquet", ("nccl",))]
        if not nccl_only:
            tables.insert(0, ("comm", "custom_allreduce_perf.parquet", ("vllm", "sglang", "trtllm")))
        for op_dir, fname, fws in tables:
            try:
                path, src = _table(system_dir, op_dir, fname, fws)
            except ConfigError:
                continue
            df = pd.read_parquet(path)
            df = df[(df.op_name == "all_reduce") & (df.num_gpus == tp)]
            if "backend" in df.columns:
                df = df[~df.backend.astype(str).str.contains("graph")]
            if "nccl_dtype" in df.columns:
                df = df[df.nccl_dtype.isin(["half", "bfloat16"])]
            if df.empty:
                continue
            srcs.append(src)
            for size, lat in df.groupby("message_size").latency.median().items():
                best[int(size)] = min(best.get(int(size), float("inf")), float(lat) * MS)
        if not best:
            raise ConfigError(f"tp: aiconfigurator has no all-reduce data for {tp} GPUs on {key}")
        ops["all_reduce"] = fit_op("all_reduce", [[float(s), t] for s, t in sorted(best.items())],
                                   source=f"aiconfigurator {' / '.join(srcs)} all_reduce"
                                   + (" (NCCL only)" if nccl_only else " (faster of custom and NCCL)"))

    g = system["gpu"]
    ops.update(derived_ops(dims, float(g["mem_bw"]), float(g.get("mem_bw_empirical_scaling_factor", 0.8)),
                           float(g.get("mem_empirical_constant_latency", 3e-6)), f"aiconfigurator {key} system"))
    try:
        from importlib.metadata import version as _pkg_version

        pkg = _pkg_version("aiconfigurator-core")
    except Exception:  # noqa: BLE001 - metadata is nice-to-have
        pkg = None
    meta = {
        "device": device_name, "torch_version": None, "driver": None, "dtype": "bfloat16",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": f"aiconfigurator-core {pkg} ({gemm_src})", "license": "Apache-2.0 (aiconfigurator-core data)",
        "gpu": key, "notes": "per-op kernel latencies measured by NVIDIA; elementwise ops and host time derived",
    }
    return Profile(meta=meta, model=dims, ops=ops)

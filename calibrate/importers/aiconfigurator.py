"""Import the per-op database of `aiconfigurator-core` (NVIDIA, Apache-2.0) into a servesim profile.

Measured kernel latencies (ms), ``aiconfigurator_core/systems/data/<system>/<op>/<fw>/<ver>/*.parquet``:

- ``gemm/.../gemm_perf.parquet``: bf16 (and fp8) `F.linear` over a grid of m, n, k; a model's
  per-rank (k, n) is interpolated between grid shapes (`_interp_gemm`).
- ``attention/.../context_attention_perf.parquet``: whole prefills, charged to chunks by equal causal
  work (`chunked_prefill_points`); ``generation_attention_perf.parquet``: decodes on a batch x KV
  length triangle (`complete_decode_grid`); missing head shapes by the kernel's work (`attention_rows`).
- ``comm/vllm/*/custom_allreduce_perf.parquet``, ``comm/nccl/*/nccl_perf.parquet``: all-reduce
  over bytes for 2/4/8 GPUs, the faster of vLLM's custom kernel (its ``vllm_graph`` rows) and NCCL
  at each size, as vLLM picks; an eager engine (`nccl_only`) gets NCCL alone.
- ``moe/vllm/*/moe_perf.parquet``: vLLM's fused MoE, for Mixtral-style models (`moe_ops`).
- FP8 weights scaled per tensor or channel (`quantization` "fp8"): the layer GEMMs from the gemm
  table's fp8 rows (``CutlassFP8ScaledMMLinearKernel``, vLLM's linear method for them); the LM head
  stays 16-bit, as vLLM leaves it. Refused: block-scaled FP8 ("fp8_block"; vLLM runs it on three
  kernels by token count, each timed here over part of the grid), and a MoE's FP8 experts (the moe
  table's fp8 rows read 1.3-3.3x its bf16 rows at every token count from 1 to 8192, for every
  shape, where FP8 reads half the bytes at twice the tensor-core rate: not vLLM's FP8 MoE as
  served, whatever the collector ran). Integer weights (w4a16, w8a16) are refused: no table
  times their GEMMs.
- An FP8 KV cache (`kv_cache_dtype` "fp8"): attention from the rows of an fp8 cache (16-bit
  queries), which read half the bytes and dequantize them.
Not imported: MLA and the other tables; elementwise ops, embedding and sampling come from memory
bandwidth (`calibrate.importers.derived`); the data has no host overhead.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import math
from importlib.metadata import version as _pkg_version
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibrate.fit import fit_op, fit_pwl
from calibrate.importers.derived import derived_ops
from calibrate.model_dims import per_rank_shapes, resolve_model
from policies import ConfigError
from sim.latency.profile import Profile, layer_kind
from specs import get_gpu

#: servesim's GPU name (specs' catalog, "-SXM" dropped) -> the aiconfigurator system whose vLLM tables
#: it imports; A100 is the 80 GB SXM card (the 40 GB one has less bandwidth: not it)
SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "A100": "a100_sxm", "B200": "b200_sxm", "GB200": "gb200",
           "L40S": "l40s", "RTX-PRO-6000": "rtx_pro_6000_server"}


def system_of(gpu: str) -> tuple[str, str]:
    """(the `SYSTEMS` name, the aiconfigurator system) of `gpu`, spelled as the GPU catalog or a run
    spells it ("H100-SXM", "RTXPRO6000", "A100-80G"); refused with the names allowed."""
    try:
        name = get_gpu(gpu).name
    except ValueError:  # not in the catalog: its own spelling
        name = str(gpu)
    key = name.upper().replace("-SXM", "").replace("_SXM", "").removesuffix("-80G")
    if key not in SYSTEMS:
        raise ConfigError(f"gpu: {gpu!r} is not allowed; choose one of {', '.join(SYSTEMS)}")
    return key, SYSTEMS[key]
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
    """[[m, seconds]] for a (k, n) GEMM, bilinear in (n, k) between the bracketing grid shapes.

    The grid is n, k in {32..65536}, m in {1..32768}; a model's per-rank (k, n) rarely sits on it. At a
    fixed m a GEMM's time is close to linear in n and in k once the tile is filled, and the bracketing
    grid points are at most a factor 1.5 apart.
    """
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


def attention_rows(df, heads: int, kv_heads: int):
    """(rows, how) of attention timings for `heads` query heads and `kv_heads` KV heads per rank.

    `df` holds one table's rows of one head dim (columns num_heads, num_key_value_heads,
    kernel_source, batch_size, isl, step, latency). The database covers common per-rank shapes
    only, so a missing one is derived from measured shapes by the work each kernel does, never by
    falling back to a roofline:

    1. the shape itself;
    2. the same KV heads, interpolated linearly in query heads between the nearest measured shapes
       on either side (at a fixed KV read, the Q.K and P.V work grows with the query heads);
    3. the same query heads per KV head (g = heads / kv_heads) at k' KV heads, with the batch
       rescaled: FlashAttention's work units are (sequence, KV head) pairs of g query heads each,
       so b sequences of our shape are b x kv_heads / k' sequences of the measured one, at the
       same latency (an MHA model's 32 KV heads are four 8-KV-head batches' worth of units).

    Returns (None, "") when no rule applies. `batch_size` of the rows is float under rule 3.
    """
    if df.empty:
        return None, ""
    kernel = sorted(df.kernel_source.unique())[0]  # one kernel (fa3 before fa4)
    df = df[df.kernel_source == kernel]
    shapes = set(zip(df.num_heads.astype(int), df.num_key_value_heads.astype(int)))
    cols = ["batch_size", "isl", "step", "latency"]

    def of(h, k):
        return df[(df.num_heads == h) & (df.num_key_value_heads == k)][cols].groupby(
            ["batch_size", "isl", "step"], as_index=False).latency.median()

    if (heads, kv_heads) in shapes:
        return of(heads, kv_heads), kernel
    same_kv = sorted(h for h, k in shapes if k == kv_heads)
    lo = [h for h in same_kv if h < heads]
    hi = [h for h in same_kv if h > heads]
    if lo and hi:
        h0, h1 = lo[-1], hi[0]
        both = of(h0, kv_heads).merge(of(h1, kv_heads), on=["batch_size", "isl", "step"], suffixes=("_0", "_1"))
        if not both.empty:
            w = (heads - h0) / (h1 - h0)
            both["latency"] = (1 - w) * both.latency_0 + w * both.latency_1
            return both[cols], f"{kernel}, interpolated in query heads between {h0} and {h1} ({kv_heads} KV heads)"
    same_g = [(h, k) for h, k in shapes if h * kv_heads == heads * k]
    if same_g:
        # the nearest KV-head count (smallest rescaling of the batch), larger first on a tie
        h, k = min(same_g, key=lambda s: (abs(math.log(s[1] / kv_heads)), -s[1]))
        rows = of(h, k)
        rows = rows.assign(batch_size=rows.batch_size.astype(float) * k / kv_heads)
        return pd.DataFrame(rows[cols]), (f"{kernel}, from {h} heads / {k} KV heads with the batch scaled by "
                                          f"{k}/{kv_heads} (same work per sequence and KV head)")
    return None, ""


def complete_decode_grid(points: list) -> list:
    """Decode-attention points [batch, kv_len, seconds] completed to a rectangle.

    The database measures a triangle (batch x KV length capped by the total KV tokens), which a
    grid fit would cut down to its smallest batches and extrapolate from there. Decode attention
    reads each sequence's KV once: at a fixed batch its time is linear in KV length, so each
    batch's missing long lengths continue the line through its two longest measured ones.
    """
    by_batch: dict[float, dict[float, list]] = {}
    for b, s, t in points:
        by_batch.setdefault(b, {}).setdefault(s, []).append(t)
    steps = sorted({s for row in by_batch.values() for s in row})
    out = []
    for b, row in sorted(by_batch.items()):
        have = sorted(row)
        med = {s: float(np.median(row[s])) for s in have}
        for s in steps:
            if s in med:
                out.extend([b, s, t] for t in row[s])
            elif s > have[-1] and len(have) >= 2:
                s0, s1 = have[-2], have[-1]
                slope = max((med[s1] - med[s0]) / (s1 - s0), 0.0)
                out.append([b, s, med[s1] + slope * (s - s1)])
    return out


CACHED_GRID = (0, 16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def chunked_prefill_points(full: list, decode_curve) -> list:
    """Prefill-attention points [chunk tokens, context_len incl. the chunk, seconds] on a chunk x
    cached-context rectangle, from measured whole prefills [isl, seconds per sequence] only.

    A chunk of c tokens over p cached ones computes c x p + c^2 / 2 query-key pairs (causal within
    the chunk): the work of a whole prefill of isl* = sqrt(c^2 + 2 c p) tokens, whose measured time
    it is charged. A short chunk over a long context cannot beat reading that context's KV once:
    the floor is the KV-read part of one decode over c + p tokens (the decode curve at batch 1 less
    its fixed kernel cost, which the prefill time already holds). At p = 0 this is the measured
    prefill itself. (Charging context linearly from whole-prefill data alone cannot separate the
    chunk and context terms: it made short chunks over long contexts far too cheap.)
    """
    isl_curve = fit_pwl([[x, t] for x, t in full])
    chunks = sorted({x for x, _ in full})
    fixed = decode_curve(1, 1)
    out = []
    for c in chunks:
        for p in CACHED_GRID:
            work_isl = float(np.sqrt(c * c + 2 * c * p))
            kv_floor = max(decode_curve(1, c + p) - fixed, 0.0)
            out.append([c, c + p, max(isl_curve(work_isl), kv_floor)])
    return out


def sustained(points: list, flops_per_row: float, peak_flops: float, factor: float) -> list:
    """[[m, seconds]] GEMM points with their compute-bound share slowed by `factor`.

    A kernel timed alone runs at the GPU's boost clock; inside a busy engine, back-to-back
    compute-bound GEMMs run at the lower clock the power limit sustains, while memory-bound ones
    (a decode's small m) are held by HBM bandwidth, which the SM clock does not set. The share of a
    point that is compute-bound is phi = min(1, FLOPs / (peak x t)); the point becomes
    t x (1 + (factor - 1) x phi). `factor` 1 keeps the data as measured.
    """
    if factor == 1.0:
        return points
    out = []
    for m, t in points:
        phi = min(1.0, m * flops_per_row / (peak_flops * t)) if t > 0 else 0.0
        out.append([m, t * (1.0 + (factor - 1.0) * phi)])
    return out


def moe_ops(system_dir: Path, dims: dict, gemm, gemm_src: str, peak_flops: float = 0.0,
            compute_factor: float = 1.0) -> dict:
    """The MoE layer of a Mixtral-style model from the measured fused-MoE kernel.

    ``moe/<framework>/<version>/moe_perf.parquet`` times vLLM's fused MoE (the router's top-k
    dispatch, every active expert's gate/up GEMM, the activation and the down GEMM, tensor-parallel
    sharded by `moe_tp_size`) over the step's tokens, with tokens spread evenly over the experts
    (``balanced``): one token reads `num_experts_per_tok` experts' weights, a few dozen read them
    all. It takes the place of the dense MLP: ``gate_up_proj`` is the whole MoE block, and
    ``down_proj`` the router's (hidden x num_experts) gate GEMM.
    """
    path, src = _table(system_dir, "moe", "moe_perf.parquet")
    df = pd.read_parquet(path)
    tp = dims["tensor_parallel_size"]
    want = {"hidden_size": dims["hidden_size"], "inter_size": dims["intermediate_size"],
            "topk": dims["num_experts_per_tok"], "num_experts": dims["num_experts"]}
    keep = df.moe_dtype.isin(["bfloat16", "float16"]) & (df.moe_ep_size == 1) & (df.moe_tp_size == tp)
    for col, v in want.items():
        keep &= df[col] == v
    rows = df[keep]
    balanced = rows[rows.distribution == "balanced"]
    rows = balanced if not balanced.empty else rows
    if rows.empty:
        raise ConfigError(f"model: aiconfigurator {src} has no fused-MoE timing for {want} at moe_tp_size={tp}")
    pts = [[float(r.num_tokens), float(r.latency) * MS] for r in rows.itertuples()]
    # each token runs top-k experts' gate/up (2 x inter) and down (inter) GEMMs, sharded over tp
    flops = 2.0 * dims["num_experts_per_tok"] * 3 * dims["hidden_size"] * dims["intermediate_size"] / tp
    if peak_flops:
        pts = sustained(pts, flops, peak_flops, compute_factor)
    k, n = dims["hidden_size"], dims["num_experts"]
    return {
        "gate_up_proj": fit_op("gate_up_proj", pts, source=f"aiconfigurator {src} fused MoE "
                               f"({dims['num_experts']} experts, top {dims['num_experts_per_tok']}, tp {tp}; whole block)"),
        "down_proj": fit_op("down_proj", _interp_gemm(gemm, k, n),
                            source=f"aiconfigurator {gemm_src} gemm (k={k}, n={n}): the MoE router"),
    }


def import_aiconfigurator(gpu: str, model: str | dict, tp: int = 1, nccl_only: bool = False,
                          compute_factor: float = 1.0) -> Profile:
    """Profile of `model` at tensor parallelism `tp` on `gpu` (a `SYSTEMS` name) from aiconfigurator data.

    `nccl_only`: all-reduce from the NCCL table alone (engines without vLLM's custom all-reduce).
    `compute_factor`: the compute-bound share of every GEMM slowed by it (`sustained`: the clock a
    busy engine sustains; 1 = the isolated timings as measured).
    """
    if isinstance(compute_factor, bool) or not isinstance(compute_factor, (int, float)) or not 0.5 <= compute_factor <= 2:
        raise ConfigError(f"compute_factor: expected a number in [0.5, 2], got {compute_factor!r}")
    key, system_name = system_of(gpu)
    if isinstance(model, dict):  # dims already resolved (calibrate.model_dims.dims_of_spec)
        dims = {**model, "tensor_parallel_size": tp}
    else:
        dims = resolve_model(model, tp)
    root = package_dir() / "systems"
    system_dir = root / "data" / system_name
    system = yaml.safe_load((root / f"{system_name}.yaml").read_text())
    ops = {}

    # GEMMs: the weights' own kernels for the layer, 16-bit ones for the LM head (vLLM does not quantize it)
    quant = layer_kind(dims, "quantization")
    if quant == "fp8_block":
        raise ConfigError(f"model: {dims.get('name', 'this model')} has block-scaled FP8 weights; aiconfigurator "
                          "times vLLM's block-scaled GEMMs as three kernels over parts of the token grid, not "
                          "imported (without a profile, hardware.latency = roofline models FP8 weights)")
    if quant not in ("none", "fp8"):
        raise ConfigError(f"model: {dims.get('name', 'this model')} has {quant} weights; aiconfigurator has no "
                          "GEMMs of integer weights (without a profile, hardware.latency = roofline models them)")
    if quant == "fp8" and dims.get("num_experts"):
        raise ConfigError(f"model: {dims.get('name', 'this model')} has FP8 experts; aiconfigurator's FP8 fused-MoE "
                          "timings read 1.3-3.3x its bf16 ones at every token count, not vLLM's FP8 MoE as served: "
                          "not imported (without a profile, hardware.latency = roofline models FP8 weights)")
    gemm_path, gemm_src = _table(system_dir, "gemm", "gemm_perf.parquet")
    raw = pd.read_parquet(gemm_path)
    gemm = raw[(raw.gemm_dtype == "bfloat16") & (raw.kernel_source == "torch.nn.functional.linear")]
    if gemm.empty:
        gemm = raw[raw.gemm_dtype == "bfloat16"]
    device_name = str(gemm.device.iloc[0])
    peak = float(system["gpu"].get("bfloat16_tc_flops") or 0.0)
    layer_gemm, layer_peak, layer_src = gemm, peak, gemm_src
    if quant == "fp8":
        layer_gemm = raw[(raw.gemm_dtype == "fp8") & (raw.kernel_source == "CutlassFP8ScaledMMLinearKernel")]
        if layer_gemm.empty:
            layer_gemm = raw[raw.gemm_dtype == "fp8"]
        if layer_gemm.empty:
            raise ConfigError(f"model: aiconfigurator {gemm_src} has no FP8 GEMMs on {key} for the fp8 weights of "
                              f"{dims.get('name', 'this model')}")
        layer_peak = float(system["gpu"].get("fp8_tc_flops") or 2.0 * peak)
        layer_src = f"{gemm_src} fp8 ({layer_gemm.kernel_source.iloc[0]})"
    factor = float(compute_factor) if peak else 1.0
    note = f", compute-bound share x {factor:.3f}" if factor != 1.0 else ""
    for op, (k, n) in per_rank_shapes(dims).items():
        table, top, src = (gemm, peak, gemm_src) if op == "lm_head" else (layer_gemm, layer_peak, layer_src)
        ops[op] = fit_op(op, sustained(_interp_gemm(table, k, n), 2.0 * k * n, top, factor),
                         source=f"aiconfigurator {src} gemm (k={k}, n={n}){note}")
    if dims.get("num_experts"):
        ops.update(moe_ops(system_dir, dims, gemm, gemm_src, peak, factor))

    # attention, per-rank head counts
    heads = dims["num_attention_heads"] // tp
    kv_heads = max(dims["num_key_value_heads"] // tp, 1)
    hd = dims["head_dim"]
    kv_dtype = "fp8" if layer_kind(dims, "kv_cache_dtype") == "fp8" else "bfloat16"

    def attn_rows(filename):
        path, src = _table(system_dir, "attention", filename)
        df = pd.read_parquet(path)
        if kv_dtype != "bfloat16" and ("kv_cache_dtype" not in df.columns
                                       or not (df.kv_cache_dtype == kv_dtype).any()):
            raise ConfigError(f"model: aiconfigurator {src} times attention over a 16-bit KV cache only on {key}, "
                              f"not the fp8 cache of {dims.get('name', 'this model')}")
        keep = df.head_dim == hd
        for col, want in (("attn_dtype", "bfloat16"), ("kv_cache_dtype", kv_dtype), ("window_size", 0)):
            if col in df.columns:  # older tables (A100) lack some columns
                keep &= df[col] == want
        rows, how = attention_rows(df[keep], heads, kv_heads)
        if rows is None:
            raise ConfigError(f"model: aiconfigurator {src} has no {filename.split('_')[0]} attention for "
                              f"{heads} heads / {kv_heads} KV heads / head_dim {hd} per rank (tp={tp}) "
                              f"nor a shape to derive it from")
        return rows, f"aiconfigurator {src} {how}" + (", fp8 KV cache" if kv_dtype == "fp8" else "")

    gen, gen_src = attn_rows("generation_attention_perf.parquet")
    decode_pts = complete_decode_grid([[float(r.batch_size), float(r.step), float(r.latency) * MS]
                                       for r in gen.itertuples()])
    ops["attn_decode"] = fit_op("attn_decode", decode_pts, source=f"{gen_src} generation attention "
                                "(each batch's KV lengths beyond the measured ones: linear in KV length)")
    ctx, src = attn_rows("context_attention_perf.parquet")
    ctx = ctx[ctx.step == 0]
    full = [[float(r.isl), float(r.latency) * MS / float(r.batch_size)] for r in ctx.itertuples()]
    ops["attn_prefill"] = fit_op("attn_prefill", chunked_prefill_points(full, ops["attn_decode"].curve),
                                 source=f"{src} context attention, per sequence; chunks over cached context "
                                 "by equal causal work (see chunked_prefill_points)")

    # all-reduce: the faster of vLLM's custom kernel (in a CUDA graph) and NCCL at each message size
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
                # a CUDA-graph engine replays its all-reduces inside the graph (vLLM v1 captures
                # every step up to its largest capture size; bigger steps are busy with GEMMs
                # that hide the eager launch): the graph timings (~5 us at 8 GPUs, where the eager
                # ones hold ~15 us of host launch per call, 2 x layers calls a step)
                graph = df.backend.astype(str).str.contains("graph")
                if graph.any():
                    df = df[graph]
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
    if dims.get("num_experts"):
        ops.pop("act", None)  # silu(gate) x up runs inside the fused MoE kernel, timed with it
    try:
        pkg = _pkg_version("aiconfigurator-core")
    except Exception:  # noqa: BLE001 - metadata is nice-to-have
        pkg = None
    meta = {
        "device": device_name, "torch_version": None, "driver": None, "dtype": "bfloat16",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": f"aiconfigurator-core {pkg} ({gemm_src})", "license": "Apache-2.0 (aiconfigurator-core data)",
        "gpu": key, "notes": "per-op kernel latencies measured by NVIDIA; elementwise ops and host time derived"
                             + ("; fp8 weights: FP8 layer GEMMs, 16-bit LM head" if quant == "fp8" else ""),
    }
    return Profile(meta=meta, model=dims, ops=ops)

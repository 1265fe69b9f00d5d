"""Import ../shared/data/profiles/h100-kernel-microbench (Apache-2.0) into a servesim profile.

The folder (see its README) has H100 kernel timings in microseconds:

- ``gemm/h100/data.csv``: m, k, n, latency_us for Llama-7B-like (k, n), m from 8 to 131072. A
  model's per-rank (k, n) takes the nearest measured shape (in log k + log n) scaled by the FLOP
  ratio ``k*n / (k0*n0)``, since a device-filling GEMM runs at a near-constant FLOP rate (the data's
  `mfu` column); below m = 8 the m = 8 time is used.
- ``mha/prefill/h100/<heads>-<kv_heads>-<head_dim>.csv``: one whole-prompt prefill on one GPU;
  per rank the heads split over TP, so the time is divided by tp.
- ``mha/decode/h100/<heads>-<kv_heads>-<head_dim>-tp<N>.csv``: batch x KV length for N in 1, 2, 4;
  another TP uses the nearest N, scaled by N / tp (heads per rank).

No all-reduce, norm or sampler data: elementwise ops come from `calibrate.importers.derived`, the
TP all-reduce from NVLink's datasheet 450 GB/s (ring factor 2(tp-1)/tp, 10 us); `source` says so.

The GEMM table's fastest rows run at ~1,290 TFLOP/s, above the H100's 989 TFLOP/s 16-bit peak (its
`mfu` column is against the 1,979 TFLOP/s FP8 peak): they are FP8 GEMMs, whose kernel and scaling the
README does not state (docs/results/2026-12-02-decode-step.md). They stand in for a 16-bit model's
GEMMs, which read twice the weight bytes at half the peak, so the import says so in
`meta.warnings` (`servesim calibrate import` prints it); a table faster than the FP8 peak is in
another unit than microseconds and is refused (`_gemm_rate_warning`).
"""
from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

from calibrate.fit import fit_op
from calibrate.importers.shared_data import shared_data_dir
from calibrate.importers.derived import derived_ops
from calibrate.importers.measured_table import read_rows
from calibrate.model_dims import per_rank_shapes, resolve_model
from policies import ConfigError
from sim.latency.profile import Profile, layer_kind
from specs import get_gpu

US = 1e-6
DEFAULT_DIR = shared_data_dir() / "profiles" / "h100-kernel-microbench"
H100_MEM_BW = 3.35e12  # bytes/s, HBM3 datasheet
NVLINK_BW = 450e9  # bytes/s per direction per GPU (NVLink 4, DGX H100 datasheet)
NVLINK_LATENCY_S = 10e-6
H100 = get_gpu("H100-SXM")  # its datasheet peaks, against which the GEMM table's rates are read


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict]:
    """The table's rows, `columns` checked positive (`calibrate.importers.measured_table`)."""
    return read_rows(path, columns, label="--data-dir")


def _fit_table(op: str, pts: list, source: str, path: Path):
    """`fit_op`, its refusal of too few distinct sizes naming the table they came from."""
    try:
        return fit_op(op, pts, source=source)
    except ValueError as exc:
        raise ConfigError(f"--data-dir: {path}: {exc}") from None


def _gemm_rate_warning(rows: list[dict], path: Path) -> str | None:
    """The GEMM table's fastest FLOP rate against the H100's datasheet peaks: above the FP8 peak no
    kernel runs (the times are in another unit than microseconds: refused); above the 16-bit peak
    the table times FP8 GEMMs, standing in for a 16-bit model's (the warning returned)."""
    fastest = max(rows, key=lambda r: r["m"] * r["k"] * r["n"] / r["latency_us"])
    rate = 2 * fastest["m"] * fastest["k"] * fastest["n"] / (fastest["latency_us"] * US)
    shape = f"m, k, n = {fastest['m']:.0f}, {fastest['k']:.0f}, {fastest['n']:.0f} in {fastest['latency_us']:g} us"
    if rate > H100.flops_fp8:
        raise ConfigError(f"--data-dir: {path}: latency_us: the GEMM of {shape} runs at {rate / 1e12:,.0f} TFLOP/s, "
                          f"above the H100's {H100.flops_fp8 / 1e12:,.0f} TFLOP/s FP8 peak; expected microseconds")
    if rate <= H100.flops_bf16:
        return None
    return (f"h100-microbench's GEMMs run at up to {rate / 1e12:,.0f} TFLOP/s ({shape}), above the H100's "
            f"{H100.flops_bf16 / 1e12:,.0f} TFLOP/s 16-bit peak: they are FP8 GEMMs, standing in for the 16-bit "
            "GEMMs of this model, which take up to twice as long where compute or weight reads bound them; "
            "source aiconfigurator times 16-bit GEMMs")


def _gemm_points(rows: list[dict], k: int, n: int) -> tuple[list, str]:
    shapes = sorted({(int(r["k"]), int(r["n"])) for r in rows})
    k0, n0 = min(shapes, key=lambda s: (math.log(s[0] / k)) ** 2 + (math.log(s[1] / n)) ** 2)
    scale = (k * n) / (k0 * n0)
    pts = [[float(r["m"]), float(r["latency_us"]) * US * scale] for r in rows
           if int(r["k"]) == k0 and int(r["n"]) == n0]
    return pts, f"h100-microbench gemm (k={k0}, n={n0}) x {scale:.3g} FLOP ratio for (k={k}, n={n})"


def import_h100_microbench(gpu: str, model: str, tp: int = 1, data_dir: str | Path | None = None) -> Profile:
    """Profile of `model` at tensor parallelism `tp` on H100 from the h100-kernel-microbench folder."""
    if gpu.upper().replace("-SXM", "") != "H100":
        raise ConfigError(f"gpu: {gpu!r} is not allowed for source h100-microbench; choose one of H100")
    root = Path(data_dir) if data_dir else DEFAULT_DIR
    if not root.is_dir():
        raise FileNotFoundError(f"--data-dir: h100-kernel-microbench not found at {root}")
    dims = {**model, "tensor_parallel_size": tp} if isinstance(model, dict) else resolve_model(model, tp)
    if layer_kind(dims, "quantization") != "none":  # its FP8 GEMMs are of an unstated kernel and scaling
        raise ConfigError(f"model: h100-microbench times FP8 GEMMs of an unstated kernel and scaling, not vLLM's "
                          f"kernels for the {dims['quantization']} weights of {dims.get('name', 'this model')}; "
                          "use source aiconfigurator")
    if layer_kind(dims, "kv_cache_dtype") == "fp8":  # its attention reads a 16-bit cache
        raise ConfigError(f"model: h100-microbench times attention over a 16-bit KV cache, not the fp8 cache of "
                          f"{dims.get('name', 'this model')}; use source aiconfigurator")
    if dims.get("num_experts"):  # its dense GEMMs would stand in for the experts
        raise ConfigError(f"model: h100-microbench has no MoE kernels for {dims.get('name', 'this model')} "
                          f"({dims['num_experts']} experts); use source aiconfigurator")
    ops = {}
    gemm_path = root / "gemm" / "h100" / "data.csv"
    gemm_rows = _rows(gemm_path, ("m", "k", "n", "latency_us"))
    warning = _gemm_rate_warning(gemm_rows, gemm_path)
    for op, (k, n) in per_rank_shapes(dims).items():
        pts, src = _gemm_points(gemm_rows, k, n)
        ops[op] = fit_op(op, pts, source=src)

    shape = f"{dims['num_attention_heads']}-{dims['num_key_value_heads']}-{dims['head_dim']}"
    prefill = root / "mha" / "prefill" / "h100" / f"{shape}.csv"
    if not prefill.is_file():
        have = sorted(p.stem for p in (root / "mha" / "prefill" / "h100").glob("*.csv"))
        raise ConfigError(f"model: h100-microbench has no attention for heads-kv_heads-head_dim {shape}; "
                          f"choose a model with one of {', '.join(have)}")
    pts = [[r["seq_len"], r["seq_len"], r["latency_us"] * US / tp] for r in _rows(prefill, ("seq_len", "latency_us"))]
    ops["attn_prefill"] = _fit_table("attn_prefill", pts, f"h100-microbench mha prefill {shape} / tp={tp}", prefill)
    avail = sorted(int(p.stem.rsplit("tp", 1)[1]) for p in (root / "mha" / "decode" / "h100").glob(f"{shape}-tp*.csv"))
    if not avail:
        raise ConfigError(f"model: h100-microbench has no decode attention for {shape}")
    src_tp = min(avail, key=lambda a: abs(math.log(a / tp)))
    scale = src_tp / tp
    decode = root / "mha" / "decode" / "h100" / f"{shape}-tp{src_tp}.csv"
    pts = [[r["batch_size"], r["kv_len"], r["latency_us"] * US * scale]
           for r in _rows(decode, ("batch_size", "kv_len", "latency_us"))]
    ops["attn_decode"] = _fit_table("attn_decode", pts, f"h100-microbench mha decode {shape}-tp{src_tp}"
                                    + (f" x {scale:.3g} (heads per rank)" if scale != 1 else ""), decode)
    if tp > 1:
        ring = 2 * (tp - 1) / tp
        sizes = [2.0 ** e for e in range(10, 31, 2)]
        pts = [[s, NVLINK_LATENCY_S + ring * s / NVLINK_BW] for s in sizes]
        ops["all_reduce"] = fit_op("all_reduce", pts, source=f"derived: ring all-reduce over NVLink "
                                   f"{NVLINK_BW / 1e9:.0f} GB/s + {NVLINK_LATENCY_S * 1e6:.0f} us (datasheet)")
    ops.update(derived_ops(dims, H100_MEM_BW, 0.8, 3e-6, "H100 datasheet"))
    meta = {"device": "NVIDIA H100 (h100-kernel-microbench)", "torch_version": None, "driver": None,
            "dtype": "bfloat16", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": "h100-microbench", "license": "Apache-2.0 (inference-sim bench_data)", "gpu": "H100",
            "notes": "GEMMs scaled from the nearest measured shape; attention measured; the rest derived"}
    if warning:
        meta["warnings"] = [warning]
    return Profile(meta=meta, model=dims, ops=ops)

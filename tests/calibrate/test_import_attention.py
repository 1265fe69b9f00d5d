"""aiconfigurator import: attention shapes the database lacks, its triangular decode grid, chunked
prefill, and the sustained-compute factor on GEMMs."""
from __future__ import annotations

import numpy as np
import pytest

from calibrate.importers.aiconfigurator import (attention_rows, chunked_prefill_points, complete_decode_grid,
                                                package_dir, sustained)


def _table(name: str):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    import pandas as pd

    df = pd.read_parquet(package_dir() / "systems" / "data" / "h100_sxm" / "attention" / "vllm" / "0.24.0" / name)
    return df[(df.head_dim == 128) & (df.attn_dtype == "bfloat16") & (df.kv_cache_dtype == "bfloat16")
              & (df.window_size == 0)]


def _held_out_error(df, heads, kv_heads, per_sequence: bool, min_work: float):
    """Median |relative error| of the rows derived without the measured shape, against it."""
    truth = df[(df.num_heads == heads) & (df.num_key_value_heads == kv_heads)]
    assert not truth.empty
    rest = df[~((df.num_heads == heads) & (df.num_key_value_heads == kv_heads))]
    derived, how = attention_rows(rest, heads, kv_heads)
    assert derived is not None
    truth = truth.groupby(["batch_size", "isl", "step"], as_index=False).latency.median()
    x = "isl" if per_sequence else "step"
    want = {(float(r.batch_size), float(getattr(r, x))): r.latency / (r.batch_size if per_sequence else 1)
            for r in truth.itertuples() if r.batch_size * getattr(r, x) >= min_work}
    # derived rows at other (possibly fractional) batches: interpolate in batch at each length
    errs = []
    for (b, s), t in want.items():
        d = derived[derived[x] == s].sort_values("batch_size")
        if d.empty or not d.batch_size.min() <= b <= d.batch_size.max():
            continue
        per = d.latency / d.batch_size if per_sequence else d.latency
        errs.append(np.interp(b, d.batch_size, per) / t - 1)
    assert len(errs) >= 10, how
    return float(np.median(np.abs(errs))), how


@pytest.mark.parametrize("heads,kv_heads,rule", [(32, 8, "interpolated"), (64, 8, "interpolated"),
                                                 (16, 2, "interpolated"), (8, 8, "scaled")])
def test_missing_decode_shapes_derive_from_measured_ones(heads, kv_heads, rule):
    err, how = _held_out_error(_table("generation_attention_perf.parquet"), heads, kv_heads, False, 4096)
    assert rule in how
    assert err < 0.08, how


@pytest.mark.parametrize("heads,kv_heads,rule", [(32, 8, "interpolated"), (32, 32, "scaled"), (16, 16, "scaled")])
def test_missing_prefill_shapes_derive_from_measured_ones(heads, kv_heads, rule):
    err, how = _held_out_error(_table("context_attention_perf.parquet"), heads, kv_heads, True, 4096)
    assert rule in how
    assert err < 0.12, how


def test_mha_decode_is_no_faster_than_reading_its_kv():
    # Llama-2-7B: 32 KV heads, none measured for decode; derived from 8 KV heads with 4x the batch
    rows, how = attention_rows(_table("generation_attention_perf.parquet"), 32, 32)
    assert "scaled" in how
    kv_bytes = 2 * 32 * 128 * 2  # K and V, 32 heads x 128, bf16, one layer
    for r in rows.itertuples():
        if r.batch_size >= 1:
            assert r.latency * 1e-3 >= 0.9 * r.batch_size * r.step * kv_bytes / 3.35e12


def test_no_shape_to_derive_from_is_none():
    df = _table("generation_attention_perf.parquet")
    assert attention_rows(df[df.num_key_value_heads == 1], 30, 7) == (None, "")


def test_decode_triangle_is_completed_linearly_in_kv_length():
    # a function linear in KV length at each batch, measured on a triangle b x s <= 4096
    def f(b, s):
        return 1e-5 + 2e-6 * b + 3e-9 * b * s

    pts = [[b, s, f(b, s)] for b in (1, 4, 16, 64) for s in (16, 64, 256, 1024, 4096) if b * s <= 4096]
    out = complete_decode_grid(pts)
    cells = {(b, s): t for b, s, t in out}
    assert len(cells) == 4 * 5  # the full rectangle
    for (b, s), t in cells.items():
        assert t == pytest.approx(f(b, s))


def test_decode_completion_predicts_held_out_long_contexts():
    df = _table("generation_attention_perf.parquet")
    d = df[(df.num_heads == 32) & (df.num_key_value_heads == 8)]
    pts = [[float(r.batch_size), float(r.step), float(r.latency)] for r in d.itertuples()]
    cap = 32768
    kept = [p for p in pts if p[0] * p[1] <= cap]
    held = [p for p in pts if p[0] * p[1] > cap and p[0] >= 4]
    filled = {(b, s): t for b, s, t in complete_decode_grid(kept)}
    errs = [filled[(b, s)] / t - 1 for b, s, t in held if (b, s) in filled]
    assert len(errs) >= 10
    assert np.median(np.abs(errs)) < 0.1


def test_chunked_prefill_is_charged_by_equal_causal_work():
    full = [[float(n), 1e-6 + 1e-11 * n * n] for n in (16, 64, 256, 1024, 4096, 16384)]

    def decode(b, s):
        return 1e-5 + 1e-9 * b * s

    pts = {(c, n): t for c, n, t in chunked_prefill_points(full, decode)}
    for c, t in full:  # no cached context: the measured prefill itself
        assert pts[(c, c)] == pytest.approx(t)
    # 64 new tokens over 3 x 1024 cached: the work of a sqrt(64^2 + 2 x 64 x 1024) = 370-token prefill,
    # far less than a whole 1024-token prefill's, never less than reading the 1088 tokens' KV
    t = pts[(64, 64 + 1024)]
    assert t < pts[(1024, 1024)]
    assert t >= decode(1, 1088) - decode(1, 1)
    for c in (16, 256):
        row = [pts[(c, c + p)] for p in (0, 16, 64, 256, 1024, 4096)]
        assert row == sorted(row)  # more cached context never costs less


def test_sustained_compute_slows_compute_bound_points_only():
    peak = 1e15
    flops_per_row = 2.0 * 4096 * 4096
    memory_bound = [1.0, 1e-4]  # one row: 33 MFLOP in 100 us, phi = 3e-4
    compute_bound = [8192.0, 8192 * flops_per_row / peak]  # at peak: phi = 1
    out = dict((m, t) for m, t in sustained([memory_bound, compute_bound], flops_per_row, peak, 1.1))
    assert out[1.0] == pytest.approx(1e-4, rel=1e-3)
    assert out[8192.0] == pytest.approx(1.1 * compute_bound[1])
    assert sustained([compute_bound], flops_per_row, peak, 1.0) == [compute_bound]


def test_compute_factor_reaches_the_imported_gemms():
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    from calibrate.importers import import_profile

    base = import_profile("aiconfigurator", "H100", "llama-3-8b", 1, host="none")
    slow = import_profile("aiconfigurator", "H100", "llama-3-8b", 1, host="none", compute_factor=1.1)
    for op in ("qkv_proj", "gate_up_proj", "down_proj"):
        assert slow.ops[op].curve(1) == pytest.approx(base.ops[op].curve(1), rel=0.01)  # a weight read
        ratio = slow.ops[op].curve(8192) / base.ops[op].curve(8192)
        assert 1.05 < ratio <= 1.1 + 1e-9  # tensor-core bound: most of the factor
    assert slow.ops["attn_decode"].curve(8, 1024) == base.ops["attn_decode"].curve(8, 1024)
    with pytest.raises(Exception, match="^compute_factor"):
        import_profile("aiconfigurator", "H100", "llama-3-8b", 1, compute_factor=5)

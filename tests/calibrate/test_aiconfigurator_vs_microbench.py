"""aiconfigurator import against an independent H100 micro-benchmark (h100-kernel-microbench).

The microbench (inference-sim bench_data, another team's harness) times GEMMs and decode attention
at its own shapes, off aiconfigurator's grid: the importer's interpolation between grid shapes, the
MHA batch rescaling of `attention_rows` and the long-context completion of `complete_decode_grid`
must land on it. Its GEMMs are FP8 (their `mfu` column is against the 1979 TFLOP/s FP8 peak), so
the GEMM check runs the importer's interpolation on aiconfigurator's FP8 table; the bf16 table the
profiles use comes from the same collector. Measured spread: docs/results/2026-12-02-decode-step.md.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.shared_data

MICROBENCH = "profiles/h100-kernel-microbench"


def _gemm_table():
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    import pandas as pd

    from calibrate.importers.aiconfigurator import _table, package_dir

    path, _ = _table(package_dir() / "systems" / "data" / "h100_sxm", "gemm", "gemm_perf.parquet")
    df = pd.read_parquet(path)
    return df[(df.gemm_dtype == "fp8") & (df.kernel_source == "CutlassFP8ScaledMMLinearKernel")]


def test_gemm_interpolation_lands_on_the_microbench_at_decode_batches(shared_data):
    import pandas as pd

    from calibrate.fit import fit_pwl
    from calibrate.importers.aiconfigurator import _interp_gemm

    table = _gemm_table()
    bench = pd.read_csv(shared_data / MICROBENCH / "gemm" / "h100" / "data.csv")
    bench = bench[bench.m <= 128]  # a decode step's rows: weight-read bound
    assert set(bench.n) - set(table.n), "some shapes must be off aiconfigurator's grid (n = 11008)"
    errs = []
    for (k, n), rows in bench.groupby(["k", "n"]):
        curve = fit_pwl(_interp_gemm(table, int(k), int(n)))
        errs += [curve(m) / (t * 1e-6) - 1 for m, t in zip(rows.m, rows.latency_us)]
    errs = np.abs(errs)
    assert len(errs) >= 30
    assert np.median(errs) < 0.08  # measured 4%
    assert errs.max() < 0.25  # measured 18%


@pytest.mark.parametrize("model,tp,bench_file", [
    ("llama-2-7b", 1, "32-32-128-tp1"),  # MHA: no 32-KV-head shape in the table, derived by batch rescaling
    ("llama-2-7b", 2, "32-32-128-tp2"),
    ("codellama-34b", 2, "64-8-128-tp2"),
    ("llama-2-70b", 4, "64-8-128-tp4"),
    ("llama-3-8b", 1, "32-8-128-tp1"),
])
def test_decode_attention_lands_on_the_microbench(shared_data, model, tp, bench_file):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    import pandas as pd

    from calibrate.importers.aiconfigurator import import_aiconfigurator
    from calibrate.model_dims import resolve_model

    dims = resolve_model(model, tp)
    curve = import_aiconfigurator("H100", model, tp).ops["attn_decode"].curve
    bench = pd.read_csv(shared_data / MICROBENCH / "mha" / "decode" / "h100" / f"{bench_file}.csv")
    kv_heads = max(dims["num_key_value_heads"] // tp, 1)
    kv_bytes = bench.batch_size * bench.kv_len * kv_heads * dims["head_dim"] * 2 * 2  # K and V, bf16, a layer
    # KV-read bound points (>= 64 MB a layer, ~20 us at HBM peak), up to 16k tokens: lengths past the
    # table's measured triangle come from complete_decode_grid
    bench = bench[(kv_bytes >= 64e6) & (bench.kv_len <= 16384)]
    ratio = np.array([curve(b, s) / (t * 1e-6) for b, s, t in zip(bench.batch_size, bench.kv_len, bench.latency_us)])
    assert len(ratio) >= 20
    assert 0.9 < np.median(ratio) < 1.1  # measured 0.96-1.02 over these shapes
    assert 0.65 < ratio.min() and ratio.max() < 1.5  # measured 0.71-1.41 (MHA at 256-512 tokens)

"""`benchmarks/validate_cpu.py`: its per-kind breakdown of a validation's step errors."""
from __future__ import annotations

import pandas as pd
import pytest

from benchmark_helpers import load_benchmark


def write_steps(path, rows):
    """A validate steps.csv of (prefill tokens, decode tokens, predicted s, measured CPU s) rows, in order."""
    pd.DataFrame([{"step_id": i, "num_seqs": max(1, d + (p > 0)), "num_prefill_tokens": p, "num_decode_tokens": d,
                   "predicted_s": pred, "measured_cpu_s": cpu} for i, (p, d, pred, cpu) in enumerate(rows)]).to_csv(path)
    return path


def test_the_decode_steps_just_after_a_prefill_are_their_own_kind(tmp_path):
    by_kind = load_benchmark("validate_cpu").by_kind
    steady, slow = (0, 2, 1.0, 1.0), (0, 2, 1.0, 1.25)  # predicted 20% under on the slow ones
    rows = [steady, steady, steady, steady, steady,  # before any prefill: not "after" one
            (64, 0, 1.0, 1.0), slow, slow, slow, steady, steady,
            (16, 2, 1.0, 1.0), slow, slow, slow, steady]
    kinds = by_kind(write_steps(tmp_path / "steps.csv", rows))
    assert kinds["dec1-3 after prefill"] == "-20.0% (6)"
    assert kinds["dec2-4"] == "+0.0% (14)"  # the median of all decode steps: 8 steady, 6 slow
    assert kinds["prefill"] == "+0.0% (1)" and kinds["mixed"] == "+0.0% (1)"


def write_decode_steps(path, level: float, rows):
    """A steps.csv of decode-only steps (num_seqs, context tokens, predicted over measured - 1), the
    machine's level (`level`: measured times run that much slower) applied to every step."""
    pd.DataFrame([{"step_id": i, "num_seqs": n, "num_prefill_tokens": 0, "num_decode_tokens": n,
                   "num_context_tokens": ctx, "predicted_s": 1.0 + off, "measured_cpu_s": 1.0 + level}
                  for i, (n, ctx, off) in enumerate(rows)]).to_csv(path)
    return path


def test_the_decode_shape_takes_each_runs_level_out(tmp_path):
    """Two runs at very different machine levels, the model 10% over at batches of two in both: the
    shape shows +10 points there and 0 elsewhere, whatever the level; thin cells are left out."""
    decode_shape = load_benchmark("validate_cpu").decode_shape
    rows = [(1, 64, 0.0)] * 20 + [(2, 2 * 64, 0.1)] * 6 + [(4, 4 * 300, 0.0)] * 6 + [(3, 3 * 64, 0.5)] * 2
    a = write_decode_steps(tmp_path / "a.csv", 0.0, rows)
    b = write_decode_steps(tmp_path / "b.csv", 0.3, rows)  # the machine 30% slower in this run
    shape = decode_shape([a, b])
    assert shape.loc[("2", "<=128"), "median_pct"] == pytest.approx(10.0)
    assert shape.loc[("1", "<=128"), "median_pct"] == pytest.approx(0.0)
    assert shape.loc[("4", "257-512"), "median_pct"] == pytest.approx(0.0)
    assert (shape.runs == 2).all()
    assert ("3", "<=128") not in shape.index  # 2 steps: below min_steps
    assert decode_shape([]).empty


def test_the_summary_is_a_table_and_a_figure_of_every_workload(tmp_path):
    write_summary = load_benchmark("validate_cpu").write_summary
    rows = [{"group": "fresh", "workload": "random-7-00-chunked-small-poisson-roomy", "step_median_pct": 3.0,
             "ttft_pct": 4.0, "tpot_pct": 2.0, "e2e_pct": 1.0, "met": True, "speed_basis": "run",
             "probe_scatter_pct": 1.2},
            {"group": "fresh", "workload": "random-7-01-continuous-gamma-recompute", "step_median_pct": 6.0,
             "ttft_pct": None, "tpot_pct": 2.0, "e2e_pct": 1.0, "met": False, "speed_basis": "calibration"}]
    plot = write_summary(tmp_path / "out", rows)
    table = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert list(table.workload) == [r["workload"] for r in rows] and table.met.tolist() == [True, False]
    assert table.speed_basis.tolist() == ["run", "calibration"]  # the speed each row's figures are at
    assert table.probe_scatter_pct.tolist()[0] == 1.2 and pd.isna(table.probe_scatter_pct.tolist()[1])
    assert pd.isna(table.ttft_pct[1])  # a metric the run had none of stays empty, not 0
    pytest.importorskip("matplotlib")
    assert plot == tmp_path / "out" / "summary.png" and plot.stat().st_size > 0

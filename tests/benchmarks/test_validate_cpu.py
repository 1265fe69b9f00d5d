"""`benchmarks/validate_cpu.py`: its per-kind breakdown of a validation's step errors."""
from __future__ import annotations

import pandas as pd

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

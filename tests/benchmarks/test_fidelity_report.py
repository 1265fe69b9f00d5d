"""`benchmarks/fidelity_report.py`: the source-out target line says what is met and what is not."""
from __future__ import annotations

import pandas as pd

from benchmark_helpers import load_benchmark


def load():
    return load_benchmark("fidelity_report")


def test_target_check_names_each_miss():
    med = pd.DataFrame({"ttft_s": [0.15, 0.05, 0.08], "tpot_s": [0.12, 0.02, 0.04], "e2e_s": [0.04, 0.03, 0.06],
                        "num_runs": [8, 4, 12]}, index=["a", "b", "all runs"])
    lines = load().target_check(med).splitlines()
    assert lines[0].startswith("target ttft_s") and lines[0].endswith(": met")  # 15% <= twice 10%
    assert "missed" in lines[1] and "a 12.0%" in lines[1] and "all runs" not in lines[1]
    assert "missed (all runs 6.0%)" in lines[2]

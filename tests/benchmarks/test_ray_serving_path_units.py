"""`benchmarks/ray_serving_path.py`: the Ray serving path's units, printed (and written on request)."""
from __future__ import annotations

import re

from benchmark_helpers import load_benchmark


def test_the_units_are_printed_per_request_and_per_context_token(capsys):
    assert load_benchmark("ray_serving_path").main(["--repeats", "1"]) == 0
    rows = re.findall(r"^(\w+)\s+([\d.]+) us\s+([\d.]+) ns$", capsys.readouterr().out, re.M)
    assert {r[0] for r in rows} == {"worker_hop", "engine_hop", "full_text_json"}
    assert all(float(ns) > 0 for _, _, ns in rows)


def test_a_non_positive_repeat_count_is_refused_with_its_name(capsys):
    assert load_benchmark("ray_serving_path").main(["--repeats", "0"]) == 2
    assert "--repeats" in capsys.readouterr().err

"""`benchmarks/machine_floor.py`: the per-step floor of the CPU bar, measured on this machine."""
from __future__ import annotations

import re

import pytest

from benchmark_helpers import load_benchmark

pytest.importorskip("torch")


def load_script():
    return load_benchmark("machine_floor")


def test_the_floor_is_measured_from_repeated_identical_steps(capsys):
    import torch

    threads = torch.get_num_threads()
    try:
        assert load_script().main(["--seconds", "1.0", "--batch", "2", "--tokens", "6", "--probe-interval", "0"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    reps = int(re.search(r"(\d+) decode steps in (\d+) repetitions", out).group(2))
    steps = int(re.search(r"(\d+) decode steps", out).group(1))
    assert reps >= 3 and steps == reps * 5  # the same five decode steps each time (the prefill gives token 1)
    oracle = float(re.search(r"oracle per-step error: median ([\d.]+)%", out).group(1))
    lo, hi = (float(x) for x in re.search(r"drift: .*?, ([+-][\d.]+)% \.\. ([+-][\d.]+)%", out).groups())
    assert 0.0 <= oracle < 100.0 and lo <= 0.0 <= hi  # the repetitions' levels straddle the run's median
    assert re.search(r"speed probe: p10-p90 [\d.]+-[\d.]+; oracle error with each step divided by it: median", out)


@pytest.mark.parametrize("flag", ["--seconds", "--batch", "--tokens"])
def test_a_non_positive_size_is_refused_with_its_name(flag):
    with pytest.raises(SystemExit, match=flag):
        load_script().main([flag, "0"])


def test_a_short_run_still_repeats_three_times(capsys):
    import torch

    threads = torch.get_num_threads()
    try:  # far shorter than one repetition: the run goes on until there are three
        assert load_script().main(["--seconds", "0.001", "--batch", "1", "--tokens", "3"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    steps, reps = (int(x) for x in re.search(r"(\d+) decode steps in (\d+) repetitions", out).groups())
    assert reps == 3 and steps == 3 * 2


def test_another_model_is_measured_the_same_way(capsys):
    import torch

    threads = torch.get_num_threads()
    small = str(load_script().REPO / "examples" / "small-llama" / "config.json")
    try:
        assert load_script().main(["--seconds", "1.0", "--batch", "2", "--tokens", "4", "--model", small]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    steps, reps = (int(x) for x in re.search(r"(\d+) decode steps in (\d+) repetitions", out).groups())
    assert reps >= 3 and steps == reps * 3
    with pytest.raises((FileNotFoundError, SystemExit)):
        load_script().main(["--seconds", "1.0", "--model", str(load_script().REPO / "no-such-config.json")])

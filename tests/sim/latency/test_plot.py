"""The step-time picture: curves follow the model, and the PNG is written."""
from __future__ import annotations

import pytest

from sim.latency import ConstantLatencyModel, RooflineLatencyModel
from sim.latency.plot import plot_step_times, step_time_curves
from specs import get_gpu, get_model


def test_curves_are_the_models_step_times():
    curves = step_time_curves(ConstantLatencyModel(0.002, 1e-5))
    assert all(t == pytest.approx(0.002 + 1e-5 * n) for n, t in curves["prefill"])
    assert all(t == pytest.approx(0.002 + 1e-5 * b) for b, t in curves["decode"])


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    models = {f"Llama-2-7B on {g}": RooflineLatencyModel(get_model("Llama-2-7B"), get_gpu(g)) for g in ("H100", "A100")}
    path = plot_step_times(models, tmp_path / "step_times.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""The eager launch path from aiconfigurator's eager vs CUDA-graph all-reduce timings."""
from __future__ import annotations

import pytest

from calibrate.importers.eager_launch import CALLS_PER_LAYER, CALLS_PER_LAYER_TP1, add_eager_launch
from policies import ConfigError
from sim.latency.profile import Profile


def dims(layers=80, tp=8):
    return {"name": "x", "num_hidden_layers": layers, "tensor_parallel_size": tp}


def test_launch_path_goes_with_layers_and_calls():
    a = add_eager_launch(Profile({}, dims(80, 8), {}), call_s=17e-6)
    b = add_eager_launch(Profile({}, dims(40, 8), {}), call_s=17e-6)
    c = add_eager_launch(Profile({}, dims(80, 1), {}), call_s=17e-6)
    assert a["launch_s"] == pytest.approx(2 * b["launch_s"])
    assert c["launch_s"] == pytest.approx(a["launch_s"] * CALLS_PER_LAYER_TP1 / CALLS_PER_LAYER)  # no all-reduces


@pytest.mark.parametrize("kw, field", [({"call_s": 0.0}, "call_s"), ({"call_s": 1e-5, "calls_per_layer": 0},
                                                                       "calls_per_layer")])
def test_bad_inputs_name_the_field(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        add_eager_launch(Profile({}, dims(), {}), **kw)


def test_measured_host_time_per_call_on_h100():
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    import pandas as pd

    from calibrate.importers.aiconfigurator import package_dir
    from calibrate.importers.eager_launch import eager_call_host_s

    call_s, source = eager_call_host_s("H100")
    assert "eager - CUDA-graph" in source
    # an eager Python op call costs microseconds to tens of microseconds of host time
    assert 5e-6 < call_s < 50e-6
    # and it is below the eager call's own latency (which also holds the ~5 us kernel)
    path = sorted((package_dir() / "systems/data/h100_sxm/comm/vllm").glob("*/custom_allreduce_perf.parquet"))[-1]
    df = pd.read_parquet(path)
    eager = df[(df.backend == "vllm_eager") & (df.message_size <= 65536)].latency.median() * 1e-3
    assert call_s < eager
    with pytest.raises(ConfigError, match="^gpu:"):
        eager_call_host_s("TPU")

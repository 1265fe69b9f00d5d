"""The op benchmarks: clocks, repeats, the cold-weight rotation."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from calibrate.op_bench import clock_for, time_call  # noqa: E402
from calibrate_helpers import MICRO  # noqa: E402


def test_time_call_times_every_repeat_after_warmup():
    calls = []
    times = time_call(lambda: calls.append(1), warmup=2, repeats=5, device=torch.device("cpu"))
    assert len(calls) == 7 and len(times) == 5 and all(t >= 0 for t in times)


def test_single_threaded_cpu_runs_use_thread_cpu_time():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert clock_for(torch.device("cpu"))[1] == "thread_cpu"
        torch.set_num_threads(2)
        assert clock_for(torch.device("cpu"))[1] == "wall"
    finally:
        torch.set_num_threads(threads)


def test_cold_weights_rotate_over_one_step_of_weight_traffic(tmp_path):
    from calibrate.op_bench import COLD_BYTES_CAP, OpBench
    from gpu_backend.model_config import ModelConfig

    (tmp_path / "config.json").write_text(json.dumps(MICRO))
    bench = OpBench(ModelConfig.from_json(tmp_path / "config.json"), "cpu")
    module = bench.ops["gate_up"]
    own = sum(p.numel() * p.element_size() for p in module.parameters())
    f = bench.cold(module)
    copies = f.copies
    # enough distinct weight tensors to cover the model's weight bytes (a step's traffic), not more
    assert len({c.weight.data_ptr() for c in copies}) == len(copies)
    assert len(copies) * own >= min(bench.weight_bytes, COLD_BYTES_CAP) > (len(copies) - 1) * own
    assert len(copies) >= 2  # the model has more weights than this one GEMM
    # calls cycle through every copy, and each computes exactly what the module does
    x = bench.rand(3, bench.config.hidden_size)
    with torch.inference_mode():
        ref = module(x)
        assert all(torch.equal(f(x), ref) for _ in range(2 * len(copies)))

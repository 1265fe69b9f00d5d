"""The op benchmarks: clocks, repeats, the cold-weight rotation, ragged decode batches and their discount."""
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


def test_ragged_decodes_get_disjoint_interleaved_blocks_and_the_asked_longest_length(tmp_path):
    from calibrate.op_bench import OpBench, _decode_seqs, _ragged_seqs
    from gpu_backend.model_config import ModelConfig

    seqs = _ragged_seqs([40, 8, 20], 8)
    tables = [s.request.block_table for s in seqs]
    assert [len(t) for t in tables] == [5, 1, 3]
    assert sorted(b for t in tables for b in t) == list(range(9))  # every block once
    assert tables[0][:2] == [0, 3]  # block 0 of each sequence first, then block 1 of those that have one
    assert [s.context_len for s in seqs] == [40, 8, 20]
    uniform = [s.request.block_table for s in _decode_seqs(3, 40, 8)]  # sequence i: i, i + 3, i + 6, ...
    assert uniform == [[i + 3 * j for j in range(5)] for i in range(3)]

    path = tmp_path / "config.json"
    path.write_text(json.dumps(MICRO))
    bench = OpBench(ModelConfig.from_json(path), "cpu")
    fn, mean = bench.ragged_decode(4, 256)
    assert 256 / 16 < mean < 256  # one at the longest, the others well under it
    with torch.inference_mode():
        assert fn().shape[0] == 4  # one query per decode


def ragged_point(b, L, share_saved, pad=0.5):
    """A `measure_ragged_decode` row whose ragged batch saves `share_saved` of its padding's share."""
    mean = L * (1 - pad)
    return (b, L, mean, 1.0 - share_saved * pad, 1.0)


def test_the_padding_discount_is_a_table_of_clipped_shares_or_nothing():
    from calibrate.op_bench import padding_discount

    pts = [ragged_point(4, 256, 0.0), ragged_point(4, 1024, 0.2), ragged_point(32, 256, -0.3), ragged_point(32, 1024, 1.5)]
    d = padding_discount(pts)
    assert d == {"batch": [4, 32], "max_kv": [256, 1024], "discount": [[0.0, 0.2], [0.0, 1.0]]}
    assert padding_discount([ragged_point(4, 256, -0.1), ragged_point(4, 1024, 0.0)]) is None  # saves nothing
    assert padding_discount(pts[:3]) is None  # not a full table
    assert padding_discount([]) is None

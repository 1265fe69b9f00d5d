"""The engine's steps timed for a calibration: the after-prefill probe."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from calibrate_helpers import MICRO  # noqa: E402


def test_the_after_prefill_probe_keeps_the_decode_batch_and_cycles_through_the_sizes(tmp_path):
    """Every kept cycle: one prefill of a probe size (those up to half the model's length), then
    decode-only steps of the same decoders, k counting up to the cycle's end; each size as often."""
    from calibrate.op_bench import OpBench
    from calibrate.engine_bench import measure_after_prefill
    from calibrate.engine_steps import AFTER_PREFILL_CYCLE, AFTER_PREFILL_SIZES
    from gpu_backend.model_config import ModelConfig

    (tmp_path / "config.json").write_text(json.dumps(MICRO))
    bench = OpBench(ModelConfig.from_json(tmp_path / "config.json"), "cpu")
    records = measure_after_prefill(bench, repeats=2, progress=False)
    sizes = [n for n in AFTER_PREFILL_SIZES if n <= MICRO["max_position_embeddings"] // 2]
    assert len(records) == 2 * len(sizes) * AFTER_PREFILL_CYCLE and all(t > 0 for *_, t in records)
    for i in range(0, len(records), AFTER_PREFILL_CYCLE):
        cycle = records[i:i + AFTER_PREFILL_CYCLE]
        assert [k for _, k, _ in cycle] == list(range(AFTER_PREFILL_CYCLE))
        assert len({n for n, _, _ in cycle}) == 1 and cycle[0][0] in sizes
    assert sorted(n for n, k, _ in records if k == 0) == sorted(sizes * 2)

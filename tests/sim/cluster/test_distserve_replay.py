"""Replay of DistServe's measured A100 runs (real data; skipped without ../shared/data).

One vLLM run and one disaggregated run, predicted with DistServe's own A100 coefficients: the mean
TTFT and TPOT land within 35% of the measurement, and the disaggregated run's TTFT is below the
colocated vLLM run's at a comparable rate (the point of disaggregation).
"""
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("distserve_replay", REPO / "benchmarks" / "distserve_replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("run", ["vllm-100-1", "distserve-c21d11-300-3"])
def test_replay_predicts_mean_ttft_and_tpot(shared_data, run):
    folder = shared_data / "groundtruth" / "distserve-a100-opt13b" / "data-ground-truth" / "opt-13b-sharegpt"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    bench = load_benchmark()
    bench.DATA = folder.parent.parent  # follow the fixture's data root
    path = folder / f"{run}.exp"
    measured = bench.read_run(path)
    predicted = bench.predict(path, measured, "distserve")
    assert len(predicted) == len(measured)
    assert (predicted["finish_reason"] == "length").all()
    for metric in ("ttft_s", "tpot_s"):
        assert predicted[metric].mean() == pytest.approx(measured[metric].mean(), rel=0.35), metric
    if run.startswith("distserve"):
        assert predicted["kv_transfer_s"].notna().all()
        # prefill on a TP2 replica with no decode interference: TTFT well below vLLM's at 1 req/s
        vllm = bench.read_run(folder / "vllm-100-1.exp")
        assert predicted["ttft_s"].mean() < vllm["ttft_s"].mean()

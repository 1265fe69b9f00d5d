"""simulate(out=DIR): a streamed run gives the in-memory run's tables and summary, holding only what is live."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from sim.config import load_config
from sim.runner import simulate
from sim.workload import build_workload

BASE = {"model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100-SXM"},
        "scheduler": {"policy": "chunked", "max_num_batched_tokens": 512, "max_num_seqs": 64},
        "workload": {"kind": "poisson", "rate": 14.0, "num_requests": 240, "seed": 3,
                     "prompt_len": {"kind": "lognormal", "median": 500, "sigma": 0.9, "max": 6000},
                     "output_len": {"kind": "lognormal", "median": 90, "sigma": 0.8, "max": 700}},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05}}

LAYOUTS = {
    "one replica": [],
    "memory pressure, swaps": ["hardware.num_gpu_blocks=400", "scheduler.preemption=swap", "hardware.swap_space_gb=2"],
    "time limit (aborts)": ["sim.max_sim_time_s=8"],
    "too long (rejects)": ["scheduler.max_model_len=2048", "workload.too_long=keep"],
    "too long (filtered)": ["scheduler.max_model_len=2048", "workload.too_long=filter"],
    "classes": ['workload.classes=[{name = "chat", priority = 0, fraction = 0.7}, '
                '{name = "batch", priority = 1, fraction = 0.3}]', "scheduler.queue=priority"],
    "prefix groups": ["workload.num_prefix_groups=3", "workload.prefix_len=256", "workload.users_per_group=4",
                      "cache.enable_prefix_caching=true"],
    "KV offload tier": ["workload.num_prefix_groups=8", "workload.prefix_len=1024", "workload.users_per_group=4",
                        "cache.enable_prefix_caching=true", "hardware.num_gpu_blocks=500", "cache.offload_size_gb=4"],
    "closed loop": ["workload.kind=closed_loop", "workload.num_users=12", "workload.think_time=0.1"],
    "front end": ["frontend.request_overhead_s=0.002", "frontend.stream_overhead_s=0.0005"],
    "three replicas": ["cluster.num_replicas=3", "cluster.router=least_tokens", "workload.rate=30"],
    "disaggregated": ["disaggregation.enabled=true", "workload.rate=8"],
    "autoscaling": ["autoscaling.enabled=true", "autoscaling.max_replicas=3", "autoscaling.metric=queue",
                    "autoscaling.target=4", "autoscaling.interval_s=2", "autoscaling.provisioning_delay_s=5",
                    "workload.rate=30"],
}


def assert_same_summary(streamed: dict, exact: dict, path: str = "") -> None:
    """Equal; floats made of sums (means, energy) to float rounding: batch by batch, in finish order."""
    assert streamed.keys() == exact.keys(), path
    for key, want in exact.items():
        got, where = streamed[key], f"{path}.{key}"
        if isinstance(want, dict):
            assert_same_summary(got, want, where)
        elif isinstance(want, float) and key == "mean":
            assert got == pytest.approx(want, rel=1e-12), where
        elif isinstance(want, float) and math.isnan(want):
            assert math.isnan(got), where
        else:
            assert got == pytest.approx(want, rel=1e-12, abs=0) if isinstance(want, float) else got == want, where


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_streamed_run_is_the_in_memory_run(layout, tmp_path):
    config = load_config(BASE, LAYOUTS[layout])
    exact = simulate(config)
    streamed = simulate(config, out=tmp_path)
    assert streamed.streamed and streamed.out_dir == tmp_path
    assert_same_summary(streamed.summary, exact.summary)
    # every request, once, with the in-memory row (files are in the order requests ended)
    got = streamed.requests.sort_values("req_id").reset_index(drop=True)
    want = exact.requests.sort_values("req_id").reset_index(drop=True)
    assert len(got) == exact.summary["num_requests"] == len(want)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    pd.testing.assert_frame_equal(streamed.steps, exact.steps, check_dtype=False)
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "config.toml").is_file()
    if exact.replicas is not None:
        pd.testing.assert_frame_equal(streamed.replicas, exact.replicas)
        assert (tmp_path / "replicas.csv").is_file()


def test_stream_without_files_keeps_the_summary_only():
    config = load_config(BASE)
    result = simulate(config, stream=True)
    assert_same_summary(result.summary, simulate(config).summary)
    with pytest.raises(ValueError, match="out directory"):
        result.requests


def test_finished_requests_leave_memory_as_the_run_goes():
    """The recorder and the workload hold the live requests and one batch, not the whole run."""
    from records.stream import StreamingRecorder
    import sim.runner as runner

    config = load_config(BASE, ["workload.num_requests=1500", "workload.rate=10"])
    held = []
    real = StreamingRecorder.on_finish

    def spy(self, request, now):
        real(self, request, now)
        held.append(len(self._live) + len(self._ended))

    StreamingRecorder.on_finish = spy
    try:
        original = runner.make_recorder
        runner.make_recorder = lambda *a, **k: StreamingRecorder(None, request_batch=32)
        result = simulate(config, stream=True)
    finally:
        StreamingRecorder.on_finish = real
        runner.make_recorder = original
    assert result.summary["num_requests"] == 1500 == len(held)
    live_max = result.summary["num_running"]["max"] + result.summary["num_waiting"]["max"]
    assert max(held) <= live_max + 32 < 1500


def test_the_workload_stream_is_start_sorted():
    """Workload.stream makes, one at a time, the very requests start() lists (sorted by arrival)."""
    for overrides in ([], LAYOUTS["too long (filtered)"], LAYOUTS["classes"], LAYOUTS["prefix groups"]):
        config = load_config(BASE, overrides)
        listed = sorted(build_workload(config.workload, config.scheduler.max_model_len).start(),
                        key=lambda r: r.arrival_time)
        count, stream = build_workload(config.workload, config.scheduler.max_model_len).stream()
        streamed = list(stream)
        assert count == len(streamed) == len(listed)
        for a, b in zip(streamed, listed):
            assert (a.req_id, a.arrival_time, a.num_prompt_tokens, a.max_tokens, a.priority, a.tags) == \
                   (b.req_id, b.arrival_time, b.num_prompt_tokens, b.max_tokens, b.priority, b.tags)
            assert (a.prompt_token_ids is None) == (b.prompt_token_ids is None)
            if a.prompt_token_ids is not None:
                assert list(a.prompt_token_ids[:300]) == list(b.prompt_token_ids[:300])
    closed = load_config(BASE, LAYOUTS["closed loop"])
    assert build_workload(closed.workload).stream() is None


def test_a_streamed_summary_names_the_same_rejection_example():
    """Rejections end in another order than they were submitted (several replicas, a closed loop):
    the streamed summary's example of a kind is still the earliest submitted one's, as the in-memory
    summary reads it off the table."""
    tiny = str(Path(__file__).resolve().parents[2] / "examples" / "tiny-llama" / "config.json")
    cfg = load_config({
        "model": {"name": tiny}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 2},
        "scheduler": {"policy": "vllm", "max_num_batched_tokens": 8, "max_num_seqs": 8, "queue": "priority",
                      "max_model_len": 16},
        "cache": {"block_size": 2, "enable_prefix_caching": False},
        "workload": {"num_requests": 28, "seed": 541, "prompt_len": {"kind": "constant", "value": 90},
                     "output_len": {"kind": "uniform", "low": 3, "high": 16}, "kind": "closed_loop", "num_users": 8,
                     "think_time": 0.0, "too_long": "keep"},
        "autoscaling": {"enabled": True, "min_replicas": 1, "max_replicas": 3, "metric": "kv_usage",
                        "interval_s": 0.01, "provisioning_delay_s": 0.2}})
    in_memory = simulate(cfg).summary["rejected_reasons"]
    assert in_memory[0]["count"] == 28
    assert simulate(cfg, stream=True).summary["rejected_reasons"] == in_memory

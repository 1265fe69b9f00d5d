"""Step times from LLMServingSim per-layer profiles and DistServe coefficients."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from policies import BatchPlan, ConfigError, Request, ScheduledSeq
from fidelity.sources.distserve import DistServeLatencyModel
from fidelity.sources.llmservingsim import Grid, LayerProfileLatencyModel, load_llmservingsim_run


def plan(chunks=(), num_decode=0, kv=0):
    seqs = [ScheduledSeq(Request(i, 0.0, c + k, 8), c, k, True) for i, (c, k) in enumerate(chunks)]
    seqs += [ScheduledSeq(Request(100 + j, 0.0, kv, 8), 1, kv, True) for j in range(num_decode)]
    return BatchPlan(0, tuple(seqs))


def tiny_profile(folder, moe=False):
    """A profile with linear op times, so that step times have a closed form."""
    folder.mkdir(parents=True)
    tokens = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    rows = [(op, t, 10.0 + 0.5 * t) for op in ("layernorm", "qkv_proj", "o_proj", "gate_up_proj", "act_fn",
                                                "down_proj", "rotary_emb", "embedding", "final_layernorm") for t in tokens]
    pd.DataFrame(rows, columns=["layer", "tokens", "time_us"]).to_csv(folder / "dense.csv", index=False)
    pd.DataFrame([(op, s, 100.0 + s) for op in ("lm_head", "sampler") for s in (1, 2, 4, 8, 16, 32, 64, 128, 256)],
                 columns=["layer", "sequences", "time_us"]).to_csv(folder / "per_sequence.csv", index=False)
    att = []
    for c in (0, 16, 256, 2048):
        for kp in (0, 16, 1024, 16384):
            for n in (0, 1, 8, 64):
                for kd in ((0,) if n == 0 else (16, 1024, 16384)):
                    if c == 0 and n == 0:
                        continue
                    att.append((c, kp, n, kd, 5.0 + 0.01 * c * (1 + kp / 1024) + 0.001 * n * kd))
    pd.DataFrame(att, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]).to_csv(
        folder / "attention.csv", index=False)
    if moe:
        pd.DataFrame([(t, e, 20.0 + 2.0 * e + 0.1 * t) for t in tokens for e in (8, 16, 32, 64, 128)],
                     columns=["tokens", "activated_experts", "time_us"]).to_csv(folder / "moe.csv", index=False)
    return folder


def test_step_time_is_layers_times_per_layer_ops_plus_per_step_ops(tmp_path):
    m = LayerProfileLatencyModel(tiny_profile(tmp_path / "p"), num_layers=10, hidden_size=1024)
    p = plan(chunks=[(256, 1024)], num_decode=8, kv=1024)
    t = 256 + 8
    op = (10.0 + 0.5 * t) * 1e-6
    per_layer = 8 * op  # six ops + layernorm twice (before attention and before the MLP)
    attn = (5.0 + 0.01 * 256 * 2 + 0.001 * 8 * 1025) * 1e-6  # a decode attends to its context + itself
    per_step = 2 * op
    head = 2 * (100.0 + 9) * 1e-6  # 8 decodes + the chunk reaching its end: 9 sampled
    assert m.step_time(p) == pytest.approx(10 * (per_layer + attn) + per_step + head, rel=1e-9)


def test_tensor_parallel_adds_two_ring_all_reduces_per_layer(tmp_path):
    folder = tiny_profile(tmp_path / "p")
    one = LayerProfileLatencyModel(folder, 10, 4096, tp=1)
    two = LayerProfileLatencyModel(folder, 10, 4096, tp=2, link_bandwidth=50e9)
    p = plan(num_decode=32, kv=1024)
    ring = 1e-5 + 2 * (1 / 2) * 32 * 4096 * 2 / 50e9
    assert two.step_time(p) - one.step_time(p) == pytest.approx(10 * 2 * ring, rel=1e-9)


def test_moe_experts_activated_grow_towards_all_and_shrink_with_expert_parallelism(tmp_path):
    folder = tiny_profile(tmp_path / "p", moe=True)
    m = LayerProfileLatencyModel(folder, 4, 2048, num_experts=128, num_experts_per_tok=8)
    ep = LayerProfileLatencyModel(folder, 4, 2048, num_experts=128, num_experts_per_tok=8, ep_size=2,
                                  link_bandwidth=16e9, link_latency=20e-6)
    assert m.activated_experts(1) == pytest.approx(8.0)
    assert m.activated_experts(10_000) == pytest.approx(128.0)
    assert ep.activated_experts(10_000) == pytest.approx(64.0)
    p = plan(num_decode=16, kv=512)
    assert ep.breakdown(p)["moe"] < m.breakdown(p)["moe"]
    # each token goes to the other GPU iff one of its 8 experts lives there (1 - 2^-8), and back
    remote = 16 * (1 - 0.5 ** 8)
    assert ep.breakdown(p)["all_to_all"] == pytest.approx(4 * 2 * (20e-6 + remote * 2048 * 2 / 16e9))
    assert m.breakdown(p)["all_to_all"] == 0.0


def test_grid_hits_its_points_and_interpolates_linearly():
    g = Grid([np.array([0, 10]), np.array([0, 100])], {(0, 0): 1.0, (0, 100): 2.0, (10, 0): 3.0, (10, 100): 5.0})
    assert g(0, 100) == 2.0 and g(10, 0) == 3.0
    assert g(5, 50) == pytest.approx((1.0 + 2.0 + 3.0 + 5.0) / 4)
    assert g(20, 0) == pytest.approx(5.0)  # extended linearly beyond the last knot


def test_real_profile_reproduces_its_own_measurements(shared_data):
    folder = (shared_data / "groundtruth/llmservingsim-vllm-0.19/profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1")
    m = LayerProfileLatencyModel(folder, 32, 4096)
    att = pd.read_csv(folder / "attention.csv")
    sample = att[(att.prefill_chunk == 0) & (att.n_decode > 0)].sample(20, random_state=0)
    for r in sample.itertuples():
        assert m.attention([], r.n_decode, r.kv_decode) == pytest.approx(r.time_us * 1e-6, rel=1e-9)
    mixed = att[(att.prefill_chunk > 0) & (att.n_decode > 0)].sample(20, random_state=1)
    for r in mixed.itertuples():
        assert m.attention([(r.prefill_chunk, r.kv_prefill)], r.n_decode, r.kv_decode) == pytest.approx(
            r.time_us * 1e-6, rel=1e-9)
    times = [m.step_time(plan(num_decode=n, kv=1000)) for n in (1, 8, 64, 256)]
    assert times == sorted(times)


def test_distserve_coefficients(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"m": {"1": {"decoding_large_small_bs_threshold": 4, "prefill": [10.0, 0.1, 0.001],
                                            "decoding_smallbs": [20.0, 0.01, 1.0], "decoding_largebs": [30.0, 0.0, 0.5]}}}))
    m = DistServeLatencyModel(path, "m", 1)
    assert m.step_time(plan(chunks=[(100, 0), (50, 0)])) == pytest.approx((10 + 0.1 * 150 + 0.001 * (100**2 + 50**2)) / 1e3)
    assert m.step_time(plan(num_decode=2, kv=100)) == pytest.approx((20 + 0.01 * 202 + 2.0) / 1e3)
    assert m.step_time(plan(num_decode=4, kv=100)) == pytest.approx((30 + 0.5 * 4) / 1e3)


def bench_run(folder, meta=None, lines=None):
    """A hand-made LLMServingSim bench example (vllm/meta.json and requests.jsonl; `meta` merged in,
    `lines` replacing the three requests' lines)."""
    (folder / "vllm").mkdir(parents=True)
    data = {"vllm_version": "0.19.0", "hardware": {"device_name": "NVIDIA H100 80GB HBM3"},
            "engine_kwargs": {"model": "meta-llama/Llama-3.1-8B", "max_num_seqs": 64},
            "kv_cache": {"block_size": 16, "num_gpu_blocks": 1000, "enable_prefix_caching": True}, **(meta or {})}
    (folder / "vllm" / "meta.json").write_text(json.dumps(data))
    recs = [{"request_id": f"bench-{i}", "input_toks": 100 + i, "output_toks": 20, "queued_ts": 10.0 + i,
             "first_token_ts": 10.2 + i, "last_token_ts": 11.0 + i} for i in range(3)]
    text = "\n".join(json.dumps(r) for r in recs) + "\n" if lines is None else lines
    (folder / "vllm" / "requests.jsonl").write_text(text)
    return folder


def test_a_hand_made_bench_run_reads_its_settings_as_written(tmp_path):
    run = load_llmservingsim_run(bench_run(tmp_path / "ok"))
    assert run.server.engine_version == "0.19" and run.server.enable_prefix_caching and run.num_requests == 3
    off = bench_run(tmp_path / "off", {"kv_cache": {"block_size": 16, "enable_prefix_caching": "false"}})
    assert load_llmservingsim_run(off).server.enable_prefix_caching is False  # bool("false") is True
    four = bench_run(tmp_path / "tp4", {"hardware": {"device_name": "NVIDIA H100 80GB HBM3", "device_count": 8},
                                        "engine_kwargs": {"model": "m", "tensor_parallel_size": 4,
                                                          "data_parallel_size": 2}})
    assert load_llmservingsim_run(four).server.tensor_parallel_size == 4  # 4 x 2 GPUs of 8: as recorded


@pytest.mark.parametrize("meta, lines, message", [
    ({"vllm_version": 0.19}, None, r"meta.json: vllm_version: 0.19 was read as a number.*quote it"),
    ({"vllm_version": "nineteen"}, None, r"meta.json: vllm_version: 'nineteen' is not a vLLM release"),
    ({"kv_cache": {"enable_prefix_caching": "maybe"}}, None, r"meta.json: kv_cache.enable_prefix_caching: expected true"),
    ({"engine_kwargs": {"model": "m", "kv_offloading_size": "lots"}}, None, r"meta.json: kv_offloading_size: expected"),
    (None, '{"request_id": "bench-0", "input_toks": 1', r"requests.jsonl line 1 is not valid JSON"),
    (None, '{"request_id": "bench-0", "input_toks": 1}\n', r"requests.jsonl: record 1 has no queued_ts; each record has request_id"),
    (None, '{"request_id": "b", "input_toks": "x", "output_toks": 1, "queued_ts": 1, "first_token_ts": 1, '
           '"last_token_ts": 2}\n', r"requests.jsonl: record 1: input_toks: expected a number, got 'x'"),
    ({"hardware": {"device_name": "NVIDIA H100 80GB HBM3", "device_count": 1},
      "engine_kwargs": {"model": "m", "tensor_parallel_size": 4}}, None,
     r"meta.json: engine_kwargs.tensor_parallel_size 4 x data_parallel_size 1 needs 4 GPUs, but "
     r"hardware.device_count records 1"),
    ({"engine_kwargs": {"model": "m", "tensor_parallel_size": "two"}}, None,
     r"meta.json: engine_kwargs.tensor_parallel_size: expected an integer, got 'two'"),
    ({"hardware": {"device_name": "NVIDIA H100 80GB HBM3", "device_count": 0}}, None,
     r"meta.json: hardware.device_count: must be >= 1, got 0"),
], ids=["version-number", "version-text", "prefix-caching", "offloading-size", "truncated-line", "missing-key",
        "text-count", "more-gpus-than-devices", "text-tp", "no-devices"])
def test_a_damaged_bench_run_names_the_file_and_field(tmp_path, meta, lines, message):
    with pytest.raises(ConfigError, match=message):
        load_llmservingsim_run(bench_run(tmp_path / "run", meta, lines))


@pytest.mark.parametrize("name", ["meta.json", "requests.jsonl"])
def test_an_empty_bench_file_names_itself(tmp_path, name):
    folder = bench_run(tmp_path / "run")
    (folder / "vllm" / name).write_text("")
    with pytest.raises(ConfigError, match=f"{folder / 'vllm' / name}"):
        load_llmservingsim_run(folder)

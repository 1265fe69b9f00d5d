"""config_from_run and `servesim simulate --from-run`: configs rebuilt from run folders."""
from __future__ import annotations

import copy
import csv
import json

import pytest
import yaml
from fidelity_helpers import ISSUE_PROFILE, make_measured_run, write_exp_config

from policies import ConfigError
from servesim.cli import main
from fidelity.from_run import config_from_run, load_run
from fidelity.run_folders import find_runs
from sim.workload import build_workload


def issue_run(tmp_path, **profile_changes):
    folder = write_exp_config(tmp_path / "ip-run", max_num_batched_tokens=4096, max_num_seqs=128, max_model_len=8192)
    profile = copy.deepcopy(ISSUE_PROFILE)
    profile["load"].update(profile_changes)
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    return folder


def test_server_arguments_and_profile_become_the_config(tmp_path):
    cfg = config_from_run(issue_run(tmp_path), ["hardware.gpu=H100"])
    assert cfg.hardware.gpu == "H100" and cfg.hardware.tp == 1
    assert (cfg.scheduler.policy, cfg.scheduler.max_num_batched_tokens, cfg.scheduler.max_num_seqs,
            cfg.scheduler.max_model_len) == ("vllm", 4096, 128, 8192)
    assert cfg.model.spec().name == "Llama-2-7B"
    assert cfg.workload.kind == "inference_perf"
    # multi-turn chat: only each session's first turn is known up front (8 groups x 3 users), the
    # rest of the 1200 sends of stage 1 wait for their session's previous answer
    first = build_workload(cfg.workload).start()
    assert len(first) == 8 * 3
    # no client release recorded: inference-perf 0.6's sessions (an empty context, then system
    # prompt + question)
    assert {r.num_prompt_tokens for r in first} == {120 + 500}


def test_simulate_from_run_keeps_multi_turn_sessions(tmp_path):
    sys_len, q_len, out_len = 16, 40, 8
    folder = write_exp_config(tmp_path / "chat", max_model_len=4096)
    profile = {"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 1, "num_users_per_system_prompt": 2, "system_prompt_len": sys_len,
        "question_len": q_len, "output_len": out_len, "enable_multi_turn_chat": True}},
        "load": {"type": "constant", "stages": [{"rate": 2, "duration": 5}]}, "server": {"ignore_eos": True}}
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    out = tmp_path / "out"
    assert main(["simulate", "--from-run", str(folder), "--set", "hardware.gpu=H100", "--out", str(out), "--quiet"]) == 0
    import pandas as pd

    req = pd.read_csv(out / "requests.csv").set_index("req_id")
    assert len(req) == 10 and (req["finish_reason"] != "rejected").all()
    for i in range(2, 10):  # send i is session i % 2's turn i // 2: after the previous turn, on its context
        prev, cur = req.loc[f"s0-{i - 2}"], req.loc[f"s0-{i}"]
        assert cur["arrival_time"] >= prev["finish_time"] - 1e-9
        assert cur["num_prompt_tokens"] == prev["num_prompt_tokens"] + out_len + sys_len + q_len


def test_overrides_win_and_bad_values_name_the_field(tmp_path):
    run = issue_run(tmp_path)
    assert config_from_run(run, ["scheduler.max_num_seqs=7"]).scheduler.max_num_seqs == 7
    with pytest.raises(ConfigError, match="^hardware.gpu"):
        config_from_run(run, ["hardware.gpu=TPU-v9"])


def test_a_model_servesim_lacks_is_read_from_a_config_given_or_carried(tmp_path):
    run = issue_run(tmp_path)
    exp = run / "exp-config.yaml"
    exp.write_text(exp.read_text().replace("meta-llama/Llama-2-7b-hf", "acme/Widget-12B"))
    with pytest.raises(ConfigError, match=r"^model\.name: 'acme/Widget-12B' is not in the model catalog"):
        config_from_run(run)
    widget = dict(model_type="mistral", hidden_size=5120, intermediate_size=14336, num_attention_heads=32,
                  num_hidden_layers=40, num_key_value_heads=8, head_dim=128, vocab_size=131072,
                  max_position_embeddings=131072, tie_word_embeddings=False, torch_dtype="bfloat16")
    given = tmp_path / "widget.json"
    given.write_text(json.dumps(widget))
    spec = config_from_run(run, [f"model.name={given}"]).model.spec()
    assert (spec.num_layers, spec.head_dim, spec.q_size) == (40, 128, 4096)  # head_dim is not hidden / heads
    (run / "config.json").write_text(json.dumps(widget))  # carried in the run folder
    assert config_from_run(run).model.spec().num_params == spec.num_params


def test_simulate_from_run_end_to_end(tmp_path):
    run = issue_run(tmp_path, stages=[{"rate": 2, "duration": 10}])
    out = tmp_path / "out"
    assert main(["simulate", "--from-run", str(run), "--set", "hardware.gpu=H100", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 20
    assert summary["num_finished"] + summary["num_rejected"] == 20
    assert (out / "config.toml").read_text().count("max_num_batched_tokens = 4096") == 1


def test_a_run_with_measurements_is_replayed(tmp_path):
    folder = make_measured_run(tmp_path / "measured", n=12)
    cfg = config_from_run(folder)
    assert cfg.workload.kind == "trace"
    assert load_run(folder).num_requests == 12


def test_a_sweep_profile_without_arrivals_runs_as_guidellm_drives_it(tmp_path):
    """No measurements: the sweep is guidellm's own generator (`kind = "guidellm"`), every
    benchmark's requests simulated, the constant rates between the first two benchmarks' achieved ones."""
    folder = write_exp_config(tmp_path / "sweep")
    (folder / "profile.yaml").write_text(yaml.safe_dump({"rate-type": "sweep", "rate": 4, "max-requests": 12,
                                                         "data": {"prompt_tokens": 100, "output_tokens": 10}}))
    cfg = config_from_run(folder, ["hardware.gpu=H100"])
    assert cfg.workload.kind == "guidellm"
    out = tmp_path / "out"
    assert main(["simulate", "--from-run", str(folder), "--set", "hardware.gpu=H100", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 4 * 12 and summary["num_finished"] == 48
    # each benchmark as guidellm reports it: one at a time, then all at once, then rates between
    bench = list(csv.DictReader(open(out / "benchmarks.csv")))
    assert [b["strategy"] for b in bench] == ["synchronous", "throughput", "constant", "constant"]
    assert all(int(b["requests"]) == 12 and int(b["failed"]) == 0 for b in bench)
    sync, thr = (float(bench[k]["requests_per_s"]) for k in (0, 1))
    assert sync * float(bench[0]["e2e_mean_s"]) == pytest.approx(1.0, rel=1e-6)  # back to back
    assert [float(b["target"]) for b in bench[2:]] == pytest.approx([(sync + thr) / 2, thr])  # linspace(sync, thr, 3)[1:]
    weighted = sum(float(b["ttft_mean_ms"]) for b in bench) / 4 / 1e3  # equal counts: the run's mean
    assert weighted == pytest.approx(summary["ttft_s"]["mean"], rel=1e-9)
    bad = write_exp_config(tmp_path / "bad")
    (bad / "profile.yaml").write_text(yaml.safe_dump({"rate-type": "sweep", "rate": 1, "max-requests": 12,
                                                      "data": {"prompt_tokens": 100, "output_tokens": 10}}))
    with pytest.raises(ConfigError, match="^profile.rate: a sweep needs at least 2"):
        config_from_run(bad)


def test_every_shipped_run_rebuilds_with_its_own_limits(shared_data):
    for run in find_runs(shared_data / "groundtruth"):
        target = run.path
        cfg = config_from_run(target) if target.is_dir() else config_from_run(target)
        s = run.server
        if s.max_num_batched_tokens:
            assert cfg.scheduler.max_num_batched_tokens == s.max_num_batched_tokens, run.name
        if s.max_num_seqs:
            assert cfg.scheduler.max_num_seqs == s.max_num_seqs, run.name
        assert cfg.hardware.tp == s.tensor_parallel_size
        assert cfg.scheduler.policy == ("vllm" if s.enable_chunked_prefill else "continuous")


def test_memory_and_kv_dtype_arguments_reach_the_config(tmp_path):
    folder = make_measured_run(tmp_path / "mem", n=8)
    import yaml as _yaml

    exp = _yaml.safe_load((folder / "exp-config.yaml").read_text())
    exp.update(gpu_memory_utilization=0.8, kv_cache_dtype="fp8_e4m3")
    (folder / "exp-config.yaml").write_text(_yaml.safe_dump(exp))
    cfg = config_from_run(folder)
    assert cfg.hardware.gpu_memory_utilization == 0.8 and cfg.model.kv_cache_dtype == "fp8"
    exp["gpu_memory_utilization"] = 1.5
    (folder / "exp-config.yaml").write_text(_yaml.safe_dump(exp))
    with pytest.raises(ValueError, match="^exp-config.gpu_memory_utilization"):
        config_from_run(folder)


def test_the_runs_own_kv_capacity_holds_only_for_its_own_gpu_tp_and_model(tmp_path):
    """An engine's counted KV blocks are of its card and shapes: a what-if on another GPU or TP derives
    them again (and says so); the same card by another name, or a setting elsewhere, keeps them."""
    folder = make_measured_run(tmp_path / "kv", n=8)
    exp = yaml.safe_load((folder / "exp-config.yaml").read_text())
    (folder / "exp-config.yaml").write_text(yaml.safe_dump({**exp, "num_gpu_blocks": 5000}))
    for kept in ([], ["hardware.gpu=h100"], ["scheduler.max_num_seqs=8"]):
        cfg = config_from_run(folder, kept)
        assert cfg.hardware.num_gpu_blocks == 5000 and not any("KV capacity" in n for n in cfg.notes)
    for moved in (["hardware.gpu=A10G"], ["hardware.tp=2"]):
        cfg = config_from_run(folder, moved)
        assert cfg.hardware.num_gpu_blocks is None, moved
        assert any(f"KV capacity (5000 blocks, counted by its engine) holds for its own {moved[0].split('=')[0]}" in n
                   for n in cfg.notes)
    assert config_from_run(folder, ["hardware.gpu=A10G", "hardware.num_gpu_blocks=300"]).hardware.num_gpu_blocks == 300
    # a GPU the run does not record is taken as its own, unless the counted blocks cannot fit in it
    (folder / "exp-config.yaml").write_text(yaml.safe_dump({k: v for k, v in {**exp, "num_gpu_blocks": 500}.items()
                                                             if k != "gpu"}))
    assert config_from_run(folder, ["hardware.gpu=A10G"]).hardware.num_gpu_blocks == 500
    (folder / "exp-config.yaml").write_text(yaml.safe_dump({k: v for k, v in {**exp, "num_gpu_blocks": 50000}.items()
                                                             if k != "gpu"}))
    assert config_from_run(folder, ["hardware.gpu=A10G"]).hardware.num_gpu_blocks is None


def test_kv_offloading_arguments_become_the_cpu_tier(tmp_path):
    """vLLM's --kv-offloading-size / --kv-offloading-backend are the cache section's offload tier; the
    shipped runs that record them (LLMServingSim's vLLM 0.19 meta) have it off."""
    import yaml as _yaml

    folder = make_measured_run(tmp_path / "offload", n=8)
    assert config_from_run(folder).cache.offload_size_gb == 0
    exp = _yaml.safe_load((folder / "exp-config.yaml").read_text())
    exp.update(kv_offloading_size=64, kv_offloading_backend="lmcache")
    (folder / "exp-config.yaml").write_text(_yaml.safe_dump(exp))
    cfg = config_from_run(folder)
    assert (cfg.cache.offload_size_gb, cfg.cache.offload_backend) == (64.0, "lmcache")
    exp["kv_offloading_backend"] = "disk"
    (folder / "exp-config.yaml").write_text(_yaml.safe_dump(exp))
    with pytest.raises(ConfigError, match=r"^cache\.offload_backend"):
        config_from_run(folder)


@pytest.mark.parametrize("version, size_gb", [("0.12.0", 0.0), ("0.13.0", 0.0), ("0.14.0", 64.0), ("0.19.0", 64.0)])
def test_kv_offloading_size_alone_is_on_only_from_vllm_0_14(tmp_path, version, size_gb):
    """Before 0.14 --kv-offloading-backend defaulted to None and vLLM enabled offloading only with it
    set (`_post_init_kv_transfer_config` returned early); from 0.14 the size alone turns on 'native'."""
    import yaml as _yaml

    folder = make_measured_run(tmp_path / "offload", n=8)
    exp = _yaml.safe_load((folder / "exp-config.yaml").read_text())
    exp.update(kv_offloading_size=64, vllm_version=version)
    (folder / "exp-config.yaml").write_text(_yaml.safe_dump(exp))
    cfg = config_from_run(folder)
    assert cfg.cache.offload_size_gb == size_gb

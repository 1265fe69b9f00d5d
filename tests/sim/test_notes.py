"""`sim.notes`: each setting that changes another says so, and what it says is what the run does."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from policies import CacheConfig, Request
from policies.schedulers import make_scheduler
from records.display import number
from sim.config import config_to_toml, load_config
from sim.notes import outcome_notes, setting_notes, with_notes
from sim.runner import simulate
from sim.workload import build_workload
from sim.workload.traces import read_trace

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "examples" / "traces" / "azure_conv_2023_slice.csv"


def config(**sections):
    data = {"model": {"name": "Llama-2-7B"}, "workload": {"num_requests": 50}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return load_config(data)


def notes_of(cfg):
    workload = build_workload(cfg.workload, cfg.scheduler.max_model_len)
    return setting_notes(cfg, workload), workload


def test_a_plain_config_has_no_notes():
    notes, workload = notes_of(config())
    workload.start()
    assert notes == [] and outcome_notes(workload) == []


def test_a_rate_on_a_trace_says_it_rescales_the_recorded_arrivals_by_what_it_does():
    cfg = config(workload={"kind": "trace", "trace": str(TRACE), "rate": 12.0, "time_scale": 2.0})
    notes, workload = notes_of(cfg)
    recorded = read_trace(str(TRACE)).arrival_time[:50]
    arrivals = np.array([r.arrival_time for r in workload.start()])
    factor = arrivals[1:] / recorded[1:]
    np.testing.assert_allclose(factor, factor[0], rtol=1e-9)  # one factor for every arrival
    (rescale,) = [n for n in notes if "rescales" in n]
    assert "workload.rate = 12 " in rescale and f"x {number(factor[0], trim=True)};" in rescale
    assert any("workload.time_scale = 2 is not used" in n for n in notes)
    # without the rate: replayed as recorded (times time_scale), and nothing to say
    plain = config(workload={"kind": "trace", "trace": str(TRACE)})
    notes, workload = notes_of(plain)
    np.testing.assert_allclose([r.arrival_time for r in workload.start()], recorded)
    assert notes == []


def test_a_trace_under_generated_arrivals_says_only_its_lengths_are_used():
    cfg = config(workload={"kind": "poisson", "rate": 5.0, "trace": str(TRACE),
                           "prompt_len": {"kind": "constant", "value": 77}})
    notes, workload = notes_of(cfg)
    trace = read_trace(str(TRACE))
    requests = workload.start()
    assert [r.num_prompt_tokens for r in requests] == list(trace.prompt_tokens[:50])  # its lengths...
    assert not np.allclose([r.arrival_time for r in requests], trace.arrival_time[:50])  # ...not its arrivals
    (note,) = notes
    assert "lengths only" in note and "workload.kind = poisson at 5 req/s" in note
    assert "workload.prompt_len not used" in note


def test_a_whole_prompt_policy_says_its_budget_is_max_model_len_as_the_scheduler_runs():
    for policy in ("static", "continuous", "chunked"):
        cfg = config(scheduler={"policy": policy, "max_num_batched_tokens": 512, "max_model_len": 4096})
        notes, _ = notes_of(cfg)
        scheduler = make_scheduler(cfg.scheduler, CacheConfig(block_size=16, num_gpu_blocks=1000))
        said = [n for n in notes if "step budget" in n]
        if scheduler.token_budget != cfg.scheduler.max_num_batched_tokens:
            assert said == [f"scheduler.policy = {policy} schedules whole prompts: its step budget is max_model_len"
                            f" = {scheduler.token_budget} tokens, not scheduler.max_num_batched_tokens = 512"]
        else:
            assert said == [], policy
    assert policy == "chunked" and said == []


def test_a_prefill_cap_a_policy_never_applies_says_so_as_the_scheduler_runs():
    """`long_prefill_token_threshold` caps a prompt's chunk; the note speaks exactly where the
    scheduler leaves a prompt longer than the cap whole."""
    for policy in ("static", "continuous", "chunked", "vllm"):
        cfg = config(scheduler={"policy": policy, "long_prefill_token_threshold": 16})
        notes, _ = notes_of(cfg)
        scheduler = make_scheduler(cfg.scheduler, CacheConfig(block_size=16, num_gpu_blocks=1000))
        scheduler.add_request(Request("r", 0.0, 100, 2), 0.0)
        plan = scheduler.schedule(0.0)
        said = [n for n in notes if "long_prefill_token_threshold" in n]
        if plan.num_scheduled_tokens["r"] == 100:  # left whole: the cap did nothing
            assert said == [f"scheduler.long_prefill_token_threshold = 16 is not used: scheduler.policy = "
                            f"{policy} prefills whole prompts (set policy = chunked to cap a prompt's chunk)"]
        else:
            assert plan.num_scheduled_tokens["r"] == 16 and said == [], policy


def test_a_prefix_cache_static_batching_never_uses_says_so_as_the_run_shows():
    """Shared-prefix requests with the prefix cache on: the note speaks where nothing is hit."""
    for policy in ("static", "continuous"):
        cfg = config(scheduler={"policy": policy}, cache={"enable_prefix_caching": True},
                     workload={"num_requests": 40, "rate": 5.0, "num_prefix_groups": 2, "prefix_len": 256,
                               "users_per_group": 4})
        notes, _ = notes_of(cfg)
        said = [n for n in notes if "cache.enable_prefix_caching" in n]
        hit = simulate(cfg).summary["prefix_cache_hit_rate"]
        assert (said != []) == (hit == 0), (policy, hit, said)
    assert policy == "continuous" and hit > 0


def test_clipped_lengths_are_counted_as_the_workload_clipped_them():
    cfg = config(workload={"kind": "trace", "trace": str(TRACE), "num_requests": 200},
                 scheduler={"max_model_len": 1024})
    _, workload = notes_of(cfg)
    trace = read_trace(str(TRACE))
    over = int(((trace.prompt_tokens[:200] + trace.output_tokens[:200]) > 1024).sum())
    requests = workload.start()
    assert over > 0 and all(r.num_prompt_tokens + r.max_tokens <= 1024 for r in requests)
    assert outcome_notes(workload) == [f"workload.too_long = clip: {over} requests had prompt + output over "
                                       "max_model_len = 1024 tokens and were shortened to fit"]


def test_notes_are_kept_in_the_resolved_config_and_do_not_change_it():
    cfg = with_notes(config(), ["one thing", "another", "one thing"])
    assert cfg.notes == ("one thing", "another")
    text = config_to_toml(cfg)
    assert "# note: one thing\n# note: another\n" in text
    again = load_config_text(text)
    assert again == cfg and again.notes == ()


def test_a_section_of_another_command_is_accepted_and_noted():
    cfg = load_config({"model": {"name": "Llama-2-7B"}, "serve": {"model_name": "x"}})
    assert cfg.notes == ("[serve] is read by `servesim serve` only; this command does not use it",)


def load_config_text(text: str):
    import tomllib

    return load_config(tomllib.loads(text))


def test_a_rate_the_workload_does_not_use_is_said():
    base = {"model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100"}}
    for workload, why in [({"kind": "closed_loop", "num_users": 2, "rate": 5.0}, "a closed loop's pace"),
                          ({"kind": "staged", "stages": [[2.0, 10]], "rate": 5.0}, "workload.stages give the rates"),
                          ({"rate": 5.0, "classes": [{"name": "a", "rate": 3.0}]}, "its own rate")]:
        notes = setting_notes(load_config({**base, "workload": workload}))
        assert any(n.startswith("workload.rate = 5 is not used: ") and why in n for n in notes), (workload, notes)
    for workload in ({"kind": "poisson", "rate": 5.0}, {"kind": "trace", "rate": 5.0,
                                                        "trace": str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "azure_conv_2023_slice.csv")}):
        assert not any("is not used" in n for n in setting_notes(load_config({**base, "workload": workload})))


def test_a_cv_the_arrivals_do_not_use_is_said():
    base = {"model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100"}}
    for kind in ("poisson", "constant", "closed_loop"):  # poisson's gaps keep cv 1 whatever it says
        notes = setting_notes(load_config({**base, "workload": {"kind": kind, "cv": 3.0}}))
        assert any(n.startswith("workload.cv = 3 is not used: ") and f"kind = {kind}" in n for n in notes), notes
    for workload in ({"kind": "gamma", "cv": 3.0}, {"kind": "staged", "stages": [[2.0, 10]], "cv": 3.0}, {}):
        assert not any("workload.cv" in n for n in setting_notes(load_config({**base, "workload": workload})))


def test_a_profile_measured_on_another_gpu_is_said():
    """hardware.gpu sizes the KV memory only when the step times come from a profile of another GPU."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "h100.json"
        profile.write_text(json.dumps({"meta": {"gpu": "H100", "device": "NVIDIA H100 80GB HBM3"}}))
        base = {"model": {"name": "Llama-3-8B"}, "hardware": {"latency": "profiled", "profile": str(profile)}}
        other = setting_notes(load_config({**base, "hardware": {**base["hardware"], "gpu": "A100-80G"}}))
        assert any(n.startswith("hardware.gpu = A100-80G, but hardware.profile h100.json was measured on H100-SXM: ")
                   for n in other), other
        same = setting_notes(load_config({**base, "hardware": {**base["hardware"], "gpu": "h100"}}))
        assert not any("was measured on" in n for n in same)
        profile.write_text(json.dumps({"meta": {"device": "cpu: AMD EPYC (1 threads)"}}))  # the engine's own
        assert not any("was measured on" in n for n in setting_notes(load_config({**base, "hardware": {
            **base["hardware"], "gpu": "A100-80G"}})))


def test_a_profile_the_roofline_leaves_unread_is_said():
    """`hardware.profile` without `hardware.latency = "profiled"` was ignored without a word: the run's
    figures were the datasheet roofline's, not the calibration's the user pointed it at."""
    base = {"model": {"name": "Llama-3-8B"}, "hardware": {"profile": "/somewhere/h100.json"}}
    notes = setting_notes(load_config(base))
    assert any(n.startswith("hardware.profile h100.json is not used: hardware.latency = roofline") for n in notes), notes
    assert not any("is not used: hardware.latency" in n for n in setting_notes(load_config({"model": base["model"]})))


def test_a_scheduler_beyond_the_profiles_measured_range_is_said(tmp_path):
    """A profile measured on small steps was extrapolated to whatever the scheduler allowed without a
    word (an imported attention table of prompts up to 16k tokens, a 128k max_model_len)."""
    from sim.latency.curves import Grid2D, PiecewiseLinear
    from sim.latency.profile import OP_INPUTS, OpProfile, Profile

    def one_input(name):
        return OpProfile(name, OP_INPUTS[name], PiecewiseLinear((1.0, 512.0), (1e-6, 1e-4)), [[1, 1e-6], [512, 1e-4]])

    ops = {name: one_input(name) for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")}
    ops["attn_prefill"] = OpProfile("attn_prefill", OP_INPUTS["attn_prefill"], Grid2D(
        (16.0, 512.0), (0.0, 1024.0), ((1e-6, 2e-6), (3e-5, 4e-5)), y_minus_x=True), [[16, 16, 1e-6], [512, 1536, 4e-5]])
    ops["attn_decode"] = OpProfile("attn_decode", OP_INPUTS["attn_decode"], Grid2D(
        (1.0, 64.0), (16.0, 2048.0), ((1e-6, 2e-6), (3e-6, 4e-5))), [[1, 16, 1e-6], [64, 2048, 4e-5]])
    dims = {"name": "toy", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
            "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100, "tensor_parallel_size": 1,
            "dtype": "float32"}
    path = Profile({"device": "test"}, dims, ops).save(tmp_path / "toy.json")

    def notes(**scheduler):
        return [n for n in setting_notes(load_config({"model": {"name": "Llama-3-8B"}, "scheduler": scheduler,
                                                      "hardware": {"latency": "profiled", "profile": str(path)}}))
                if n.startswith("hardware.profile toy.json was measured on ")]

    assert notes(max_num_batched_tokens=512, max_num_seqs=64, max_model_len=1536) == []
    wide = notes(max_num_batched_tokens=512, max_num_seqs=128, max_model_len=4096)
    assert len(wide) == 1 and ("decode batches of up to 64 sequences (scheduler.max_num_seqs = 128), contexts of up "
                               "to 1,536 tokens (scheduler.max_model_len = 4096): larger ones are extrapolated" in
                               wide[0]), wide
    whole = notes(policy="continuous", max_num_batched_tokens=512, max_num_seqs=64, max_model_len=1024)
    assert len(whole) == 1 and ("steps of up to 512 tokens (scheduler.max_model_len = 1024), prefill chunks of up to "
                                "512 tokens (scheduler.max_model_len = 1024):" in whole[0]), whole


def test_a_max_model_len_past_the_models_context_is_said():
    base = {"model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100"}}
    long = setting_notes(load_config({**base, "scheduler": {"max_model_len": 200_000}}))
    assert any(n.startswith("scheduler.max_model_len = 200000 exceeds Llama-3-8B's context of 8192 tokens") for n in long)
    assert not any("exceeds" in n for n in setting_notes(load_config({**base, "scheduler": {"max_model_len": 8192}})))


def test_a_priority_queue_with_one_priority_level_says_it_runs_first_come_first_served(tmp_path):
    """Every request at one priority: the run is fcfs's to the request, and the note says so."""
    pressured = {"num_gpu_blocks": 300}  # preemptions too: the victims are fcfs's as well
    plain = config(scheduler={"queue": "priority"}, hardware=pressured, workload={"num_requests": 120, "rate": 30.0})
    notes, _ = notes_of(plain)
    (line,) = [n for n in notes if n.startswith("scheduler.queue = priority")]
    assert "every request has priority 0" in line
    fcfs = simulate(config(scheduler={"queue": "fcfs"}, hardware=pressured,
                           workload={"num_requests": 120, "rate": 30.0})).requests
    same = simulate(plain).requests
    assert fcfs["num_preemptions"].sum() > 0
    assert same[["req_id", "first_token_time", "finish_time"]].equals(fcfs[["req_id", "first_token_time", "finish_time"]])
    # classes of one priority: the same; of two, or a trace's priority column: nothing to say
    one = [{"name": "a", "priority": 2, "fraction": 0.5}, {"name": "b", "priority": 2, "fraction": 0.5}]
    assert any("every request has priority 2" in n for n in
               notes_of(config(scheduler={"queue": "priority"}, workload={"classes": one}))[0])
    two = [dict(one[0], priority=0), one[1]]
    assert not any(n.startswith("scheduler.queue") for n in
                   notes_of(config(scheduler={"queue": "priority"}, workload={"classes": two}))[0])
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,prompt_tokens,output_tokens,priority\n0,10,5,0\n0.1,10,5,1\n")
    assert not any(n.startswith("scheduler.queue") for n in notes_of(
        config(scheduler={"queue": "priority"}, workload={"kind": "trace", "trace": str(trace)}))[0])
    assert not any(n.startswith("scheduler.queue") for n in notes_of(config())[0])  # fcfs: nothing to say

"""Real-time replay of `sim` workloads on the CPU engine, and `servesim run`'s outputs."""
import json

import pytest

from engine_factories import REPO, TINY_CONFIG
from lockstep import different_counters, first_difference, lockstep
from calibrate.engine_config import build_engine
from gpu_backend.engine import Engine
from servesim.cli import main
from sim.config import load_config
from sim.workload import build_workload


def replay_config(num_requests: int, rate: float, **workload) -> dict:
    return {
        "model": {"name": str(TINY_CONFIG), "dtype": "float32"},
        "hardware": {"num_gpu_blocks": 512},
        "scheduler": {"policy": "chunked", "max_num_batched_tokens": 256, "max_num_seqs": 32, "max_model_len": 512},
        "workload": {"kind": "poisson", "rate": rate, "num_requests": num_requests, "seed": 3,
                     "prompt_len": {"kind": "uniform", "low": 4, "high": 48},
                     "output_len": {"kind": "uniform", "low": 2, "high": 12}} | workload,
    }


def replay(num_requests: int, rate: float, **workload):
    from sim.runner import simulate

    config = load_config(replay_config(num_requests, rate, **workload))
    engine = build_engine(config, "cpu")
    result = engine.run_workload(build_workload(config.workload, config.scheduler.max_model_len), progress=False)
    return engine, result, simulate(config)


def check_replay(engine, result, sim_result, num_requests):
    reqs = result.requests
    assert len(reqs) == num_requests and set(reqs["finish_reason"]) == {"length"}
    assert set(result.summary) == set(sim_result.summary)
    assert list(result.requests.columns) == list(sim_result.requests.columns)
    assert list(result.steps.columns) == list(sim_result.steps.columns)
    # real time: nobody is served before it arrives, tokens come after the first schedule
    assert (reqs["first_scheduled_time"] >= reqs["arrival_time"]).all()
    assert (reqs["first_token_time"] > reqs["first_scheduled_time"]).all()
    assert (reqs["num_output_tokens"] == reqs["max_tokens"]).all()
    steps = result.steps
    assert (steps["start"].diff().dropna() > 0).all() and (steps["duration"] > 0).all()
    # every computed token is accounted: prompts once (no preemption here) plus one per decode step
    assert steps["num_prefill_tokens"].sum() + steps["num_decode_tokens"].sum() == (
        reqs["num_prompt_tokens"].sum() + reqs["num_output_tokens"].sum() - len(reqs))
    bm = engine.scheduler.block_manager
    assert bm.num_free_gpu_blocks == bm.num_gpu_blocks


def test_small_replay_matches_the_simulator_format():
    engine, result, sim_result = replay(30, rate=40.0)
    check_replay(engine, result, sim_result, 30)


@pytest.mark.slow
def test_200_requests_in_real_time():
    engine, result, sim_result = replay(200, rate=20.0)
    check_replay(engine, result, sim_result, 200)
    # arrivals were honoured in wall-clock time: the run lasts at least as long as the arrivals span
    assert result.summary["duration_s"] >= result.requests["arrival_time"].max() - result.requests["arrival_time"].min()


def test_closed_loop_followups_are_served():
    engine, result, sim_result = replay(12, rate=1.0, kind="closed_loop", num_users=3)
    assert len(result.requests) == len(sim_result.requests) == 12
    assert set(result.requests["finish_reason"]) == {"length"}


def test_a_clients_bound_on_requests_in_flight_holds_on_the_engine():
    engine, result, sim_result = replay(10, rate=200.0, max_concurrency=2)
    check_replay(engine, result, sim_result, 10)
    for table in (result.requests, sim_result.requests):  # never more than 2 between send and end
        events = sorted([(t, 1) for t in table["arrival_time"]] + [(t, -1) for t in table["finish_time"]],
                        key=lambda e: (e[0], e[1]))
        in_flight, peak = 0, 0
        for _, d in events:
            in_flight += d
            peak = max(peak, in_flight)
        assert peak == 2


def test_cli_run_writes_the_simulators_outputs(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(f'''
[model]
name = "{TINY_CONFIG}"
[hardware]
num_gpu_blocks = 256
[scheduler]
max_model_len = 256
[workload]
kind = "poisson"
rate = 50.0
num_requests = 8
prompt_len = {{ kind = "constant", value = 20 }}
output_len = {{ kind = "constant", value = 4 }}
''')
    assert main(["run", str(config), "--device", "cpu", "--quiet", "--out", str(tmp_path / "engine"),
                 "--set", "scheduler.policy=continuous"]) == 0
    assert main(["simulate", str(config), "--quiet", "--out", str(tmp_path / "sim")]) == 0
    ours = json.loads((tmp_path / "engine" / "summary.json").read_text())
    theirs = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert set(ours) == set(theirs) and ours["num_finished"] == 8
    for name in ("requests.csv", "steps.csv", "config.toml"):
        assert (tmp_path / "engine" / name).is_file()
    assert 'policy = "continuous"' in (tmp_path / "engine" / "config.toml").read_text()
    # printed: a measured duration, and the files the run wrote, each of them
    capsys.readouterr()
    assert main(["run", str(config), "--device", "cpu", "--no-progress", "--out", str(tmp_path / "again")]) == 0
    printed = capsys.readouterr().out
    assert " s measured, " in printed and " s simulated" not in printed
    listed = printed.rsplit("wrote ", 1)[1].split(": ", 1)[1].strip().split(", ")
    assert sorted(listed) == sorted(p.name for p in (tmp_path / "again").iterdir() if p.is_file())


def test_cli_refuses_a_catalog_model(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[model]\nname = "Llama-3-8B"\n')
    assert main(["run", str(config), "--quiet"]) == 2
    assert "model.name" in capsys.readouterr().err


def test_engine_config_from_sim_sizes_the_kv_pools():
    import torch

    from calibrate.engine_config import engine_config_from_sim
    from gpu_backend.model_config import ModelConfig

    config = load_config(replay_config(1, 1.0) | {"hardware": {"swap_space_gb": 0.01}})
    engine_config, toml = engine_config_from_sim(config, "cpu")
    block_bytes = ModelConfig.from_json(TINY_CONFIG).kv_bytes_per_token(4) * config.cache.block_size
    assert engine_config.cache.num_cpu_blocks == int(0.01 * 2**30) // block_bytes
    assert engine_config.cache.num_gpu_blocks * block_bytes <= 256 * 2**20 < (engine_config.cache.num_gpu_blocks + 1) * block_bytes
    assert engine_config.model.num_key_value_heads == 2 and "[scheduler]" in toml
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("override, field", [("cluster.num_replicas=2", "cluster.num_replicas"),
                                             ("disaggregation.enabled=true", "disaggregation.enabled")])
def test_a_multi_replica_config_is_refused_rather_than_run_as_one(override, field, capsys):
    config = REPO / "examples" / "engine.toml"
    assert main(["run", str(config), "--set", override, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"servesim run: error: {field}: the engine serves one replica")


def test_cli_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\nname = "{TINY_CONFIG}"\n[hardware]\nnum_gpu_blocks = 64\n')
    assert main(["run", str(config), "--device", "cuda", "--quiet"]) == 2
    assert "--device" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["engine.toml", "engine-swap.toml"])
def test_example_configs_run_on_the_engine(name, tmp_path):
    example = TINY_CONFIG.parent.parent / name
    assert main(["run", str(example), "--quiet", "--out", str(tmp_path), "--set", "workload.num_requests=6",
                 "--set", "workload.rate=100"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_finished"] == 6


def test_safetensors_beside_the_config_json_are_loaded(tmp_path, tiny_model):
    import shutil

    from engine_factories import make_prompt, make_request
    from gpu_backend.model import build_model

    other = build_model(tiny_model.config, seed=1)
    shutil.copy(TINY_CONFIG, tmp_path / "config.json")
    other.save_safetensors(tmp_path / "model.safetensors")

    def greedy(config, model=None):
        engine = build_engine(config, "cpu", model=model)
        r = make_request(0, make_prompt(12, seed=5), 6)
        engine.add_request(r)
        engine.run_until_done()
        return engine, r.output_token_ids

    loaded, tokens = greedy(load_config(replay_config(1, 1.0) | {"model": {"name": str(tmp_path / "config.json")}}))
    assert loaded.config.weights == str(tmp_path)
    seeded, seeded_tokens = greedy(load_config(replay_config(1, 1.0)))  # no checkpoint: random weights, seed 0
    assert seeded.config.weights is None
    assert tokens == greedy(load_config(replay_config(1, 1.0)), model=other)[1]
    assert seeded_tokens == greedy(load_config(replay_config(1, 1.0)), model=tiny_model)[1]
    assert tokens != seeded_tokens


class _TwoArrivals:
    """A workload of two requests: one at 0 s, one while the first step still runs."""

    def __init__(self, second_arrival: float) -> None:
        self.second_arrival = second_arrival

    def start(self):
        from policies import Request

        return [Request(0, 0.0, 8, 4), Request(1, self.second_arrival, 8, 4)]

    def on_finish(self, request, now):
        return []


def test_max_time_keeps_requests_that_arrived_during_the_last_step(tiny_model):
    import time as _time

    from gpu_backend.engine import EngineConfig
    from policies import CacheConfig, SchedulerConfig

    config = EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=512),
                          cache=CacheConfig(num_gpu_blocks=64))
    engine = Engine(config, "cpu", model=tiny_model)
    execute = engine.runner.execute
    engine.runner.execute = lambda plan: (_time.sleep(0.3), execute(plan))[1]  # a slow first step
    result = engine.run_workload(_TwoArrivals(0.05), progress=False, max_time_s=0.2)
    reqs = result.requests.set_index("req_id")
    assert sorted(reqs.index) == [0, 1]  # request 1 arrived (0.05 s) before the run ended (0.2 s)
    assert (reqs["finish_reason"] == "aborted").all()
    assert (reqs["reject_reason"] == "the run ended (max_time_s)").all()


def lockstep_config(**sections) -> dict:
    """A tiny chunked run that stresses decisions: a 64-token budget, 4 seats, 16 Poisson requests
    of 8-80 prompt and 2-24 output tokens; `sections` add to or replace its keys."""
    config = {
        "model": {"name": str(TINY_CONFIG), "dtype": "float32"},
        "hardware": {"num_gpu_blocks": 64},
        "scheduler": {"policy": "chunked", "max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 512},
        "workload": {"kind": "poisson", "rate": 50.0, "num_requests": 16, "seed": 3,
                     "prompt_len": {"kind": "uniform", "low": 8, "high": 80},
                     "output_len": {"kind": "uniform", "low": 2, "high": 24}},
    }
    for name, keys in sections.items():
        config[name] = {**config.get(name, {}), **keys}
    return config


# acceptance_rate: the simulator's draws, which lockstep replaces by the engine's verifies
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2,
               "acceptance_rate": 0.5}
LONGER_OUTPUTS = {"output_len": {"kind": "uniform", "low": 16, "high": 48}}  # room for drafts to be proposed
CLASSES = [{"name": "hi", "priority": 0, "fraction": 0.5}, {"name": "lo", "priority": 1, "fraction": 0.5}]
LOCKSTEP = {  # name: (sections, what the run must have done, so that the case tests what it names)
    # vLLM's defaults: prefix caching on, recompute; a resumed request hits its own cached blocks
    "vllm-recompute": ({"hardware": {"num_gpu_blocks": 14}, "scheduler": {"policy": "vllm"}},
                       ("num_recomputes", "prefix_hits")),
    "swap": ({"hardware": {"num_gpu_blocks": 12, "swap_space_gb": 0.01}, "scheduler": {"preemption": "swap"},
              "cache": {"enable_prefix_caching": True}}, ("num_swaps",)),
    "priority": ({"hardware": {"num_gpu_blocks": 12}, "scheduler": {"queue": "priority"},
                  "workload": {"classes": CLASSES}}, ("num_preemptions",)),
    "shared-prefixes": ({"hardware": {"num_gpu_blocks": 24}, "cache": {"enable_prefix_caching": True},
                         "workload": {"num_prefix_groups": 2, "prefix_len": 40, "users_per_group": 3}},
                        ("prefix_hits",)),
    "static": ({"hardware": {"num_gpu_blocks": 12}, "scheduler": {"policy": "static"}}, ("padding_fraction",)),
    "continuous": ({"hardware": {"num_gpu_blocks": 14}, "scheduler": {"policy": "continuous"}},
                   ("num_preemptions",)),
    "hybrid": ({"hardware": {"num_gpu_blocks": 12, "swap_space_gb": 0.01},
                "scheduler": {"preemption": "hybrid", "hybrid_swap_threshold": 2}}, ("num_swaps", "num_recomputes")),
    "priority-swap": ({"hardware": {"num_gpu_blocks": 12, "swap_space_gb": 0.01},
                       "scheduler": {"queue": "priority", "preemption": "swap"}, "workload": {"classes": CLASSES}},
                      ("num_swaps",)),
    # one request's prefill chunk clamped below the budget
    "long-prefill-threshold": ({"hardware": {"num_gpu_blocks": 24}, "scheduler": {"long_prefill_token_threshold": 16}},
                               ("clamped",)),
    # the prefix cache full: cached blocks evicted, in the same order on both sides
    "prefix-eviction": ({"hardware": {"num_gpu_blocks": 14}, "cache": {"enable_prefix_caching": True},
                         "workload": {"num_prefix_groups": 3, "prefix_len": 40, "users_per_group": 3}},
                        ("prefix_hits", "evictions")),
    "continuous-paddings": ({"hardware": {"num_gpu_blocks": 24},
                             "scheduler": {"policy": "continuous", "max_paddings": 64, "max_num_batched_tokens": 256},
                             "workload": {"rate": 400.0}},  # prompts arrive together, batched padded
                            ("padding_fraction",)),
    # n-gram drafts on the engine's real tokens, verified by its model: the simulator replays both
    "speculative": ({"speculative": SPECULATIVE, "workload": LONGER_OUTPUTS}, ("accepted_drafts",)),
    "speculative-preemption": ({"speculative": SPECULATIVE, "workload": LONGER_OUTPUTS, "hardware": {"num_gpu_blocks": 14},
                                "scheduler": {"policy": "vllm"}}, ("accepted_drafts", "num_recomputes")),
    # prompts longer than max_model_len kept: rejected when they arrive, the user's next one sent from then
    "closed-loop-rejects": ({"scheduler": {"max_model_len": 64},
                             "workload": {"too_long": "keep", "kind": "closed_loop", "num_users": 3, "think_time": 0.01,
                                          "rate": None}}, ("num_rejected",)),
    # ... and at think time 0: a rejected request's follow-up is sent after the requests sent with it
    "closed-loop-ties": ({"scheduler": {"max_model_len": 64},
                          "workload": {"too_long": "keep", "kind": "closed_loop", "num_users": 3, "think_time": 0.0,
                                       "rate": None}}, ("num_rejected",)),
    # the KV offload tier, its copies timed by the engine's measured ones (`ReplayedCopies`), not by
    # the config's link (slow here: modelled, a load would land steps later than the engine's did)
    # (shared prefixes evicted from the GPU's prefix cache and loaded back: loads in every run; a
    # recomputed request's own blocks were loaded back only where the timing made it so)
    "offload": ({"hardware": {"num_gpu_blocks": 14}, "scheduler": {"policy": "vllm"},
                 "cache": {"offload_size_gb": 0.01, "offload_bandwidth_gbps": 0.001},
                 "workload": {"num_prefix_groups": 3, "prefix_len": 48, "users_per_group": 3}},
                ("offload", "offload_loads")),
    # ... synchronous (lmcache: whole 256-token chunks, copied inside the step that fills them)
    "offload-lmcache": ({"hardware": {"num_gpu_blocks": 48}, "scheduler": {"policy": "vllm", "max_num_batched_tokens": 128},
                         "cache": {"offload_size_gb": 0.02, "offload_backend": "lmcache"},
                         "workload": {"num_requests": 10, "prompt_len": {"kind": "uniform", "low": 260, "high": 400}}},
                        ("offload",)),
    # a benchmark's time limit: the step in flight there delivers nothing (the client has stopped)
    "time-limit": ({"sim": {"max_sim_time_s": 0.05}, "workload": {"rate": 400.0}}, ("cut_step", "num_aborted")),
}


# cases that add a setting to what a faster case covers (1.5-3.5 s each on the tiny CPU model): slow
SLOW_LOCKSTEP = ("hybrid", "priority-swap", "long-prefill-threshold", "continuous-paddings", "speculative-preemption")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_LOCKSTEP else c
                                  for c in LOCKSTEP])
def test_the_engine_and_the_simulator_decide_alike_step_by_step(case, monkeypatch, tiny_model):
    """The same workload, the engine on a virtual clock moved by its measured forward passes, the
    simulator on those step times (`lockstep`): every plan (who runs how many tokens, preemptions and
    their victims, swaps, offload copies, blocks used, prefix hits) and every finish is the same, and
    so are the counters both report. The simulator's requests (no token ids) used to be left out of
    the prefix cache: a request recomputed after a preemption redid its whole prompt there and hit its
    own blocks on the engine (the first plan that differed in "vllm-recompute"); the engine
    rejected a request at the step boundary after its arrival, so a closed-loop user's next request
    came that much later ("closed-loop-rejects"); the simulator sent a follow-up due at once (think
    time 0) of a request rejected on arrival before the requests sent at that same instant, where a
    client's (and the engine's replay) go first ("closed-loop-ties"); and at a time limit the engine took in the tokens
    of the step in flight there, which came after the client had stopped, and ended the rest at that
    step's end, not at the limit ("time-limit": one step more, later finish times). The offload
    tier's copies are the engine's measured ones on both sides: with the config's modelled link the
    simulator's native loads landed later ("offload") and its lmcache steps took longer
    ("offload-lmcache") than the engine's, whose copies run inside its steps."""
    sections, exercised = LOCKSTEP[case]
    engine_result, sim_result, ours, theirs = lockstep(load_config(lockstep_config(**sections)), monkeypatch,
                                                       model=tiny_model)
    assert first_difference(ours, theirs) is None
    assert different_counters(engine_result, sim_result) == []
    plans = [e for e in ours if e[0] == "plan"]
    done = {"prefix_hits": engine_result.requests["num_cached_tokens"].sum() > 0
            or any(e[0] == "plan" and e[11] > 0 for e in ours),
            "offload": bool(engine_result.summary.get("offload")),
            "offload_loads": bool((engine_result.summary.get("offload") or {}).get("num_load_blocks")),
            "cut_step": ours[-1][0] == "plan",  # the last plan's step was still running at the limit
            "accepted_drafts": engine_result.requests["num_accepted_tokens"].sum() > 0,
            "clamped": max(n for e in plans for _, n, computed, *_ in e[2] if computed == 0) == 16,
            "evictions": any((b[-1] or 0) < (a[-1] or 0) for a, b in zip(plans, plans[1:]))}  # fewer findable
    for what in exercised:
        assert done[what] if what in done else engine_result.summary[what] > 0, what


def test_a_time_limit_inside_a_preempting_step_keeps_its_row_on_both_sides(monkeypatch, tiny_model):
    """A time limit that falls inside a step whose plan preempted: the requests count that preemption
    (the plan was made), so both sides keep the step's row, cut at the limit, and nothing of its
    outputs. Steps of a fixed 10 ms on the engine's clock place the limit inside a chosen step."""
    sections = {"hardware": {"num_gpu_blocks": 12}, "scheduler": {"queue": "priority"}, "workload": {"classes": CLASSES}}
    *_, ours, _ = lockstep(load_config(lockstep_config(**sections)), monkeypatch, model=tiny_model, step_s=0.01)
    start = next(e[1] for e in ours if e[0] == "plan" and e[3])  # the first plan that preempted
    limited = load_config(lockstep_config(**sections, sim={"max_sim_time_s": start + 0.005}))
    engine_result, sim_result, ours, theirs = lockstep(limited, monkeypatch, model=tiny_model, step_s=0.01)
    assert ours[-1][0] == "plan" and ours[-1][3]  # the step in flight at the limit had preempted
    assert first_difference(ours, theirs) is None
    assert different_counters(engine_result, sim_result) == []
    last = engine_result.steps.iloc[-1]
    assert last["num_preempted"] > 0 and abs(last["start"] + last["duration"] - (start + 0.005)) < 1e-9
    assert (engine_result.requests["finish_time"] <= start + 0.005 + 1e-9).all()


def test_multi_turn_chat_sessions_decide_alike(tmp_path, monkeypatch, tiny_model):
    """inference-perf's multi-turn chat: each session's next turn is sent when its last ends (think
    time 0) on that turn's prompt and answer, so ties and prefix hits on earlier turns are compared.
    The engine's replay used to die at the first finish: the workload read the next turn's context
    back from the request's ids, which the engine had folded into a plain list."""
    from fidelity.sources.inference_perf import WORKLOAD_KIND  # importing it registers the kind

    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 2, "num_users_per_system_prompt": 2, "system_prompt_len": 32,
        "question_len": 24, "output_len": 6, "enable_multi_turn_chat": True}},
        "load": {"type": "constant", "stages": [{"rate": 20, "duration": 0.5}]}}))
    workload = {"kind": WORKLOAD_KIND.name, "profile": str(profile), "rate": None, "num_requests": None,
                "prompt_len": None, "output_len": None}
    config = load_config(lockstep_config(workload=workload, cache={"enable_prefix_caching": True},
                                         hardware={"num_gpu_blocks": 40}))
    engine_result, sim_result, ours, theirs = lockstep(config, monkeypatch, model=tiny_model)
    assert first_difference(ours, theirs) is None
    assert different_counters(engine_result, sim_result) == []
    reqs = engine_result.requests
    assert len(reqs) == 10 and (reqs["num_cached_tokens"] > 0).any()  # later turns hit earlier ones

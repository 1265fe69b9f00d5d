"""`calibrate.random_workloads`: the seeded validation workloads cover what they promise, and run."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from calibrate.random_workloads import ARRIVALS, POLICIES, draw, write
from sim.config import load_config
from sim.runner import simulate
from sim.workload import build_workload

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "examples/profiles/tiny-llama-cpu.json"


def configs(seed: int, count: int, tmp_path: Path):
    return [(p, load_config(p)) for p in write(seed, count, tmp_path / f"w{seed}")]


def gaps_cv(config) -> float:
    t = np.sort([r.arrival_time for r in build_workload(config.workload, config.scheduler.max_model_len).start()])
    g = np.diff(t)
    return float(g.std() / g.mean())


def test_a_seed_and_index_give_one_workload_and_other_seeds_others():
    assert draw(7, 3) == draw(7, 3)
    assert draw(7, 3) != draw(8, 3)
    assert len({str(draw(s, 0)["workload"]) for s in range(20)}) == 20


def test_six_consecutive_workloads_cover_every_policy_arrival_process_and_preemption_mode():
    parts = [draw(1, i)["name"].split("-") for i in range(9)]  # random-SEED-INDEX-POLICY[-SIZE]-ARRIVAL-MEMORY
    pairs = {("-".join(p[3:-2]), p[-2]) for p in parts}
    assert len(pairs) == 9, pairs
    for start in (0, 3, 9):
        ws = [draw(1, i) for i in range(start, start + 6)]
        names = [w["name"].split("-") for w in ws]
        kinds = Counter((w["scheduler"]["policy"], w["scheduler"]["max_num_batched_tokens"] < 128) for w in ws)
        assert kinds[("chunked", True)] == kinds[("chunked", False)] == kinds[("continuous", False)] == 2
        assert all(sum(a in n for n in names) == 2 for a in ("poisson", "gamma", "on_off"))
        assert {w["scheduler"]["preemption"] for w in ws} == {"recompute", "swap"}
        assert sum(w["hardware"]["num_gpu_blocks"] < 100 for w in ws) >= 2  # small pools
    assert len(POLICIES) == len(ARRIVALS) == 3


def test_written_files_load_and_say_how_to_run_them(tmp_path):
    for path, config in configs(3, 6, tmp_path):
        assert path.read_text().startswith(f"# servesim validate {path.name}")
        w = draw(3, int(path.stem.split("-")[2]))
        assert config.scheduler.policy == w["scheduler"]["policy"]
        assert config.hardware.num_gpu_blocks == w["hardware"]["num_gpu_blocks"]
        assert config.workload.kind == w["workload"]["kind"]
        assert Path(config.model.name).is_file() and Path(config.hardware.profile).is_file()


def test_bursty_arrivals_are_burstier_than_poisson(tmp_path):
    cv = {"poisson": [], "gamma": [], "staged": []}
    for _, config in configs(11, 9, tmp_path):
        cv[config.workload.kind].append(gaps_cv(config))
    assert all(0.6 < c < 1.5 for c in cv["poisson"]), cv
    assert all(c > 1.4 for c in cv["gamma"] + cv["staged"]), cv


def test_prompts_are_heavy_tailed(tmp_path):
    for _, config in configs(5, 6, tmp_path):
        n = np.array([r.num_prompt_tokens for r in build_workload(config.workload, config.scheduler.max_model_len).start()])
        assert n.max() >= 4 * np.median(n), (config.workload, np.percentile(n, [50, 90, 100]))
        assert n.max() <= config.scheduler.max_model_len


def test_every_workload_simulates_to_the_end_and_the_small_pools_preempt(tmp_path):
    preempted = Counter()
    for _, config in configs(2, 12, tmp_path):
        result = simulate(config)
        s = result.summary
        assert s["num_requests"] == config.workload.num_requests == len(result.requests)
        assert s["num_finished"] + s["num_rejected"] == s["num_requests"] and s["num_rejected"] == 0
        if config.hardware.num_gpu_blocks < 100:
            preempted[config.scheduler.preemption] += s["num_swaps"] if config.scheduler.preemption == "swap" \
                else s["num_recomputes"]
        else:
            assert s["num_preemptions"] == 0
    assert preempted["recompute"] > 0 and preempted["swap"] > 0, preempted


@pytest.mark.parametrize("index", range(3))
def test_the_engine_is_busy_but_not_swamped(index, tmp_path):
    """The rates aim at a busy engine whose queue drains (a backlog that only grows measures the
    backlog): with the shipped CPU profile the simulated run ends within a few times the arrivals."""
    (path, config), = [c for c in configs(4, index + 1, tmp_path)][index:]
    result = simulate(config)
    arrivals = build_workload(config.workload, config.scheduler.max_model_len).start()
    last = max(r.arrival_time for r in arrivals)
    assert result.summary["duration_s"] < 3.0 * last + 2.0
    busy = result.steps.duration.sum() / result.summary["duration_s"]
    assert busy > 0.2, busy


def test_the_small_model_gets_the_same_workloads_at_its_own_rates(tmp_path):
    """small-llama (weights beyond a shared last-level cache) costs ~5-7x the tiny model: the same
    draws, its rates that much lower, its files loadable without a shipped profile."""
    for i in range(6):
        tiny, small = draw(9, i), draw(9, i, "small-llama")
        assert small["offered_load"] == tiny["offered_load"] and small["scheduler"] == tiny["scheduler"]
        assert small["model"]["name"].endswith("small-llama/config.json")
        t, s = tiny["workload"], small["workload"]
        assert {k: v for k, v in t.items() if k not in ("rate", "stages")} == \
            {k: v for k, v in s.items() if k not in ("rate", "stages")}
        ratio = (s.get("rate") or s["stages"][0][0]) / (t.get("rate") or t["stages"][0][0])
        assert 1 / 6.8 - 0.01 <= ratio <= 1 / 5.3 + 0.01, ratio
    for path in write(9, 3, tmp_path / "small", model="small-llama"):
        config = load_config(path)
        assert config.hardware.latency == "roofline" and Path(config.model.name).is_file()
        assert simulate(config).summary["num_finished"] == config.workload.num_requests
    with pytest.raises(ValueError, match="^model: 'huge-llama' is not allowed; choose one of tiny-llama, small-llama"):
        draw(9, 0, "huge-llama")


def test_the_default_model_is_the_smallest_whose_weights_exceed_the_cache():
    from calibrate.cpu_cache import CpuCache
    from calibrate.random_workloads import VALIDATION_MODELS, default_model, weights_bytes

    tiny, small = weights_bytes("tiny-llama"), weights_bytes("small-llama")
    assert 10e6 < tiny < 20e6 and 100e6 < small < 130e6  # ~3.8M and ~31M float32 parameters
    assert set(VALIDATION_MODELS) == {"tiny-llama", "small-llama"}
    # this VM's shared 32 MiB L3 holds the tiny model's weights: the small one streams them
    name, why = default_model(CpuCache(3, 32 * 2 ** 20, "0-1"))
    assert name == "small-llama" and "32 MiB L3" in why
    # a cache smaller than the tiny model's weights: the tiny one already reads them from memory
    assert default_model(CpuCache(3, 8 * 2 ** 20, "0-3"))[0] == "tiny-llama"
    # a cache that holds both, and a machine that describes none: the cheapest, said as such
    name, why = default_model(CpuCache(3, 256 * 2 ** 20, "0-63"))
    assert name == "tiny-llama" and "every validation model" in why
    assert default_model(None) == ("tiny-llama", "no last-level cache described here")

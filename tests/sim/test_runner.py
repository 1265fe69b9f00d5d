"""simulate(): determinism, closed loops, the time limit, saving, and the progress bar."""
from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from sim.config import load_config
from sim.runner import simulate
from sim_helpers import ConstantLatency

SMALL = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM"},
         "workload": {"kind": "poisson", "rate": 20.0, "num_requests": 150, "seed": 11,
                      "prompt_len": {"kind": "lognormal", "median": 400, "sigma": 0.8, "max": 3000},
                      "output_len": {"kind": "lognormal", "median": 80, "sigma": 0.8, "max": 800}}}


def test_results_are_deterministic_for_a_seed():
    a = simulate(load_config(SMALL))
    b = simulate(load_config(SMALL))
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)
    c = simulate(load_config(SMALL, ["workload.seed=12"]))
    assert not a.requests["arrival_time"].equals(c.requests["arrival_time"])


def test_every_request_appears_once_with_consistent_times():
    r = simulate(load_config(SMALL, ["scheduler.max_model_len=1024", "workload.too_long=keep"]))
    t = r.requests
    assert len(t) == 150 and t["req_id"].is_unique
    assert r.summary["num_finished"] + r.summary["num_rejected"] == 150
    assert r.summary["num_rejected"] > 0  # prompts over 1,024 tokens cannot be served
    done = t[t["finish_reason"] == "length"]
    assert (done["arrival_time"] <= done["first_scheduled_time"]).all()
    assert (done["first_scheduled_time"] < done["first_token_time"]).all()
    assert (done["first_token_time"] <= done["finish_time"]).all()
    # the run's tokens add up: every completed output token was sampled in some step
    steps = r.steps
    sampled = steps["num_decode_tokens"].sum() + (steps["num_prefill_tokens"] > 0).sum()
    assert sampled >= done["num_output_tokens"].sum() - len(done)


def test_closed_loop_keeps_at_most_num_users_in_flight():
    cfg = load_config({"workload": {"kind": "closed_loop", "num_users": 8, "num_requests": 120, "think_time": 0.2,
                                    "seed": 1}})
    r = simulate(cfg, latency_model=ConstantLatency(0.01, per_token=1e-5))
    t = r.requests
    assert len(t) == 120 and (t["finish_reason"] == "length").all()
    events = sorted([(a, 1) for a in t["arrival_time"]] + [(f, -1) for f in t["finish_time"]],
                    key=lambda e: (e[0], e[1]))  # at equal times a finish frees the user first
    in_flight = np.cumsum([d for _, d in events])
    assert in_flight.max() == 8
    # a user's next request comes think_time after its previous one ended: never earlier
    first_arrivals = np.sort(t["arrival_time"].to_numpy())[:8]
    assert (first_arrivals == 0).all()
    finishes = np.sort(t["finish_time"].to_numpy())
    later = np.sort(t["arrival_time"].to_numpy())[8:]
    assert (later >= finishes[:len(later)] + 0.2 - 1e-9).all()


def test_a_closed_loop_whose_every_request_is_rejected_ends_with_each_counted():
    """A rejected request ends inside its own submit, and its user's next one (no think time) is due
    at once: thousands of them in a row are submitted one after another, not each a stack frame
    deeper (a RecursionError near 200 before), and each is in the results as rejected."""
    n = 3 * sys.getrecursionlimit()
    cfg = load_config({"scheduler": {"max_model_len": 64},
                       "workload": {"kind": "closed_loop", "num_users": 1, "think_time": 0.0, "num_requests": n,
                                    "prompt_len": {"kind": "constant", "value": 100},
                                    "output_len": {"kind": "constant", "value": 8}, "too_long": "keep"}})
    r = simulate(cfg, latency_model=ConstantLatency(0.01))
    assert len(r.requests) == n and r.summary["num_rejected"] == n and r.requests["req_id"].is_unique
    # a user whose requests are served still waits for each to end before the next
    served = simulate(load_config({"workload": {"kind": "closed_loop", "num_users": 1, "think_time": 0.0,
                                                "num_requests": 20, "prompt_len": {"kind": "constant", "value": 10},
                                                "output_len": {"kind": "constant", "value": 4}}}),
                      latency_model=ConstantLatency(0.01))
    t = served.requests.sort_values("arrival_time")
    assert (t["arrival_time"].to_numpy()[1:] >= t["finish_time"].to_numpy()[:-1] - 1e-12).all()


class CountingBar:
    """A bar made by a `progress` callable: what the run told it."""

    def __init__(self, total):
        self.total, self.n, self.closed = total, 0, False

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True


@pytest.mark.parametrize("replicas", [1, 3])
def test_a_progress_callable_makes_the_bar_and_hears_of_every_request(monkeypatch, replicas):
    """`progress` may make its own bar (the app's shows in its page): it is given the request count
    and told of each request that ends, on one replica and on several."""
    monkeypatch.setattr("sim.build.PROGRESS_MIN_REQUESTS", 1)
    bars = []
    cfg = load_config(SMALL, [f"cluster.num_replicas={replicas}"])
    result = simulate(cfg, progress=lambda total: bars.append(CountingBar(total)) or bars[-1],
                      latency_model=ConstantLatency(0.01, per_token=1e-5))
    (bar,) = bars
    assert bar.total == bar.n == len(result.requests) == 150 and bar.closed


@pytest.mark.parametrize("seed, limit, replicas", [(0, 0.6, 1), (4, 0.9, 1), (4, 0.9, 2)])
def test_the_step_running_at_the_time_limit_is_in_the_steps_table(seed, limit, replicas):
    """A step still running when the clock stops made its preemptions when it was planned: its row
    (cut at the limit) is in the table, so the steps count every preemption the requests count.
    (Seeds and limits where such a step is in flight; before, the table missed 1-3 preemptions.)"""
    cfg = load_config({"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 40},
                       "scheduler": {"policy": "chunked", "max_num_batched_tokens": 64, "preemption": "recompute",
                                     "long_prefill_token_threshold": 1},
                       "cluster": {"num_replicas": replicas},
                       "workload": {"kind": "poisson", "rate": 40.0, "num_requests": 100, "seed": seed,
                                    "prompt_len": {"kind": "uniform", "low": 20, "high": 300},
                                    "output_len": {"kind": "uniform", "low": 20, "high": 200}},
                       "sim": {"max_sim_time_s": limit}})
    r = simulate(cfg)
    assert r.steps["num_preempted"].sum() == r.requests["num_preemptions"].sum() > 0
    ends = r.steps["start"] + r.steps["duration"]
    assert (ends <= limit + 1e-12).all()


def test_max_sim_time_aborts_the_live_requests_and_keeps_them(tmp_path):
    r = simulate(load_config(SMALL, ["sim.max_sim_time_s=3.0"]))
    s = r.summary
    assert s["num_aborted"] > 0
    assert s["num_finished"] + s["num_aborted"] == s["num_requests"]
    aborted = r.requests[r.requests["finish_reason"] == "aborted"]
    assert (aborted["finish_time"] == 3.0).all()
    assert aborted["reject_reason"].str.contains("max_sim_time_s").all()
    assert (r.steps["start"] < 3.0).all()


def test_save_writes_the_four_files_and_a_plot(tmp_path):
    r = simulate(load_config(SMALL, ["workload.num_requests=40"]))
    out = r.save(tmp_path / "out")
    for name in ("summary.json", "requests.csv", "steps.csv", "config.toml"):
        assert (out / name).stat().st_size > 0
    assert load_config(out / "config.toml") == r.config
    pytest.importorskip("matplotlib")
    assert (out / "timeline.png").stat().st_size > 0


def test_progress_bar_counts_finished_requests(capsys):
    from sim import build  # the bar of every layout (sim.build.progress_bar)

    old = build.PROGRESS_MIN_REQUESTS
    build.PROGRESS_MIN_REQUESTS = 10
    try:
        simulate(load_config(SMALL, ["workload.num_requests=40"]), progress=True)
    finally:
        build.PROGRESS_MIN_REQUESTS = old
    assert "40/40" in capsys.readouterr().err


def test_simulating_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys; from sim.config import load_config; from sim.runner import simulate; import servesim.commands.simulate; "
            "simulate(load_config({'workload': {'num_requests': 5}})); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"


def test_a_result_made_from_python_carries_the_notes_the_command_prints(tmp_path):
    """simulate() takes what load_config reads, and its result's config (and config.toml) says what the
    run did to the workload: here the requests a time limit left out."""
    config = {"model": {"name": "Llama-3-8B"}, "workload": {"rate": 15.0, "num_requests": 120},
              "sim": {"max_sim_time_s": 4.0}}
    result = simulate(config, out=tmp_path)
    left = 120 - result.summary["num_requests"]
    assert left > 0
    line = f"sim.max_sim_time_s = 4: {left} of the workload's 120 requests are sent at or after the clock stops"
    assert any(n.startswith(line) for n in result.config.notes)
    assert f"# note: {line}" in (tmp_path / "config.toml").read_text()
    assert not simulate({**config, "sim": {}}).config.notes  # nothing left out: nothing to say

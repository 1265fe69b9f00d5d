"""Saturation said out loud: a queue that grows through the run is flagged, one that does not is not.

Against theory: one sequence at a time with a constant service time is a D/1 server of rate
1/service; offered Poisson load at 3x that rate must be flagged with the sustainable rate close to
1/service, at 0.3x not at all. Then the same through `simulate` on a real configuration, with the
sustainable rate measured first by an overload run.
"""
from __future__ import annotations

import numpy as np
import pytest

from records.metrics import format_summary, summarize
from records.results import requests_table, steps_table
from records.saturation import saturation
from sim_helpers import ConstantLatency, make_requests, make_sched, run_requests


def poisson_arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))


def run_d1(load: float, seed: int, service: float = 0.01, n: int = 3000) -> dict:
    reqs = make_requests(n, arrivals=poisson_arrivals(load / service, n, seed), prompt=8, max_tokens=1)
    rec = run_requests(make_sched("continuous", max_num_seqs=1), ConstantLatency(service), reqs)
    return summarize(requests_table(rec.requests), steps_table(rec.steps))


@pytest.mark.parametrize("seed", [1, 2])
def test_d1_server_at_three_times_its_rate_is_saturated_and_its_rate_is_found(seed):
    summary = run_d1(3.0, seed)
    assert summary["saturated"] is True
    assert summary["sustainable_rate"] == pytest.approx(100.0, rel=0.05)  # 1 / 0.01 s
    assert summary["offered_rate"] == pytest.approx(300.0, rel=0.1)
    assert "SATURATED" in format_summary(summary)


@pytest.mark.parametrize("load", [0.3, 0.8])
def test_d1_server_below_its_rate_is_not_saturated(load):
    summary = run_d1(load, 3)
    assert summary["saturated"] is False and summary["sustainable_rate"] is None
    assert abs(summary["backlog_growth"]) < 0.01
    assert "kept up" in format_summary(summary)


def test_a_run_cut_short_with_most_requests_still_waiting_is_saturated():
    # 10 req/s offered, 2 req/s served in order, stopped at 10 s: 20 served, 80 still waiting
    arrival = np.linspace(0.0, 10.0, 100)
    first = np.full(100, np.nan)
    first[:20] = 0.5 * np.arange(1, 21)
    sat = saturation(arrival, first, end_s=10.0)
    assert sat["saturated"] is True
    assert sat["sustainable_rate_per_s"] == pytest.approx(2.0, rel=0.1)


def test_a_time_limit_that_cuts_off_a_few_requests_in_flight_is_not_saturation():
    arrival = np.linspace(0.0, 10.0, 100)
    first = arrival + 0.05
    first[-3:] = np.nan  # arrived in the last 0.3 s: still in their prefill when the run stopped
    assert saturation(arrival, first, end_s=10.0)["saturated"] is False


def test_too_few_requests_cannot_tell():
    sat = saturation(np.arange(5.0), np.arange(5.0) + 100.0, end_s=200.0)
    assert sat["saturated"] is False and sat["offered_rate_per_s"] is None


def test_simulated_configuration_at_three_and_a_third_of_its_sustainable_rate():
    from sim.config import load_config
    from sim.runner import simulate

    base = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "A100-80G"},
            "scheduler": {"policy": "chunked", "max_num_seqs": 32},
            "workload": {"kind": "poisson", "num_requests": 600, "seed": 4,
                         "prompt_len": {"kind": "constant", "value": 512},
                         "output_len": {"kind": "constant", "value": 128}}}

    def run(rate):
        config = load_config(base | {"workload": base["workload"] | {"rate": rate}})
        return simulate(config).summary

    overload = run(1000.0)  # everything at once: the departures show what the configuration sustains
    mu = overload["sustainable_rate"]
    assert overload["saturated"] and mu > 0
    assert run(3 * mu)["saturated"] is True
    assert run(0.3 * mu)["saturated"] is False


def two_priority_levels(n: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """60% of the requests at priority 0 served at once; the 40% at priority 1 served at a third of
    their offered rate, so their backlog (and wait) grows through the run."""
    arrival = np.linspace(0.0, 100.0, n)
    priority = (np.arange(n) % 5 >= 3).astype(int)
    first = arrival + 0.05
    low = priority == 1
    first[low] = arrival[low][0] + 3.0 * (arrival[low] - arrival[low][0]) + 0.05
    return arrival, first, priority


def test_a_growing_backlog_of_the_lower_priority_is_saturation():
    """The median request (priority 0) waits no longer at the end: only the levels one by one show it."""
    arrival, first, priority = two_priority_levels()
    assert saturation(arrival, first, end_s=float(np.nanmax(first)))["saturated"] is False  # one queue: hidden
    assert saturation(arrival, first, end_s=float(np.nanmax(first)), priority=priority)["saturated"] is True


def test_priority_levels_that_all_keep_up_are_not_saturation():
    arrival = np.linspace(0.0, 100.0, 1000)
    priority = (np.arange(1000) % 5 >= 3).astype(int)
    first = arrival + np.where(priority == 1, 0.4, 0.05)  # the lower level waits longer, but not more and more
    assert saturation(arrival, first, end_s=101.0, priority=priority)["saturated"] is False


def test_a_priority_run_whose_batch_class_falls_behind_is_saturated_in_both_summaries():
    """An interactive class (60%, priority 0) and a batch class (40%) at about three times what the
    replica sustains: under `priority` the interactive class is served at once while the batch
    class's wait grows to minutes. The in-memory summary and the streamed one both say so."""
    from sim.config import load_config
    from sim.runner import simulate

    base = {"model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "L40S", "num_gpu_blocks": 1500},
            "scheduler": {"policy": "chunked", "max_num_batched_tokens": 1024, "max_num_seqs": 64},
            "workload": {"kind": "poisson", "rate": 5.0, "num_requests": 600, "seed": 7, "classes": [
                {"name": "interactive", "priority": 0, "fraction": 0.6,
                 "prompt_len": {"kind": "lognormal", "median": 200, "sigma": 0.5},
                 "output_len": {"kind": "lognormal", "median": 120, "sigma": 0.5}},
                {"name": "batch", "priority": 1, "fraction": 0.4,
                 "prompt_len": {"kind": "lognormal", "median": 1800, "sigma": 0.4, "max": 3500},
                 "output_len": {"kind": "lognormal", "median": 300, "sigma": 0.5}}]}}
    for queue in ("fcfs", "priority"):
        config = load_config(base, [f"scheduler.queue={queue}"])
        assert simulate(config).summary["saturated"] is True, queue
        assert simulate(config, stream=True).summary["saturated"] is True, queue

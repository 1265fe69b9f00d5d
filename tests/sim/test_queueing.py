"""Queueing theory the simulator must reproduce: M/D/1 waits and Little's law.

Arrivals are drawn here (numpy), service comes from a constant-time latency model built in the
test, so these checks depend on neither the workload generators nor the roofline.
"""
from __future__ import annotations

import numpy as np
import pytest

from records.results import requests_table, steps_table
from sim_helpers import ConstantLatency, make_requests, make_sched, run_requests


def poisson_arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))


@pytest.mark.parametrize("rho, seed", [(0.5, 1), (0.3, 2)])
def test_batch_size_one_with_constant_service_is_md1(rho, seed):
    # one sequence at a time, one step per request (max_tokens=1: the prefill samples the only token)
    service = 0.01
    n = 40_000
    reqs = make_requests(n, arrivals=poisson_arrivals(rho / service, n, seed), prompt=8, max_tokens=1)
    run_requests(make_sched("continuous", max_num_seqs=1), ConstantLatency(service), reqs)
    table = requests_table(reqs)
    pk_wait = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    assert table["queue_s"].mean() == pytest.approx(pk_wait, rel=0.05)
    assert table["e2e_s"].mean() == pytest.approx(pk_wait + service, rel=0.05)
    assert table["e2e_s"].min() == pytest.approx(service)  # nobody is served faster than one step


def test_littles_law_for_a_batching_server():
    # continuous batching of up to 8 sequences, geometric output lengths: no closed form for W,
    # but L = lambda x W must hold, with L measured by what arrivals see (PASTA) and from the steps
    rng = np.random.default_rng(7)
    n, rate = 6000, 10.0  # moderate load: prefill-first steps pause the decodes
    outputs = rng.geometric(1 / 12, n)
    reqs = make_requests(n, arrivals=poisson_arrivals(rate, n, 8), prompt=32, max_tokens=outputs)
    rec = run_requests(make_sched("continuous", max_num_seqs=8), ConstantLatency(0.02, per_token=2e-4), reqs)
    table = requests_table(rec.requests)
    steps = steps_table(rec.steps)
    span = table["finish_time"].max() - table["arrival_time"].min()
    lam = n / span

    arrivals = table["arrival_time"].to_numpy()
    finishes = table["finish_time"].to_numpy()
    # number in system just before each arrival: arrived earlier and not finished yet
    in_system = np.searchsorted(np.sort(arrivals), arrivals, side="left") - \
        np.searchsorted(np.sort(finishes), arrivals, side="right")
    sojourn = table["e2e_s"].mean()
    assert in_system.mean() == pytest.approx(lam * sojourn, rel=0.05)

    # the steps table agrees with the requests table: time-average running = lambda x time running
    busy = (steps["num_running"] * steps["duration"]).sum() / span
    running_time = (table["finish_time"] - table["first_scheduled_time"]).mean()
    assert busy == pytest.approx(lam * running_time, rel=0.01)
    # and so does the waiting queue, up to the requests that arrive during a step (seen at the next one)
    waiting = (steps["num_waiting"] * steps["duration"]).sum() / span
    assert waiting <= lam * table["queue_s"].mean() + 1e-9

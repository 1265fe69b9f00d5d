"""A client's bound on requests in flight (`workload.max_concurrency`, sim.workload.concurrency):
never more than N in flight, none lost, a request due while all are busy sent when one ends, and a
bound that never binds changes nothing."""
from __future__ import annotations

import numpy as np
import pytest

from policies import ConfigError
from sim.config import load_config
from sim.runner import simulate


class StepTime:
    """A latency model: every step 10 ms plus 20 us a computed token."""

    def step_time(self, plan) -> float:
        return 0.01 + 2e-5 * plan.num_tokens


def capped_config(rate: float, max_concurrency: int | None, n: int = 120, **workload):
    section = {"kind": "poisson", "rate": rate, "num_requests": n, "seed": 5,
               "prompt_len": {"kind": "uniform", "low": 50, "high": 400},
               "output_len": {"kind": "uniform", "low": 5, "high": 60}, **workload}
    if max_concurrency is not None:
        section["max_concurrency"] = max_concurrency
    return load_config({"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM"},
                        "scheduler": {"policy": "vllm", "max_num_seqs": 64, "max_model_len": 4096},
                        "workload": section})


def run(config):
    return simulate(config, latency_model=StepTime()).requests


def in_flight_peak(table) -> int:
    """The most requests between their arrival (send) and their end at any moment."""
    events = sorted([(t, 1) for t in table["arrival_time"]] + [(t, -1) for t in table["finish_time"]],
                    key=lambda e: (e[0], e[1]))  # an end before a send at the same instant
    return int(np.max(np.cumsum([d for _, d in events])))


@pytest.mark.parametrize("cap", [1, 4, 16])
def test_never_more_than_the_bound_in_flight_and_none_lost(cap):
    table = run(capped_config(rate=500.0, max_concurrency=cap))  # due far faster than served
    assert len(table) == 120 and table["finish_reason"].isin(["length", "stop"]).all()
    assert in_flight_peak(table) == cap  # the bound binds, and holds
    assert in_flight_peak(run(capped_config(rate=500.0, max_concurrency=None))) > cap


def test_one_slot_sends_each_request_when_the_previous_one_ends():
    table = run(capped_config(rate=500.0, max_concurrency=1)).sort_values("arrival_time")
    np.testing.assert_allclose(table["arrival_time"].to_numpy()[1:], table["finish_time"].to_numpy()[:-1])
    assert (table["queue_s"] < 1e-9).all()  # nothing waits in the server: the client holds them


def test_a_bound_that_never_binds_changes_nothing():
    free, capped = run(capped_config(rate=0.5, max_concurrency=None)), run(capped_config(rate=0.5, max_concurrency=64))
    for col in ("arrival_time", "finish_time", "ttft_s"):  # (to rounding: the sends take another path)
        np.testing.assert_allclose(free[col].to_numpy(), capped[col].to_numpy(), rtol=0, atol=1e-9)


def test_the_bound_is_checked():
    with pytest.raises(ConfigError, match="^workload.max_concurrency"):
        capped_config(rate=1.0, max_concurrency=0)
    with pytest.raises(ConfigError, match="^workload.max_concurrency: bounds an open-loop client.*num_users"):
        capped_config(rate=1.0, max_concurrency=4, kind="closed_loop", num_users=4)

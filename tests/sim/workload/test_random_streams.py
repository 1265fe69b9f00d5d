"""RandomStreams: one generator in turn (every workload as before), or one stream per quantity
(common random numbers: request i the same request at every rate and request count)."""
from __future__ import annotations

import numpy as np
import pytest

from policies import ConfigError
from sim.workload import WorkloadConfig, build_workload
from sim.workload.lengths import sample_lengths

CHAT = {"prompt_len": {"kind": "lognormal", "median": 600, "sigma": 0.8, "max": 6000},
        "output_len": {"kind": "lognormal", "median": 150, "sigma": 0.7, "max": 1500}}
# classes with lengths of their own, shared prefixes, an empirical length table: every drawn quantity
MIXED = {"prompt_len": {"kind": "empirical", "path": "examples/traces/azure_conv_2023_slice.csv"},
         "output_len": {"kind": "uniform", "low": 10, "high": 400},
         "classes": [{"name": "chat", "priority": 0, "fraction": 0.7},
                     {"name": "batch", "priority": 1, "fraction": 0.3,
                      "prompt_len": {"kind": "lognormal", "median": 2000, "sigma": 0.5},
                      "output_len": {"kind": "constant", "value": 64}}],
        "num_prefix_groups": 3, "prefix_len": 256, "users_per_group": 4}


def requests(streams="one", **overrides):
    return build_workload(WorkloadConfig(**overrides), 8192, streams).start()


def columns(reqs):
    return {"arrival": np.array([r.arrival_time for r in reqs]),
            "prompt": [r.num_prompt_tokens for r in reqs], "output": [r.max_tokens for r in reqs],
            "priority": [r.priority for r in reqs], "tags": [r.tags for r in reqs]}


def test_one_generator_draws_gaps_then_lengths_in_turn():
    # what every simulate, reproduce and validate run generated before per-quantity streams existed
    cfg = WorkloadConfig(kind="gamma", cv=2.0, rate=7.0, num_requests=50, seed=11, **CHAT)
    rng = np.random.default_rng(11)
    gaps = rng.gamma(0.25, 1.0 / (7.0 * 0.25), size=50)
    prompt = sample_lengths(cfg.prompt_len, 50, rng, "prompt")
    output = sample_lengths(cfg.output_len, 50, rng, "output")
    got = columns(build_workload(cfg, 8192).start())
    assert np.array_equal(got["arrival"], np.cumsum(gaps))
    assert got["prompt"] == prompt.tolist() and got["output"] == output.tolist()


@pytest.mark.parametrize("kind", ["poisson", "gamma"])
@pytest.mark.parametrize("lengths", [CHAT, MIXED], ids=["chat", "classes-prefixes-empirical"])
def test_per_quantity_streams_give_request_i_at_every_rate_and_count(kind, lengths):
    # a capacity search's held window: 40 requests at 4/s, 130 at 13/s
    low = columns(requests("per_quantity", kind=kind, cv=1.5, rate=4.0, num_requests=40, seed=5, **lengths))
    high = columns(requests("per_quantity", kind=kind, cv=1.5, rate=13.0, num_requests=130, seed=5, **lengths))
    for key in ("prompt", "output", "priority", "tags"):
        assert high[key][:40] == low[key], key
    # the same unit-rate arrival draws, scaled by 1/rate
    np.testing.assert_allclose(high["arrival"][:40] * 13.0, low["arrival"] * 4.0, rtol=1e-12)
    assert np.all(high["arrival"][:40] <= low["arrival"])  # every request arrives no later at the higher rate


def test_one_generator_does_not():
    # the wiggle the per-quantity streams remove: the extra gaps drawn first shift every length
    low = columns(requests(rate=4.0, num_requests=40, seed=5, **CHAT))
    high = columns(requests(rate=13.0, num_requests=130, seed=5, **CHAT))
    assert high["prompt"][:40] != low["prompt"]


def test_per_quantity_streams_are_seeded_and_independent_of_each_other():
    a = columns(requests("per_quantity", rate=4.0, num_requests=60, seed=5, **CHAT))
    assert columns(requests("per_quantity", rate=4.0, num_requests=60, seed=5, **CHAT))["prompt"] == a["prompt"]
    assert columns(requests("per_quantity", rate=4.0, num_requests=60, seed=6, **CHAT))["prompt"] != a["prompt"]
    # constant prompts: the output lengths do not move with whether prompts were drawn
    fixed = {**CHAT, "prompt_len": {"kind": "constant", "value": 100}}
    assert columns(requests("per_quantity", rate=4.0, num_requests=60, seed=5, **fixed))["output"] == a["output"]


def test_an_unknown_layout_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"^workload streams: .*per_quantity"):
        requests("per_request", rate=4.0, num_requests=5)

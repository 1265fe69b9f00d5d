"""The profile shipped in examples/profiles: its metadata, its model, and the configs that use it."""
from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.model_dims import resolve_model
from sim.latency.profile import REQUIRED_OPS, Profile
from sim.latency.profiled import ProfiledLatencyModel

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "examples" / "profiles" / "tiny-llama-cpu.json"


def test_the_shipped_profile_has_its_metadata_and_every_op():
    p = Profile.load(PROFILE)
    for key in ("device", "torch_version", "dtype", "date", "source", "clock", "num_threads"):
        assert p.meta.get(key) is not None, key
    assert p.meta["source"] == "calibrate"
    assert set(REQUIRED_OPS) <= set(p.ops) and "step_overhead" in p.ops
    # measured for exactly the tiny model the engine runs
    ProfiledLatencyModel(p, model=resolve_model(str(REPO / "examples/tiny-llama/config.json"), 1, p.meta["dtype"]))


@pytest.mark.parametrize("toml", sorted((REPO / "examples").glob("validate-*.toml")), ids=lambda p: p.stem)
def test_validation_configs_simulate_with_the_shipped_profile(toml):
    from sim.config import load_config
    from sim.runner import simulate

    config = load_config(toml)
    assert Path(config.hardware.profile).resolve() == PROFILE.resolve()
    result = simulate(config)
    assert len(result.requests) == config.workload.num_requests  # nothing is lost
    assert result.summary["num_finished"] == config.workload.num_requests
    if "preempt" in toml.stem:
        assert result.summary["num_preemptions"] > 0

"""EagerLatencyModel: max(device time, launch path) + host work outside the forward pass."""
from __future__ import annotations

import pytest

from policies import ConfigError
from sim.latency.eager import EagerLatencyModel
from sim.latency.curves import PiecewiseLinear
from sim.latency.profiled import ProfiledLatencyModel
from test_profiled import make_profile, plan, seq


def make_eager(launch_s: float | None, **overhead):
    """The toy profile of test_profiled, with `launch_s` (None: no eager_launch) and flat host ops."""
    p = make_profile()
    if launch_s is not None:
        p.meta["eager_launch"] = {"launch_s": launch_s}
    for name, seconds in overhead.items():
        p.ops[name].curve = PiecewiseLinear((1.0,), (seconds,))
    return p


PLANS = [plan(seq(0, 1, 30)), plan(*(seq(i, 1, 100 + i) for i in range(8))), plan(seq(0, 512, 0)),
         plan(seq(0, 64, 0), seq(1, 1, 40))]


def test_without_a_launch_path_it_is_the_profiled_model():
    p = make_eager(None)
    for pl in PLANS:
        assert EagerLatencyModel(p).step_time(pl) == pytest.approx(ProfiledLatencyModel(p).step_time(pl))


def test_a_host_bound_step_takes_the_launch_path_whatever_its_tokens():
    launch = 10.0  # far above the toy device times
    lm = EagerLatencyModel(make_eager(launch, step_overhead=1e-3, prefill_overhead=0.0))
    small, large = plan(seq(0, 1, 30)), plan(seq(0, 512, 0))
    assert ProfiledLatencyModel(lm.profile).step_time(large) > ProfiledLatencyModel(lm.profile).step_time(small)
    assert lm.step_time(small) == pytest.approx(launch + 1e-3)
    assert lm.step_time(large) == pytest.approx(launch + 1e-3)


def test_a_gpu_bound_step_hides_the_launch_path():
    p = make_eager(None, step_overhead=2e-3)
    device = {pl: ProfiledLatencyModel(p).step_time(pl) - 2e-3 for pl in PLANS}
    launch = 0.5 * min(device.values())
    p.meta["eager_launch"] = {"launch_s": launch}
    for pl in PLANS:
        assert EagerLatencyModel(p).step_time(pl) == pytest.approx(device[pl] + 2e-3)


def test_components_sum_to_the_step_and_it_never_beats_either_bound():
    for launch in (0.0, 1e-4, 1e-3, 1e-2):
        lm = EagerLatencyModel(make_eager(launch, step_overhead=3e-4))
        for pl in PLANS:
            parts = lm.breakdown(pl)
            t = lm.step_time(pl)
            assert t == pytest.approx(sum(parts.values()))
            assert t >= launch + parts["overhead"] - 1e-12
            assert t >= ProfiledLatencyModel(lm.profile).step_time(pl) - 1e-12


def test_an_empty_plan_costs_nothing():
    assert EagerLatencyModel(make_eager(1.0)).step_time(plan()) == 0.0


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "fast", True])
def test_bad_launch_path_names_the_field(bad):
    with pytest.raises(ConfigError, match="profile.meta.eager_launch.launch_s"):
        EagerLatencyModel(make_eager(bad))




def test_a_profile_with_a_launch_path_builds_the_eager_model(tmp_path):
    """Through the file and `build_latency_model`: the shipped tiny profile plus a launch path."""
    from pathlib import Path

    from sim.latency import build_latency_model
    from sim.latency.profile import Profile
    from specs import HardwareConfig, ModelConfig

    examples = Path(__file__).resolve().parents[3] / "examples"
    model = ModelConfig(name=str(examples / "tiny-llama" / "config.json"), dtype="float32")
    p = Profile.load(examples / "profiles" / "tiny-llama-cpu.json")
    plain = build_latency_model(model, HardwareConfig(latency="profiled", profile=str(examples / "profiles" /
                                                                                    "tiny-llama-cpu.json")), 16)
    assert not isinstance(plain, EagerLatencyModel)
    p.meta["eager_launch"] = {"launch_s": 1.0, "source": "test"}
    lm = build_latency_model(model, HardwareConfig(latency="profiled", profile=str(p.save(tmp_path / "p.json"))), 16)
    assert isinstance(lm, EagerLatencyModel)
    one = plan(seq(0, 1, 30))
    assert lm.step_time(one) == pytest.approx(1.0 + lm.breakdown(one)["overhead"])

"""Autoscaling: replicas follow a load that steps up and back down, after the provisioning delay,
drain before they go, and are paid for exactly while they are up."""
from __future__ import annotations

import numpy as np
import pytest

from policies import ConfigError
from sim.cluster.autoscaler import AutoscalingConfig, desired_replicas
from sim.config import load_config
from sim.runner import simulate
from specs import get_model, weight_bytes_per_gpu

LOW, HIGH, STAGE_S = 2.0, 30.0, 60.0


def step_config(**autoscaling):
    scaling = {"enabled": True, "min_replicas": 1, "max_replicas": 6, "metric": "queue", "target": 4,
               "interval_s": 5, "provisioning_delay_s": 20} | autoscaling
    return load_config({
        "model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM"}, "scheduler": {"max_num_seqs": 64},
        "workload": {"kind": "staged", "stages": [[LOW, STAGE_S], [HIGH, STAGE_S], [LOW, 2 * STAGE_S]], "seed": 1,
                     "prompt_len": {"kind": "constant", "value": 512},
                     "output_len": {"kind": "constant", "value": 256}},
        "autoscaling": scaling})


@pytest.fixture(scope="module")
def stepped():
    return simulate(step_config())


def test_replicas_rise_after_the_provisioning_delay_and_fall_after_the_drop(stepped):
    t = stepped.replicas
    asked = t[t["num_provisioning"] > 0]["time"].min()  # the first scale-up
    assert STAGE_S <= asked <= STAGE_S + 10  # within two intervals of the step up
    grown = t[t["num_serving"] > 1]["time"].min()
    assert grown == pytest.approx(asked + 20.0)  # serving exactly once the model has loaded
    peak = t["num_serving"].max()
    assert peak > 1
    after_drop = t[t["time"] > 3 * STAGE_S]
    assert after_drop["num_serving"].iloc[-1] < peak  # scaled back down once the high stage ended
    assert t[t["time"] < asked]["num_serving"].max() == 1  # nothing added before the load rose


def test_ttft_during_the_ramp_is_worse_than_after_it(stepped):
    r, t = stepped.requests, stepped.replicas
    asked = t[t["num_provisioning"] > 0]["time"].min()
    grown = t[t["num_serving"] == t["num_serving"].max()]["time"].min()
    ramp = r[(r["arrival_time"] >= asked) & (r["arrival_time"] < grown)]
    settled = r[(r["arrival_time"] >= grown + 10) & (r["arrival_time"] < 2 * STAGE_S)]
    assert len(ramp) > 20 and len(settled) > 20
    assert ramp["ttft_s"].median() > 2 * settled["ttft_s"].median()


def test_every_request_of_the_stepped_load_ends(stepped):
    r = stepped.requests
    assert len(r) == stepped.summary["num_requests"] and (r["finish_reason"] == "length").all()
    assert stepped.summary["autoscaling"]["num_scale_ups"] >= 1


def test_gpu_hours_are_the_replicas_time_up_not_the_maximum():
    config = step_config()
    result = simulate(config)
    t = result.replicas
    up = t["num_serving"] + t["num_provisioning"] + t["num_draining"]
    replica_s = float((up.iloc[:-1].to_numpy() * np.diff(t["time"].to_numpy())).sum())
    assert result.summary["gpu_hours"] == pytest.approx(replica_s / 3600, rel=1e-6)
    assert result.summary["gpu_hours"] < 6 * result.summary["duration_s"] / 3600


def test_the_default_provisioning_delay_is_the_weights_over_the_load_bandwidth():
    cfg = AutoscalingConfig(enabled=True, load_bandwidth_gbps=2.0)
    weights = weight_bytes_per_gpu(get_model("Llama-2-7B"), 1)
    assert cfg.delay_s(weights) == pytest.approx(weights / 2e9)  # ~6.7 s for 13.5 GB


@pytest.mark.parametrize("serving, metric, want", [(2, 8.0, 4), (4, 1.0, 1), (3, 4.2, 3), (1, 100.0, 6), (6, 0.0, 1)])
def test_desired_replicas_follow_the_hpa_rule(serving, metric, want):
    assert desired_replicas(serving, metric, 4.0, 1, 6) == want


@pytest.mark.parametrize("values, field", [({"max_replicas": 0}, "autoscaling.max_replicas"),
                                           ({"min_replicas": 3, "max_replicas": 2}, "autoscaling.max_replicas"),
                                           ({"metric": "cpu"}, "autoscaling.metric"),
                                           ({"interval_s": 0}, "autoscaling.interval_s"),
                                           ({"metric": "kv_usage", "target": 4.0},
                                            r"autoscaling.target: metric = kv_usage is the used fraction")])
def test_bad_values_name_the_field(values, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        AutoscalingConfig(enabled=True, **values)


@pytest.mark.parametrize("metric, target", [("kv_usage", 0.2), ("ttft_p90", 0.5)])
def test_other_metrics_also_scale_up_under_the_high_stage(metric, target):
    result = simulate(step_config(metric=metric, target=target))
    assert result.replicas["num_serving"].max() > 1
    assert (result.requests["finish_reason"] == "length").all()

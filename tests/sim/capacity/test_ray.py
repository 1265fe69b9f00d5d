"""The same sweep on local processes and on a local Ray instance gives identical tables.

Starting Ray takes ~20 s on a small machine, so this is a slow test (`make test-slow`).
"""
import pandas as pd
import pytest

from sim.capacity.executor import LocalExecutor, RayExecutor
from sim.capacity.slo import SLO
from sim.capacity.sweep import expand_grid, run_sweep
from capacity_helpers import small_config


@pytest.mark.slow
def test_ray_and_local_processes_give_identical_tables():
    pytest.importorskip("ray")
    base = small_config(num_requests=40)
    points = expand_grid({"workload.rate": ["4", "32"], "cluster.num_replicas": ["1", "2"],
                          "disaggregation.enabled": ["false", "true"]})
    local = run_sweep(base, points, SLO(0.5, 0.02), LocalExecutor(2), progress=False)
    ray_table = run_sweep(base, points, SLO(0.5, 0.02), RayExecutor(num_cpus=2), progress=False)
    pd.testing.assert_frame_equal(local, ray_table)
    assert len(local) == 8 and local["overrides"].is_unique

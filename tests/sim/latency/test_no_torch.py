"""The simulator's inputs load without torch (a planner may not have a GPU stack)."""
from __future__ import annotations

import subprocess
import sys


def test_models_workload_latency_do_not_import_torch():
    code = ("import sys; import specs, sim.workload, sim.latency, sim.latency.plot; "
            "from sim.workload import build_workload, WorkloadConfig; build_workload(WorkloadConfig(num_requests=3)).start(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

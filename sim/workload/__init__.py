"""Workloads: arrival processes, length distributions, trace readers, shared prefixes, classes.

`build_workload(config.workload, max_model_len) -> Workload`; `Workload.start()` gives the requests
known up front, `Workload.on_finish(request, now)` the follow-ups (closed-loop users). Kinds and
trace formats of other packages (a load generator's own, a dataset's layout) are registered in
`sim.workload.registry`.
"""
from sim.workload.config import LengthDist, PriorityClass, WorkloadConfig
from sim.workload.workload import Workload, build_workload

__all__ = ["LengthDist", "PriorityClass", "WorkloadConfig", "Workload", "build_workload"]


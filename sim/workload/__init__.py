"""Workloads: arrival processes, length distributions, trace readers, shared prefixes, classes.

`build_workload(config.workload, max_model_len) -> Workload`; `Workload.start()` gives the requests
known up front, `Workload.on_finish(request, now)` the follow-ups (closed-loop users). Kinds and
trace formats of other packages (a load generator's own, a dataset's layout) are registered in
`sim.workload.registry`.
"""
from sim.workload.config import LengthDist, PriorityClass, WorkloadConfig

__all__ = ["LengthDist", "PriorityClass", "WorkloadConfig", "Workload", "build_workload"]


def __getattr__(name):  # the builder imports numpy; keep `import sim.workload` light for configs
    if name in ("Workload", "build_workload"):
        from sim.workload import workload

        return getattr(workload, name)
    raise AttributeError(name)

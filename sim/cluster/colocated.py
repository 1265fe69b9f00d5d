"""`ColocatedCluster`: several replicas in one SimPy environment behind one router.

Each replica is a `sim.replica.Replica` built from its own resolved config (heterogeneous
replicas each get their own latency model and KV geometry). An arrival goes to the replica the
router picks, at its arrival time; every replica records into the shared `Recorder`, so the
results have one row per request with the replica that served it.
"""
from __future__ import annotations

from typing import Any

import simpy

from policies import Request
from sim.cluster.autoscaler import Autoscaler, Slot
from sim.cluster.layout import autoscaling_section, cluster_section, replica_configs
from sim.cluster.router import Router, make_router
from specs import weight_bytes_per_gpu


def resolve_latency_model(latency_model, config: Any):
    """The latency model of one replica: built from its config (None), given (anything with
    `step_time`), or made by a factory `latency_model(replica_config)` (e.g. one per TP degree)."""
    if latency_model is None:
        from sim.latency import build_latency_model

        return build_latency_model(config)
    if not hasattr(latency_model, "step_time") and callable(latency_model):
        return latency_model(config)
    return latency_model


def build_replica(env: simpy.Environment, config: Any, recorder, name: str, latency_model=None,
                  fast_decode: bool = True):
    """A `Replica` for `config` (scheduler + KV geometry + latency model from that config)."""
    from policies.schedulers import make_scheduler
    from sim.replica import Replica
    from sim.runner import build_cache_config

    scheduler = make_scheduler(config.scheduler, build_cache_config(config))
    return Replica(env, scheduler, resolve_latency_model(latency_model, config), recorder, name=name,
                   fast_decode=fast_decode)


class ColocatedCluster:
    """Replicas that each run prefill and decode, and the router in front of them.

    With `[autoscaling]` enabled the replicas are positions of one replica type; the router sees
    only those the `Autoscaler` has serving (`start_autoscaler` starts it once arrivals exist).
    """

    def __init__(self, env: simpy.Environment, config: Any, recorder, latency_model=None,
                 fast_decode: bool = True) -> None:
        self.env = env
        self.config = config
        self.replicas = [build_replica(env, c, recorder, name, latency_model, fast_decode)
                         for name, c in replica_configs(config)]
        cluster = cluster_section(config)
        self.router: Router = make_router(
            cluster.router, seed=cluster.seed, block_size=config.cache.block_size,
            capacity_blocks=[r.scheduler.block_manager.num_gpu_blocks for r in self.replicas],
            max_imbalance=cluster.max_imbalance)
        self.autoscaler: Autoscaler | None = None

    def start_autoscaler(self, done) -> Autoscaler | None:
        """Start resizing (when the config enables it); `done()` tells when the workload has ended."""
        scaling = autoscaling_section(self.config)
        if not scaling.enabled:
            return None
        first = replica_configs(self.config)[0][1]
        delay = scaling.delay_s(weight_bytes_per_gpu(first.model.spec(), first.hardware.tp))
        self.autoscaler = Autoscaler(self.env, scaling, [Slot(r) for r in self.replicas], delay, done)
        self.add_finish_hook(self.autoscaler.on_finish)
        return self.autoscaler

    def submit(self, request: Request) -> None:
        replicas = self.replicas if self.autoscaler is None else self.autoscaler.serving()
        replicas[self.router.choose(request, replicas)].submit(request)

    def add_finish_hook(self, hook) -> None:
        for r in self.replicas:
            r.on_finish.append(hook)

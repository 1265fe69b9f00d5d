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
from sim.build import build_replica
from sim.cluster.autoscaler import Autoscaler, Slot
from sim.cluster.layout import autoscaling_section, cluster_section, replica_configs
from sim.cluster.router import Router, make_router, reads_only_load
from specs import weight_bytes_per_gpu


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
        if reads_only_load(self.router) and not autoscaling_section(config).enabled:
            # nothing reads or changes a replica's running requests but its own loop (its arrivals
            # only submit) and the router its load, which a carried stretch keeps right: each may
            # carry its stretches through the others' events (the autoscaler reads queues and blocks)
            for replica in self.replicas:
                replica.run_alone(config.sim.max_sim_time_s)

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

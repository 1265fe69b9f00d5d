"""`simulate_cluster(config)`: `sim.runner.simulate` for layouts of more than one replica.

Builds the colocated cluster or the disaggregated pools, feeds the workload through the same
`Arrivals` as a single replica, runs until every request has ended (or `sim.max_sim_time_s`),
aborts what is still live so that no request goes missing, and tabulates the shared recorder.
A streamed run whose replicas cannot affect one another (round robin, an open loop) runs each
replica in an environment of its own instead (`sim.cluster.independent`): the same results, with
its decode runs whole.
"""
from __future__ import annotations

from typing import Any

import simpy

from policies import ConfigError
from records.results import Recorder, end_unfinished
from sim.arrivals import Arrivals
from sim.build import end_reason, make_recorder, progress_bar, run_workload
from sim.cluster.colocated import ColocatedCluster
from sim.cluster.disaggregated import DisaggregatedCluster
from sim.cluster.independent import independent_parts, simulate_independent
from sim.cluster.layout import check_disaggregated, is_disaggregated
from sim.result import SimResult, finish_run


def simulate_cluster(config: Any, progress: Any = False, latency_model=None, workload=None, out=None,
                     stream: bool | None = None, plot: bool = False, fast_decode: bool = True) -> SimResult:
    check_disaggregated(config)
    if is_disaggregated(config) and config.workload.request_timeout_s is not None:
        # a request there is two halves on two pools with a KV transfer between: whose deadline
        # aborts what (and frees which blocks) is not modelled
        raise ConfigError("workload.request_timeout_s: a client timeout is not modelled with prefill/decode "
                          "disaggregation; leave it unset (the client waits) or use colocated replicas")
    workload = run_workload(config, workload)
    recorder = make_recorder(config, out, stream, plot)
    if not isinstance(recorder, Recorder):  # streamed: replicas that cannot affect one another run alone
        parts = independent_parts(config, workload)
        if parts is not None:
            simulate_independent(config, parts, recorder, latency_model, progress, fast_decode)
            return finish_run(recorder, config)
    env = simpy.Environment()
    if is_disaggregated(config):
        cluster = DisaggregatedCluster(env, config, recorder, latency_model, fast_decode)
    else:
        cluster = ColocatedCluster(env, config, recorder, latency_model, fast_decode)
    arrivals = Arrivals(env, workload, cluster.submit)
    cluster.add_finish_hook(arrivals.on_finish)
    arrivals.start()
    autoscaler = None if is_disaggregated(config) else cluster.start_autoscaler(arrivals.done)
    if not isinstance(recorder, Recorder):  # last: a request's times are final when its row is built
        cluster.add_finish_hook(recorder.on_finish)
    bar = progress_bar(arrivals, leave=False, progress=progress)
    try:
        env.run(until=config.sim.max_sim_time_s)
    finally:
        if bar is not None:
            bar.close()
    why = end_reason(config)
    for replica in (cluster.prefill + cluster.decode if is_disaggregated(config) else cluster.replicas):
        replica.end_step(env.now)
    if is_disaggregated(config):
        cluster.end_unfinished(env.now, why)
    else:
        for replica in cluster.replicas:
            mine = [r for r in recorder.requests if recorder.replica_of.get(r.req_id) == replica.name]
            end_unfinished(replica.scheduler, mine, env.now, why)
    provisioned, extra, timeline = None, {}, None
    if autoscaler is not None:
        autoscaler.finish(env.now)
        provisioned = autoscaler.provisioned_s(env.now)
        extra["autoscaling"] = autoscaler.summary()
        timeline = autoscaler.timeline_table()
    if is_disaggregated(config):
        extra["kv_transfer_s"] = cluster.transfer_stats()
    return finish_run(recorder, config, extra, provisioned, timeline)

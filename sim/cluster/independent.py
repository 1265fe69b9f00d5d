"""Replicas that never affect one another, each run in a SimPy environment of its own.

Behind a round-robin router an open-loop workload's requests go to replica j mod N in arrival order
whatever the replicas are doing, and nothing a replica does reaches another: the router reads no
replica, no request's end sends a follow-up (`Workload.stream_parts` deals the requests out).
Each replica then sees the same events in the same order alone as in the shared environment, so
its requests and steps are the same; but alone, its decode runs (`sim.decode_replay`'s fast path,
replayed up to the next event of its environment) are no longer cut at every step of the other
replicas. Used for streamed runs only; the one caveat (exact ties) is on `simulate_independent`.
"""
from __future__ import annotations

from typing import Any

import simpy

from records.results import end_unfinished
from sim.build import build_replica, end_reason, progress_bar
from sim.cluster.layout import autoscaling_section, cluster_section, is_disaggregated, replica_configs
from sim.replica import paused_gc


def independent_parts(config: Any, workload) -> list | None:
    """The per-replica request streams when the replicas cannot affect one another, else None."""
    if (is_disaggregated(config) or cluster_section(config).router != "round_robin" or config.frontend.enabled
            or autoscaling_section(config).enabled):
        return None
    parts = getattr(workload, "stream_parts", None)
    return parts(len(replica_configs(config))) if parts is not None else None


def simulate_independent(config: Any, parts: list, recorder, latency_model=None, progress: Any = False,
                         fast_decode: bool = True):
    """Run each replica alone on its part of the workload, into the one (streaming) recorder.

    The steps table comes replica by replica instead of interleaved in time (the same rows), and
    aborted leftovers end at the latest replica's end, as in the shared environment. Caveat: SimPy
    orders two events of the same instant by when they were scheduled. An arrival falling at the
    very instant one of its replica's steps ends was scheduled, in the shared environment, at the
    previous arrival to any replica, here at the previous arrival to this one, so such an exact tie
    could be resolved the other way (with continuous arrival times it does not occur;
    tests/sim/cluster/test_independent.py compares both runs).
    """
    bar = progress_bar(None, leave=False, total=sum(count for count, _ in parts), progress=progress)
    num_parts = len(parts)
    finished, ends = [], []
    try:
        with paused_gc():
            for k, ((name, replica_config), (_, requests)) in enumerate(zip(replica_configs(config), parts)):
                env = simpy.Environment()
                replica = build_replica(env, replica_config, recorder, name, latency_model, fast_decode)
                replica.on_finish.append(recorder.on_finish)
                replica.run_alone(config.sim.max_sim_time_s)
                if bar is not None:
                    replica.on_finish.append(lambda request, now: bar.update(1))
                env.process(_feed(env, requests, replica.submit, recorder, k, num_parts))
                env.run(until=config.sim.max_sim_time_s)
                replica.end_step(env.now)
                ends.append(env.now)
                finished.append(replica)
    finally:
        if bar is not None:
            bar.close()
    end = max(ends) if ends else 0.0
    why = end_reason(config)
    for replica in finished:
        mine = [r for r in recorder.requests if recorder.replica_of.get(r.req_id) == replica.name]
        end_unfinished(replica.scheduler, mine, end, why)


def _feed(env: simpy.Environment, requests, submit, recorder, part: int, num_parts: int):
    """Submit a part's requests at their arrival times, each numbered by its place in the whole
    arrival order (the shared environment's submission order, which the summary's saturation
    check reads)."""
    position = part
    for request in requests:
        delay = request.arrival_time - env.now
        if delay > 0:
            yield env.timeout(delay)
        recorder.next_order = position
        submit(request)
        position += num_parts

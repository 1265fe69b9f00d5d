"""`simulate(config) -> SimResult`: build everything a config names, run it, tabulate it.

The pieces (`sim.build`, the one setup path for 1..N replicas): the workload, the latency model,
the KV block counts, the scheduler and one `Replica`. `sim.arrivals.Arrivals` feeds the workload's
requests to the replica at their arrival times and asks the workload for follow-ups (closed-loop
users, multi-turn chat) whenever a request ends; the run stops when every request has ended (or at
`sim.max_sim_time_s`, where live requests are aborted so that none goes missing from the results).
With a `[frontend]` section (`sim.frontend.FrontendConfig`), `Arrivals` also plays the HTTP front end:
a request reaches the scheduler its ingress delay after its arrival (the client's send time), its
tokens reach the client the egress delay after the steps that made them, and each step costs the
engine thread's share of streaming its outputs. A layout of more than one replica runs in
`sim.cluster.runner.simulate_cluster`, from the same pieces.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import simpy

from policies import ConfigError
from records.results import Recorder, end_unfinished
from sim.arrivals import Arrivals
from sim.build import (build_cache_config, build_replica, end_reason, make_recorder, progress_bar,
                       resolve_latency_model, run_workload)
from sim.cluster.layout import is_cluster
from sim.cluster.runner import simulate_cluster
from sim.config import Config, config_to_toml, load_config
from sim.notes import empty_notes, outcome_notes, setting_notes, window_notes, with_notes
from sim.replica import paused_gc
from sim.result import SimResult, finish_run, read_table, tabulate

# the names callers use from here (tests patch `make_recorder`, benchmarks time `finish_run`)
__all__ = ["Arrivals", "SimResult", "build_cache_config", "finish_run", "make_recorder", "read_table", "simulate",
           "tabulate"]


def simulate(config: Config, progress: bool | Callable[[int], Any] = False, latency_model=None, workload=None,
             out: str | Path | None = None, stream: bool | None = None, plot: bool = False,
             fast_decode: bool = True) -> SimResult:
    """Run one replica under `config`'s workload until every request has ended.

    `latency_model` / `workload` replace the ones the config would build (tests, calibrated models).
    In memory by default: the result holds both tables. With `out` (a directory) the run streams
    (`records.stream.StreamingRecorder`): finished requests and steps are written there as the run
    goes and leave memory, and the result holds the summary (its tables read back from the files);
    `stream=True` streams without files (summary only). `plot` (streamed runs): timeline.png too.
    `fast_decode=False` runs every step through the scheduler (`sim.decode_replay`: same results).
    `progress`: a tqdm bar on stderr, or a callable making a bar of its own from the request count
    (`sim.build.progress_bar`).
    `config` may also be what `load_config` reads (a TOML file's path, a dict of sections).
    """
    if not isinstance(config, Config):
        config = load_config(config)
    workload = run_workload(config, workload)
    config = with_notes(config, setting_notes(config, workload))  # how its settings combine (`sim.notes`)
    if is_cluster(config):  # several replicas behind a router, or prefill/decode pools
        if config.frontend.enabled:
            raise ConfigError("frontend: the front-end delays are modelled for one replica only; "
                              "remove [frontend] or use one replica without disaggregation")
        result = simulate_cluster(config, progress, latency_model, workload, out=out, stream=stream, plot=plot,
                                  fast_decode=fast_decode)
        return with_run_notes(result, workload)
    # the engine thread's share of streaming, if any
    latency_model = config.frontend.charge(resolve_latency_model(latency_model, config))
    env = simpy.Environment()
    recorder = make_recorder(config, out, stream, plot)
    replica = build_replica(env, config, recorder, "0", latency_model, fast_decode)
    replica.run_alone(config.sim.max_sim_time_s)  # only the arrivals share its environment
    scheduler = replica.scheduler
    arrivals = Arrivals(env, workload, replica.submit, config.frontend)
    replica.on_finish.append(arrivals.on_finish)
    if not isinstance(recorder, Recorder):  # last: a request's times are final when its row is built
        replica.on_finish.append(recorder.on_finish)
    arrivals.start()

    bar = progress_bar(arrivals, progress=progress)
    with paused_gc():  # the run and its tables: see sim.replica.paused_gc
        try:
            env.run(until=config.sim.max_sim_time_s)
        finally:
            if bar is not None:
                bar.close()
        replica.end_step(env.now)
        if config.sim.max_sim_time_s is not None:  # sent before the limit, still in the front end
            for request in arrivals.sent_unsubmitted(config.sim.max_sim_time_s):
                recorder.add_request(request, "0")
        end_unfinished(scheduler, recorder.requests, env.now, end_reason(config))
        return with_run_notes(finish_run(recorder, config), workload)


def with_run_notes(result: SimResult, workload) -> SimResult:
    """`result` with what the run did to its workload in its config's notes (`sim.notes`: lengths
    clipped or filtered, a trace replayed, requests a time limit left out), config.toml included,
    so a result made from Python says what the command line says."""
    done = result.summary["num_requests"]
    notes = outcome_notes(workload) + window_notes(result.config, workload, done) + \
        empty_notes(result.config, workload, done)
    if notes:
        result.config = with_notes(result.config, notes)
        if result.out_dir is not None:  # written before these were known
            (Path(result.out_dir) / "config.toml").write_text(config_to_toml(result.config))
    return result

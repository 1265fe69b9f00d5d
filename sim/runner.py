"""`simulate(config) -> SimResult`: build everything a config names, run it, tabulate it.

The pieces: the workload (`sim.workload.build_workload`), the latency model
(`sim.latency.build_latency_model`), the KV block counts (`specs`), the scheduler
(`policies.scheduler.make_scheduler`) and one `Replica`. `Arrivals` feeds the workload's requests to
the replica at their arrival times and asks the workload for follow-ups (closed-loop users,
multi-turn chat) whenever a request ends; the run stops when every request has ended (or at
`sim.max_sim_time_s`, where live requests are aborted so that none goes missing from the results).
With a `[frontend]` section (`sim.frontend.FrontendConfig`), `Arrivals` also plays the HTTP front end:
a request reaches the scheduler its ingress delay after its arrival (the client's send time), its
tokens reach the client the egress delay after the steps that made them, and each step costs the
engine thread's share of streaming its outputs.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import simpy

from policies import CacheConfig, ConfigError, FinishReason, Request
from sim.config import Config, config_to_toml
from sim.frontend import FrontendConfig
from sim.replica import Replica, paused_gc
from records.results import Recorder, end_unfinished, write_results

if TYPE_CHECKING:  # pandas and tqdm on demand: a streamed CLI run never imports pandas (start-up)
    import pandas as pd
    from tqdm import tqdm

PROGRESS_MIN_REQUESTS = 2000  # below this a run takes well under a second: no bar


class Arrivals:
    """Feeds requests to `submit` at their arrival times; asks the workload for follow-ups on finish.

    Reusable behind a router: `submit` may be any callable taking a Request (a replica's or a
    router's). Register `on_finish` as every replica's finish hook. With an enabled `frontend`
    (`sim.frontend.FrontendConfig`), each request is submitted its ingress delay after its arrival,
    and an ended request's token times move to when its client sees them (before the workload
    hears of the end, at that later time).
    """

    def __init__(self, env: simpy.Environment, workload, submit: Callable[[Request], None],
                 frontend: FrontendConfig | None = None) -> None:
        self.env = env
        self.workload = workload
        self.submit = submit
        self.frontend = frontend if frontend is not None and frontend.enabled else None
        self.num_generated = 0  # requests known so far (initial + follow-ups)
        self.num_ended = 0
        self.progress: "tqdm | None" = None

    def start(self) -> None:
        # an open-loop workload's requests one at a time, in arrival order (`Workload.stream`):
        # made as they arrive, they never all wait in memory; with a front end, the order of reach
        # times may differ from arrivals', so those are sorted up front
        stream = getattr(self.workload, "stream", None) if self.frontend is None else None
        streamed = stream() if stream is not None else None
        if streamed is not None:
            count, requests = streamed
        else:
            requests = sorted(self.workload.start(), key=self.reach_time)
            count = len(requests)
        self.num_generated += count
        self.feeding = self.env.process(self._feed(requests))

    def done(self) -> bool:
        """Nothing more to send and every request sent has ended (follow-ups included)."""
        feeding = getattr(self, "feeding", None)
        return feeding is not None and not feeding.is_alive and self.num_ended >= self.num_generated

    def reach_time(self, request: Request) -> float:
        """When the request reaches the scheduler: its arrival, plus the front end's ingress if any."""
        if self.frontend is None:
            return request.arrival_time
        return request.arrival_time + self.frontend.ingress_s(request.num_prompt_tokens)

    def _feed(self, requests: list[Request]):
        env, submit, reach_time = self.env, self.submit, self.reach_time
        for request in requests:
            delay = reach_time(request) - env.now
            if delay > 0:
                yield env.timeout(delay)
            submit(request)

    def schedule(self, request: Request) -> None:
        """Submit a follow-up at its arrival time (now if that has passed)."""
        self.num_generated += 1
        if self.progress is not None:
            self.progress.total = self.num_generated
        delay = self.reach_time(request) - self.env.now
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _event, r=request: self.submit(r))
        else:
            self.submit(request)

    def on_finish(self, request: Request, now: float) -> None:
        if self.frontend is not None:  # the client sees the end (and every token) egress_s later
            self.frontend.deliver(request)
            now += self.frontend.egress_s
        self.num_ended += 1
        if self.progress is not None:
            self.progress.update(1)
        for follow_up in self.workload.on_finish(request, now):
            self.schedule(follow_up)


class SimResult:
    """What one simulation produced: the two tables, the summary and the resolved config.

    An in-memory run holds its tables (and `raw_requests`, the Request objects). A streamed run
    (`simulate(..., out=DIR)` or `stream=True`) holds only the summary; with an `out_dir` its
    `requests` / `steps` are read back from the files written there on first access.
    """

    def __init__(self, requests: "pd.DataFrame | None", steps: "pd.DataFrame | None", summary: dict,
                 config: Config, raw_requests: list[Request] | None = None, replicas: "pd.DataFrame | None" = None,
                 out_dir: Path | None = None) -> None:
        self._tables = {"requests": requests, "steps": steps}
        self.summary = summary
        self.config = config
        self.raw_requests = raw_requests if raw_requests is not None else []
        self.replicas = replicas  # with autoscaling: the replica counts over time
        self.out_dir = out_dir
        self.streamed = requests is None
        self.sketched_metrics: list[str] = []  # streamed: metrics whose percentiles come from a sketch

    def __repr__(self) -> str:
        return f"SimResult(num_requests={self.summary.get('num_requests')}, streamed={self.streamed})"

    @property
    def requests(self) -> "pd.DataFrame":
        return self._table("requests")

    @property
    def steps(self) -> "pd.DataFrame":
        return self._table("steps")

    def _table(self, name: str) -> "pd.DataFrame":
        table = self._tables[name]
        if table is None:
            table = self._tables[name] = read_table(self.out_dir, name)
        return table

    def save(self, out_dir: str | Path, plot: bool = True) -> Path:
        """Write summary.json, requests.csv, steps.csv and config.toml (+ parquet, timeline.png;
        replicas.csv with autoscaling).

        A streamed result has its files already: they are copied (without a plot it did not make).
        """
        if self.streamed:
            import shutil

            if self.out_dir is None:
                raise ValueError("save: this run was streamed without an out directory; its tables were not "
                                 "kept (simulate(config, out=DIR) writes them as it runs)")
            out = Path(out_dir)
            if out.resolve() != self.out_dir.resolve():
                out.mkdir(parents=True, exist_ok=True)
                for path in self.out_dir.iterdir():
                    if path.is_file():
                        shutil.copy2(path, out / path.name)
            return out
        out = write_results(out_dir, self.requests, self.steps, self.summary, config_to_toml(self.config),
                            plot=plot)
        if self.replicas is not None:
            self.replicas.to_csv(Path(out) / "replicas.csv", index=False)
        return out


def read_table(out_dir: Path | None, name: str) -> "pd.DataFrame":
    """A streamed run's table from its out directory (Parquet when there, else CSV)."""
    import pandas as pd

    if out_dir is None:
        raise ValueError(f"{name}: this run was streamed without an out directory; its tables were not kept "
                         "(simulate(config, out=DIR) writes them as it runs)")
    parquet = Path(out_dir) / f"{name}.parquet"
    if parquet.is_file():
        return pd.read_parquet(parquet)
    return pd.read_csv(Path(out_dir) / f"{name}.csv", keep_default_na=False, na_values=[""])


def build_cache_config(config: Config) -> CacheConfig:
    """The scheduler's KV geometry: block counts from the model and hardware, knobs from `cache`."""
    from specs import num_cpu_blocks, num_gpu_blocks

    spec, block_size = config.model.spec(), config.cache.block_size
    gpu_blocks = num_gpu_blocks(spec, config.hardware, block_size, config.scheduler.max_num_batched_tokens,
                                config.scheduler.max_num_seqs)
    return CacheConfig(block_size=block_size, num_gpu_blocks=gpu_blocks,
                       num_cpu_blocks=num_cpu_blocks(spec, config.hardware, block_size),
                       watermark=config.cache.watermark,
                       enable_prefix_caching=config.cache.enable_prefix_caching,
                       **offload_settings(config))


def offload_settings(config: Config) -> dict:
    """The KV offload tier's `CacheConfig` fields from the `cache` section: its blocks (GiB over the
    replica's GPUs, each holding its shard of a block), the host link's seconds per block (each GPU
    copies its shard over its own link, at the achieved fraction of PCIe swaps also get) and one
    block's bytes over the replica."""
    cache = config.cache
    if not cache.offload_size_gb:
        return {}
    from policies.kv_offload import offload_blocks
    from sim.latency import RooflineConstants
    from specs import bytes_per_block

    hw = config.hardware
    per_gpu = bytes_per_block(config.model.spec(), hw.tp, cache.block_size)
    bandwidth = cache.offload_bandwidth_gbps * 1e9 if cache.offload_bandwidth_gbps is not None else hw.pcie_bandwidth
    num_blocks = offload_blocks(cache.offload_size_gb, per_gpu * hw.tp)
    if num_blocks < 1:
        raise ConfigError(f"cache.offload_size_gb: {cache.offload_size_gb} GiB holds no KV block of "
                          f"{per_gpu * hw.tp} bytes; give more")
    return {"num_offload_blocks": num_blocks, "offload_backend": cache.offload_backend,
            "offload_s_per_block": per_gpu / (bandwidth * RooflineConstants().pcie_eff),
            "offload_block_bytes": per_gpu * hw.tp}


def simulate(config: Config, progress: bool = False, latency_model=None, workload=None,
             out: str | Path | None = None, stream: bool | None = None, plot: bool = False,
             fast_decode: bool = True) -> SimResult:
    """Run one replica under `config`'s workload until every request has ended.

    `latency_model` / `workload` replace the ones the config would build (tests, calibrated models).
    In memory by default: the result holds both tables. With `out` (a directory) the run streams
    (`records.stream.StreamingRecorder`): finished requests and steps are written there as the run
    goes and leave memory, and the result holds the summary (its tables read back from the files);
    `stream=True` streams without files (summary only). `plot` (streamed runs): timeline.png too.
    `fast_decode=False` runs every step through the scheduler (`sim.decode_replay`: same results).
    """
    from policies.schedulers import make_scheduler
    from sim.cluster.layout import is_cluster
    from sim.latency import build_latency_model
    from sim.workload import build_workload

    if is_cluster(config):  # several replicas behind a router, or prefill/decode pools
        if config.frontend.enabled:
            raise ConfigError("frontend: the front-end delays are modelled for one replica only; "
                              "remove [frontend] or use one replica without disaggregation")
        from sim.cluster.runner import simulate_cluster

        return simulate_cluster(config, progress, latency_model, workload, out=out, stream=stream, plot=plot,
                                fast_decode=fast_decode)
    if latency_model is None:
        latency_model = build_latency_model(config)
    latency_model = config.frontend.charge(latency_model)  # the engine thread's share of streaming, if any
    if workload is None:
        workload = build_workload(config.workload, config.scheduler.max_model_len)
    scheduler = make_scheduler(config.scheduler, build_cache_config(config))
    env = simpy.Environment()
    recorder = make_recorder(config, out, stream, plot)
    replica = Replica(env, scheduler, latency_model, recorder, name="0", fast_decode=fast_decode)
    arrivals = Arrivals(env, workload, replica.submit, config.frontend)
    replica.on_finish.append(arrivals.on_finish)
    if not isinstance(recorder, Recorder):  # last: a request's times are final when its row is built
        replica.on_finish.append(recorder.on_finish)
    arrivals.start()

    bar = progress_bar(arrivals) if progress else None
    with paused_gc():  # the run and its tables: see sim.replica.paused_gc
        try:
            env.run(until=config.sim.max_sim_time_s)
        finally:
            if bar is not None:
                bar.close()
        end_unfinished(scheduler, recorder.requests, env.now,
                       "the simulation ended (sim.max_sim_time_s)" if config.sim.max_sim_time_s is not None
                       else "the scheduler could not place it and nothing else was left to run")
        return finish_run(recorder, config)


def make_recorder(config: Config, out: str | Path | None = None, stream: bool | None = None, plot: bool = False):
    """An in-memory `Recorder`, or a `StreamingRecorder` when `out` is given or `stream` is true."""
    if out is None and not stream:
        return Recorder()
    from records.stream import StreamingRecorder
    from sim.cost import CostMeter, replica_costs

    return StreamingRecorder(out, slo=config.slo, plot=plot and out is not None,
                             step_meters=(CostMeter(replica_costs(config)),))


def progress_bar(arrivals: Arrivals, leave: bool = True):
    """A tqdm bar over the run's requests (None for a run too small to need one)."""
    if arrivals.num_generated < PROGRESS_MIN_REQUESTS:
        return None
    from tqdm import tqdm

    bar = arrivals.progress = tqdm(total=arrivals.num_generated, desc="simulate", unit="req", mininterval=0.5,
                                   leave=leave)
    return bar


def finish_run(recorder, config: Config, extra: dict | None = None, provisioned_s: dict | None = None,
               replicas: "pd.DataFrame | None" = None) -> SimResult:
    """The result of a run that has ended: tabulated (in memory), or closed and written (streamed).

    `extra`: summary entries a layout adds (an autoscaler's, a disaggregated cluster's KV transfer
    statistics); `provisioned_s` and `replicas`: an autoscaler's replica times and replica counts.
    """
    if isinstance(recorder, Recorder):
        result = tabulate(recorder, config, provisioned_s)
        result.summary.update(extra or {})
        result.replicas = replicas
        return result
    import json

    from records.results import _json_default, json_safe
    from sim.cost import replica_costs

    summary = recorder.close()
    for meter in recorder.step_meters:  # the cost meter: its keys follow summarize's, as in tabulate
        summary.update(meter.summary(summary["duration_s"], recorder.running.out_tokens,
                                     replica_costs(config, provisioned_s)))
    summary.update(extra or {})
    out = recorder.out_dir
    if out is not None:
        (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=2, default=_json_default) + "\n")
        (out / "config.toml").write_text(config_to_toml(config))
        if replicas is not None:
            replicas.to_csv(out / "replicas.csv", index=False)
        if recorder.wants_plot:
            recorder.plot(out / "timeline.png")
    result = SimResult(None, None, summary, config, replicas=replicas, out_dir=out)
    result.sketched_metrics = recorder.sketched_metrics
    return result


def tabulate(recorder: Recorder, config: Config, provisioned_s: dict[str, float] | None = None) -> SimResult:
    """Turn a recorder into the result tables and summary (`provisioned_s`: an autoscaler's replica times)."""
    from records.metrics import completed_output_tokens, summarize
    from records.results import pooled_itls, requests_table, steps_table
    from sim.cost import replica_costs, run_cost

    requests = requests_table(recorder.requests, recorder.replica_of)
    steps = steps_table(recorder.steps)
    summary = summarize(requests, steps, pooled_itls(recorder.requests), config.slo)
    summary.update(run_cost(replica_costs(config, provisioned_s), steps, summary["duration_s"],
                            completed_output_tokens(requests)))
    return SimResult(requests, steps, summary, config, recorder.requests)

"""What a run of 1..N replicas is built from: one path, used by `sim.runner` and `sim.cluster`.

A replica (`build_replica`) is its config's scheduler over the KV geometry of its model and
hardware (`build_cache_config`) and a latency model (`resolve_latency_model`: built, given, or
made per replica by a factory). A run has one recorder (`make_recorder`: in memory, or streamed
to files), the config's workload unless one is given (`run_workload`), an optional progress bar,
and one reason for what is left live when it stops (`end_reason`). Single replica or cluster, the
pieces are the same; only the wiring between replicas differs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import simpy

from policies import CacheConfig, ConfigError
from policies.kv_offload import offload_blocks
from records.results import Recorder
from records.stream import StreamingRecorder
from sim.cost import CostMeter, replica_costs
from sim.latency import RooflineConstants, build_latency_model
from sim.replica import Replica
from sim.speculative import build_scheduler, proposer_memory, with_proposer
from sim.workload import build_workload
from specs import bytes_per_block, kv_cache_bytes, num_cpu_blocks, num_gpu_blocks

PROGRESS_MIN_REQUESTS = 2000  # below this a run takes well under a second: no bar


def build_cache_config(config: Any) -> CacheConfig:
    """The scheduler's KV geometry: block counts from the model and hardware, knobs from `cache`."""
    spec, block_size = config.model.spec(), config.cache.block_size
    extra_params, proposer = proposer_memory(config)  # a speculative draft model's or MTP layer's
    if proposer is None or config.hardware.num_gpu_blocks is not None:
        gpu_blocks = num_gpu_blocks(spec, config.hardware, block_size, config.scheduler.max_num_batched_tokens,
                                    config.scheduler.max_num_seqs)
    else:  # its weights off the budget; each block holds its layers' KV too
        free = kv_cache_bytes(spec, config.hardware, config.scheduler.max_num_batched_tokens,
                              config.scheduler.max_num_seqs, extra_params)
        per_block = bytes_per_block(spec, config.hardware.tp, block_size) + bytes_per_block(
            proposer, config.hardware.tp, block_size)
        gpu_blocks = int(free // per_block)
        if gpu_blocks < 1:
            raise ConfigError(f"speculative.draft_model: with the proposer's weights and KV no KV block fits on "
                              f"{config.hardware.gpu}; choose a smaller draft_model or raise hardware.tp")
    return CacheConfig(block_size=block_size, num_gpu_blocks=gpu_blocks,
                       num_cpu_blocks=num_cpu_blocks(spec, config.hardware, block_size),
                       watermark=config.cache.watermark,
                       enable_prefix_caching=config.cache.enable_prefix_caching,
                       **offload_settings(config))


def offload_settings(config: Any) -> dict:
    """The KV offload tier's `CacheConfig` fields from the `cache` section: its blocks (GiB over the
    replica's GPUs, each holding its shard of a block), the host link's seconds per block (each GPU
    copies its shard over its own link, at the achieved fraction of PCIe swaps also get) and one
    block's bytes over the replica."""
    cache = config.cache
    if not cache.offload_size_gb:
        return {}
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


def resolve_latency_model(latency_model, config: Any):
    """The latency model of one replica: built from its config (None), given (anything with
    `step_time`), or made by a factory `latency_model(replica_config)` (e.g. one per TP degree)."""
    if latency_model is None:
        return build_latency_model(config)
    if not hasattr(latency_model, "step_time") and callable(latency_model):
        return latency_model(config)
    return latency_model


def build_replica(env: simpy.Environment, config: Any, recorder, name: str, latency_model=None,
                  fast_decode: bool = True) -> Replica:
    """A `Replica` for `config` (scheduler + KV geometry + latency model from that config; with
    speculative decoding, its acceptance draws and the proposer's cost: `sim.speculative`)."""
    scheduler = build_scheduler(config, build_cache_config(config), name)
    return Replica(env, scheduler, with_proposer(resolve_latency_model(latency_model, config), config), recorder,
                   name=name, fast_decode=fast_decode,
                   async_scheduling=getattr(config.scheduler, "async_scheduling", False),
                   request_timeout_s=config.workload.request_timeout_s)


def run_workload(config: Any, workload=None):
    """The workload a run feeds: the given one, else the one `config.workload` describes."""
    if workload is None:
        workload = build_workload(config.workload, config.scheduler.max_model_len)
    return workload


def make_recorder(config: Any, out: str | Path | None = None, stream: bool | None = None, plot: bool = False):
    """An in-memory `Recorder`, or a `StreamingRecorder` when `out` is given or `stream` is true."""
    if out is None and not stream:
        return Recorder()
    return StreamingRecorder(out, slo=config.slo, plot=plot and out is not None,
                             step_meters=(CostMeter(replica_costs(config)),))


def progress_bar(arrivals, leave: bool = True, total: int | None = None, progress: Any = True):
    """A bar over the run's requests (None for a run too small to need one, or `progress` false):
    `arrivals`' count (it updates the bar's total with follow-ups), or a fixed `total` when
    `arrivals` is None. `progress` true draws tqdm's; a callable makes the bar itself from the total
    (anything with tqdm's `total`, `update(n)` and `close()`: the app's shows in its page)."""
    if not progress:
        return None
    total = arrivals.num_generated if arrivals is not None else total
    if total < PROGRESS_MIN_REQUESTS:
        return None
    if callable(progress):
        bar = progress(total)
    else:
        from tqdm import tqdm  # on demand: a run without a bar never imports it (start-up)

        bar = tqdm(total=total, desc="simulate", unit="req", mininterval=0.5, leave=leave)
    if arrivals is not None:
        arrivals.progress = bar
    return bar


def end_reason(config: Any) -> str:
    """Why a request still live when the run stops was aborted."""
    return ("the simulation ended (sim.max_sim_time_s)" if config.sim.max_sim_time_s is not None
            else "the scheduler could not place it and nothing else was left to run")

"""Seeded random simulator configs for the invariant tests (`test_random_configs.py`).

`random_config(seed, idx, folder)` draws one small config (tiny-llama, short lengths, 20-300
requests) that combines the scheduler policies, budgets, preemption modes, tiny KV pools, block
sizes, prefix caching, the CPU offload tier, every arrival kind (a trace CSV is written into
`folder`), priority classes, max_model_len handling, client timeouts and concurrency caps, time
limits, replicas and routers, autoscaling, disaggregation, speculative decoding, async scheduling
and the front end. The config depends only on (seed, idx): a failing index replays alone. The draws
are those of the exploratory fuzzer that found the faults since fixed (closed-loop recursion,
disaggregated swap counts, KV held past a time limit, ...), so its seeds and indices replay here.

`features(cfg)` names what a config turns on, so that a fixed set of indices can be shown to cover
every feature; `run_capturing(config)` runs `simulate` and keeps the schedulers it built (their KV
pools are inspected after the run); `expected_requests(config)` is the open-loop workload's plan.
"""
from __future__ import annotations

import math
import random
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sim.build
from sim.runner import simulate
from sim.workload import build_workload

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "examples/tiny-llama/config.json")
ROUTERS = ("round_robin", "least_tokens", "power_of_two", "prefix_aware")
ARRIVALS = ("poisson", "gamma", "constant", "staged", "closed_loop", "trace")


def length_dist(r: random.Random, lo: int, hi: int) -> dict:
    """A length distribution between `lo` and `hi` tokens: constant, uniform (twice as likely) or lognormal."""
    kind = r.choice(["constant", "uniform", "uniform", "lognormal"])
    if kind == "constant":
        return {"kind": "constant", "value": r.randint(lo, hi)}
    if kind == "uniform":
        low = r.randint(lo, hi)
        return {"kind": "uniform", "low": low, "high": r.randint(low, hi)}
    return {"kind": "lognormal", "median": float(r.randint(lo, hi)), "sigma": round(r.uniform(0.1, 1.0), 2),
            "max": hi * 2}


def write_trace(r: random.Random, path: Path, n: int, with_priority: bool) -> str:
    """A CSV trace of `n` requests (bursts of simultaneous arrivals included), optionally with priorities."""
    t = 0.0
    rows = []
    for _ in range(n):
        t += r.expovariate(r.choice([20.0, 200.0, 1000.0])) if r.random() > 0.2 else 0.0
        row = [f"{t:.6f}", r.randint(1, 200), r.randint(1, 60)] + ([r.randint(0, 3)] if with_priority else [])
        rows.append(row)
    header = "arrival_time,prompt_tokens,output_tokens" + (",priority" if with_priority else "")
    path.write_text(header + "\n" + "\n".join(",".join(map(str, row)) for row in rows) + "\n")
    return str(path)


def _scheduler(r: random.Random) -> dict:
    policy = r.choice(["static", "continuous", "chunked", "chunked", "vllm"])
    sched: dict = {"policy": policy,
                   "max_num_batched_tokens": r.choice([4, 8, 16, 33, 64, 128, 512, 2048]),
                   "max_num_seqs": r.choice([1, 2, 3, 4, 8, 16, 64, 256]),
                   "queue": r.choice(["fcfs", "fcfs", "priority"])}
    if policy != "vllm":
        sched["preemption"] = r.choice(["recompute", "swap", "hybrid"])
        if sched["preemption"] == "hybrid":
            sched["hybrid_swap_threshold"] = r.choice([0, 2, 8, 64])
    if policy in ("chunked", "vllm") and r.random() < 0.25:
        sched["long_prefill_token_threshold"] = r.choice([1, 4, 16, 64])
    if policy == "static" and r.random() < 0.5:
        sched["static_max_batch_size"] = r.choice([1, 2, 4, 8, 32])
    if policy == "continuous" and r.random() < 0.25:
        sched["max_paddings"] = r.choice([1, 16, 256])
    if r.random() < 0.1:
        sched["async_scheduling"] = True
    if r.random() < 0.35:
        sched["max_model_len"] = r.choice([16, 40, 100, 200, 400])
    if policy in ("continuous", "vllm"):  # vLLM refuses a budget below max_num_seqs (chunked allows it)
        sched["max_num_seqs"] = min(sched["max_num_seqs"], sched["max_num_batched_tokens"])
    return sched


def _cache(r: random.Random) -> dict:
    cache: dict = {"block_size": r.choice([1, 2, 4, 8, 16, 32])}
    if r.random() < 0.2:
        cache["watermark"] = r.choice([0.01, 0.05, 0.2])
    pc = r.random()
    if pc < 0.35:
        cache["enable_prefix_caching"] = True
    elif pc < 0.6:
        cache["enable_prefix_caching"] = False
    return cache


def _workload(r: random.Random, trace_path: Path, prompt_hi: int, out_hi: int, max_model_len) -> dict:
    wl: dict = {"num_requests": r.randint(20, 300), "seed": r.randint(0, 1000),
                "prompt_len": length_dist(r, 1, prompt_hi), "output_len": length_dist(r, 1, out_hi)}
    kind = wl["kind"] = r.choice(["poisson", "poisson", "gamma", "constant", "staged", "closed_loop", "trace"])
    rate = r.choice([5.0, 50.0, 300.0, 2000.0, 20000.0])
    if kind in ("poisson", "gamma", "constant"):
        wl["rate"] = rate
        if kind == "gamma":
            wl["cv"] = r.choice([0.5, 2.0, 5.0])
    elif kind == "staged":
        wl["stages"] = [[rate, 0.05], [0.0, 0.05], [rate * 2, 0.05]] if r.random() < 0.5 else \
            [[rate / 10, 0.2], [rate, 0.1]]
        if r.random() < 0.5 and rate <= 300:
            del wl["num_requests"]
    elif kind == "closed_loop":
        wl["num_users"] = r.choice([1, 2, 8, 32])
        wl["think_time"] = r.choice([0.0, 0.0, 0.01, 0.1])
    else:
        wl["trace"] = write_trace(r, trace_path, wl.pop("num_requests"), r.random() < 0.5)
        del wl["prompt_len"], wl["output_len"]
        if r.random() < 0.3:
            wl["time_scale"] = r.choice([0.1, 3.0])
    if r.random() < 0.3 and kind != "trace":
        wl.update(num_prefix_groups=r.randint(1, 4), prefix_len=r.choice([1, 7, 16, 64, 128]),
                  users_per_group=r.randint(1, 8))
    if r.random() < 0.3 and kind != "trace":
        n = r.randint(2, 3)
        fractions = [1.0 / n] * (n - 1)
        fractions.append(1.0 - sum(fractions))
        classes = [{"name": f"c{i}", "priority": r.randint(0, 3), "fraction": fractions[i]} for i in range(n)]
        if r.random() < 0.5:
            classes[0]["output_len"] = length_dist(r, 1, 10)
        wl["classes"] = classes
    if max_model_len is not None or r.random() < 0.1:
        wl["too_long"] = r.choice(["clip", "filter", "keep"])
    if r.random() < 0.1:
        wl["request_timeout_s"] = r.choice([0.005, 0.05, 1.0])
    if r.random() < 0.1 and kind != "closed_loop":
        wl["max_concurrency"] = r.choice([1, 4, 16])
    return wl


def random_config(seed: int, idx: int, folder: Path) -> dict:
    """Config number `idx` of `seed`, as a dict for `load_config` (a trace, if drawn, is written into `folder`)."""
    r = random.Random(f"{seed}:{idx}")
    sched = _scheduler(r)
    cache = _cache(r)
    prompt_hi = r.choice([8, 32, 128, 300])
    out_hi = r.choice([1, 4, 16, 64, 100])
    wl = _workload(r, Path(folder) / f"trace-{seed}-{idx}.csv", prompt_hi, out_hi, sched.get("max_model_len"))

    # the KV pool: small, usually big enough for the largest request, sometimes not (0.3x)
    worst = min(sched.get("max_model_len") or 2048, prompt_hi * 3 + out_hi * 3 + wl.get("prefix_len", 0))
    min_blocks = max(1, math.ceil(worst / cache["block_size"]))
    hw: dict = {"gpu": "H100-SXM", "num_gpu_blocks": max(1, int(min_blocks * r.choice([0.3, 1.0, 1.1, 1.5, 3, 10])))}
    if sched.get("preemption") in ("swap", "hybrid") or r.random() < 0.2:
        hw["swap_space_gb"] = r.choice([0.0, 1e-5, 1e-4, 1e-3, 0.01])
    cfg: dict = {"model": {"name": TINY}, "hardware": hw, "scheduler": sched, "cache": cache, "workload": wl}

    if r.random() < 0.3:
        cfg["slo"] = {k: v for k, v in (("ttft_s", r.choice([None, 0.002, 0.01, 0.1])),
                                         ("tpot_s", r.choice([None, 0.0016, 0.01])),
                                         ("e2e_s", r.choice([None, 0.05, 1.0]))) if v is not None}
    if r.random() < 0.15:
        cfg["sim"] = {"max_sim_time_s": r.choice([0.01, 0.1, 0.5, 2.0])}
    layout = r.random()
    if layout < 0.2:
        cfg["cluster"] = {"num_replicas": r.randint(2, 4), "router": r.choice(ROUTERS)}
    elif layout < 0.28:
        cfg["autoscaling"] = {"enabled": True, "min_replicas": 1, "max_replicas": r.randint(1, 4),
                              "metric": r.choice(["queue", "kv_usage", "ttft_p90"]),
                              "interval_s": r.choice([0.01, 0.05, 0.5]),
                              "provisioning_delay_s": r.choice([0.0, 0.01, 0.2])}
    elif layout < 0.36:
        cfg["disaggregation"] = {"enabled": True, "prefill": {"count": r.randint(1, 2)},
                                 "decode": {"count": r.randint(1, 2)},
                                 "link": r.choice(["nvlink", "ethernet"]),
                                 "first_token": r.choice(["after_transfer", "prefill"])}
    if sched["policy"] in ("chunked", "vllm") and r.random() < 0.1:
        cfg["speculative"] = {"method": "ngram", "num_speculative_tokens": r.randint(1, 4),
                              "acceptance_rate": r.choice([0.0, 0.5, 1.0])}
    # drawn last, so that the draws above stay those of the fuzzer for a given seed and index
    if r.random() < 0.12 and sched["policy"] != "static":
        cache["enable_prefix_caching"] = True
        cache["offload_size_gb"] = r.choice([1e-5, 1e-4, 1e-3])
        cache["offload_backend"] = r.choice(["native", "lmcache"])
    if r.random() < 0.1 and not {"cluster", "autoscaling", "disaggregation"} & set(cfg):
        cfg["frontend"] = {"request_overhead_s": r.choice([0.0, 0.001]), "tokenize_s_per_token": r.choice([0.0, 1e-5]),
                           "stream_overhead_s": r.choice([0.0, 1e-4]), "engine_s_per_output": r.choice([0.0, 1e-5]),
                           "engine_s_per_step": r.choice([0.0, 1e-4])}
    if r.random() < 0.1:
        hw["tp"] = 2
    if r.random() < 0.1:
        cfg["model"]["name"] = "Llama-2-7B"
    return cfg


def features(cfg: dict) -> set[str]:
    """The features config `cfg` (from `random_config`) turns on, by name (`ALL_FEATURES` lists them)."""
    sched, cache, wl, hw = cfg["scheduler"], cfg["cache"], cfg["workload"], cfg["hardware"]
    on = {f"policy:{sched['policy']}", f"queue:{sched['queue']}", f"arrivals:{wl['kind']}"}
    on |= {f"preemption:{sched['preemption']}"} if "preemption" in sched else set()
    on |= {f"too_long:{wl['too_long']}"} if "too_long" in wl else set()
    flags = {
        "long_prefill_token_threshold": "long_prefill_token_threshold" in sched,
        "static_max_batch_size": "static_max_batch_size" in sched,
        "max_paddings": "max_paddings" in sched,
        "async_scheduling": sched.get("async_scheduling", False),
        "max_model_len": "max_model_len" in sched,
        "budget<=8": sched["max_num_batched_tokens"] <= 8,
        "max_num_seqs=1": sched["max_num_seqs"] == 1,
        "block_size=1": cache["block_size"] == 1,
        "block_size=32": cache["block_size"] == 32,
        "watermark": "watermark" in cache,
        "prefix_caching": cache.get("enable_prefix_caching", sched["policy"] == "vllm"),
        "swap_space": hw.get("swap_space_gb", 0) > 0,
        "tp=2": hw.get("tp") == 2,
        "Llama-2-7B": cfg["model"]["name"] == "Llama-2-7B",
        "trace_priorities": "trace" in wl and ",priority" in Path(wl["trace"]).read_text().split("\n", 1)[0],
        "time_scale": "time_scale" in wl,
        "prefix_groups": "num_prefix_groups" in wl,
        "classes": "classes" in wl,
        "request_timeout": "request_timeout_s" in wl,
        "max_concurrency": "max_concurrency" in wl,
        "slo": bool(cfg.get("slo")),
        "time_limit": "sim" in cfg,
        "replicas": "cluster" in cfg,
        "autoscaling": "autoscaling" in cfg,
        "disaggregation": "disaggregation" in cfg,
        "speculative": "speculative" in cfg,
        "frontend": "frontend" in cfg,
    }
    on |= {name for name, is_on in flags.items() if is_on}
    on |= {f"router:{cfg['cluster']['router']}"} if "cluster" in cfg else set()
    on |= {f"autoscaling:{cfg['autoscaling']['metric']}"} if "autoscaling" in cfg else set()
    on |= {f"first_token:{cfg['disaggregation']['first_token']}"} if "disaggregation" in cfg else set()
    on |= {f"offload:{cache['offload_backend']}"} if "offload_backend" in cache else set()
    return on


ALL_FEATURES = frozenset(
    {f"policy:{p}" for p in ("static", "continuous", "chunked", "vllm")}
    | {"queue:fcfs", "queue:priority"}
    | {f"preemption:{p}" for p in ("recompute", "swap", "hybrid")}
    | {f"too_long:{t}" for t in ("clip", "filter", "keep")}
    | {f"arrivals:{k}" for k in ARRIVALS}
    | {f"router:{x}" for x in ROUTERS}
    | {f"autoscaling:{m}" for m in ("queue", "kv_usage", "ttft_p90")}
    | {"first_token:after_transfer", "first_token:prefill", "offload:native", "offload:lmcache"}
    | {"long_prefill_token_threshold", "static_max_batch_size", "max_paddings", "async_scheduling", "max_model_len",
       "budget<=8", "max_num_seqs=1", "block_size=1", "block_size=32", "watermark", "prefix_caching", "swap_space",
       "tp=2", "Llama-2-7B", "trace_priorities", "time_scale", "prefix_groups", "classes", "request_timeout",
       "max_concurrency", "slo", "time_limit", "replicas", "autoscaling", "disaggregation", "speculative",
       "frontend"})


class RunTooLong(Exception):
    """A run went past its wall-clock allowance (a hang, or a config far bigger than intended)."""


@contextmanager
def time_allowance(seconds: int):
    """Raise `RunTooLong` in the block after `seconds` of wall time (SIGALRM: the main thread, POSIX)."""
    def alarm(signum, frame):
        raise RunTooLong(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Run:
    """One simulated config: its dict, the loaded config, the result and the schedulers built for it."""
    cfg: dict
    config: Any
    result: Any
    schedulers: list  # (replica name, scheduler), every replica of the run, retired ones included


def run_capturing(cfg: dict, config, **simulate_kwargs) -> Run:
    """`simulate(config, **simulate_kwargs)`, keeping every scheduler that `sim.build` builds for it."""
    built: list = []
    original = sim.build.build_scheduler

    def build_and_keep(replica_config, cache, name="0"):
        scheduler = original(replica_config, cache, name)
        built.append((name, scheduler))
        return scheduler

    sim.build.build_scheduler = build_and_keep
    try:
        result = simulate(config, **simulate_kwargs)
    finally:
        sim.build.build_scheduler = original
    return Run(cfg, config, result, built)


def expected_requests(config) -> dict | None:
    """The open-loop workload's requests {req_id: (arrival, prompt, max_tokens, priority)}; None for a
    closed loop (its requests depend on the run). Behind `max_concurrency`, the arrivals are the due
    times (the client sends later when its cap is full)."""
    if config.workload.kind == "closed_loop":
        return None
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    workload = getattr(workload, "inner", workload)
    return {r.req_id: (r.arrival_time, r.num_prompt_tokens, r.max_tokens, r.priority) for r in workload.start()}

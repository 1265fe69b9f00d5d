"""The engine's own steps timed for a calibration: the calibration workload (`measure_engine_steps`),
the after-prefill probe (`measure_after_prefill`), their fit into a profile (`add_engine_fit`, by
`calibrate.engine_steps`) and the drift between the halves around a bracketed run (`bracket_drift_pct`)."""
from __future__ import annotations

import gc
import time

import numpy as np
import torch
from tqdm import tqdm

from calibrate.engine_steps import (AFTER_PREFILL_CYCLE, AFTER_PREFILL_DECODERS, AFTER_PREFILL_SIZES, ENGINE_GROUPS,
                                    ENGINE_POLICIES, IDLE_GAPS, fit_engine_steps, interleave, split_after_idle)
from calibrate.op_bench import clock_for
from gpu_backend.engine import Engine, EngineConfig
from policies import BatchPlan, CacheConfig, Request, SchedulerConfig
from sim.latency.curves import PiecewiseLinear
from sim.latency.profile import OpProfile, Profile
from sim.latency.profiled import ProfiledLatencyModel


def measure_engine_steps(bench, groups=ENGINE_GROUPS, policies=ENGINE_POLICIES, max_prompt: int = 1000,
                         max_output: int = 40, progress: bool = True, seed: int = 0,
                         probe=None) -> list[tuple[str, BatchPlan, float, float, float]]:
    """[(configuration, plan, seconds, after_idle, at)] of every step of the calibration workload
    (module docstring: `calibrate.engine_steps`); after_idle is the idle pause (seconds) before a
    group's first step, False for every other step; at is `time.perf_counter()` at the step's end.
    `probe` (a `calibrate.speed_probe.SpeedProbe`) is read after a step, outside its timing."""
    mc = bench.config
    max_len = mc.max_position_embeddings
    max_prompt = max(4, min(max_prompt, max_len // 2))
    clock, _ = clock_for(bench.device)
    rng = np.random.default_rng(seed + 11)
    out: list[tuple[str, BatchPlan, float, float, float]] = []
    max_seqs = max(groups)
    blocks = max_seqs * -(-(max_prompt + max_output) // bench.block_size) + 16
    # (name, engine, [record steps, next step follows the pause]): one engine per scheduler
    # configuration, all on the same model weights
    runs = []
    for policy, budget in policies:
        name = f"{policy}-{budget or max_len}"
        cfg = EngineConfig(model=mc, scheduler=SchedulerConfig(
            policy=policy, max_num_batched_tokens=budget or max_len, max_num_seqs=max_seqs, max_model_len=max_len),
            cache=CacheConfig(block_size=bench.block_size, num_gpu_blocks=blocks), dtype=dtype_name(bench.dtype))
        engine = Engine(cfg, bench.device, model=bench.model)
        # the engine's steps on the ops' clock: a step's duration is its whole iteration (`Engine._step`)
        engine.clock = engine.runner.clock = clock
        engine._t0 = clock()
        keep = [False, False]

        def hook(plan, result, engine=engine, name=name, keep=keep):
            if keep[0]:
                out.append((name, plan, engine.last_step.duration, keep[1], time.perf_counter()))
                keep[1] = False  # only a group's first step follows the idle pause
            if probe is not None:  # after a step, never between an idle pause and the step after it
                probe.maybe_read()

        engine.step_hooks.append(hook)
        runs.append((name, engine, keep))
    with torch.inference_mode(), tqdm(total=len(policies) * len(groups), desc="calibrate engine steps", unit="group",
                                      disable=not progress, mininterval=0.5) as bar:
        for name, engine, keep in runs:
            # a throwaway request first: first calls of each shape pay allocations the engine's
            # steady state does not
            engine.add_request(Request(f"{name}-warm", 0.0, 40, 4, prompt_token_ids=[5] * 40))
            engine.run_until_done()
            keep[0] = True
        # group by group, each through every configuration in turn: a stretch of the machine running
        # slower (other processes, other tenants of a shared host) then lands on every configuration
        # alike instead of on one, which the fit would read as that configuration's own cost; and small
        # and large groups alternate (`interleave`), so that it lands on small and large steps alike
        for g, n in enumerate(interleave(groups)):
            group = []
            for i in range(min(n, max_seqs)):
                p = int(np.exp(rng.uniform(np.log(4), np.log(max_prompt))))
                group.append((p, int(rng.integers(2, max_output + 1)),
                              rng.integers(3, min(mc.vocab_size, 200), p).tolist()))
            for k, (name, engine, keep) in enumerate(runs):
                # the engine sits idle first, as a server between arrivals does: its next step finds
                # cold caches (measured: 11-16% over the model on a validation run's post-idle steps),
                # the colder the longer it slept: the pauses cycle through IDLE_GAPS
                gap = IDLE_GAPS[(g + k) % len(IDLE_GAPS)]
                time.sleep(gap)
                keep[1] = gap
                for i, (p, o, ids) in enumerate(group):
                    engine.add_request(Request(f"{name}-{g}-{i}", 0.0, p, o, prompt_token_ids=list(ids)))
                engine.run_until_done()
                bar.update(1)
    return out


def add_engine_fit(profile: Profile, steps: list) -> dict:
    """Fit the host overhead and in-step scales of the engine's own `steps` into `profile`."""
    fit = fit_engine_steps(ProfiledLatencyModel(profile), steps)
    p = fit["params"]
    top = float(max(fit["max_num_seqs"], 2))
    source = "measured: engine steps of the calibration workload (calibrate.engine_steps)"
    # a residual's own relative error is meaningless (a small difference of two larger numbers):
    # the error that matters is the whole step's, in-sample and per configuration held out
    st = fit["stats"]
    step_error = {"median_abs_pct": st["median_abs_pct"], "max_abs_pct": st["max_abs_pct"],
                  "loo_median_abs_pct": st["holdout_median_abs_pct"], "loo_max_abs_pct": st["holdout_max_abs_pct"],
                  "of": "whole engine steps (loo: each scheduler configuration predicted from the others)"}
    # a negative per-step constant is the in-step saving on the ops' floor (calibrate.engine_steps._solve):
    # the overhead curve keeps what is >= 0, `meta.in_step_offset_s` the rest
    a = max(p["step_s"], 0.0)
    step = PiecewiseLinear((1.0, top), (a + p["per_seq_s"], a + p["per_seq_s"] * top))
    profile.ops["step_overhead"] = OpProfile("step_overhead", ("num_seqs",), step, fit["step_points"],
                                             dict(step_error), source)
    pre = PiecewiseLinear((1.0, 2.0), (p["per_prefill_seq_s"], 2 * p["per_prefill_seq_s"]))
    profile.ops["prefill_overhead"] = OpProfile("prefill_overhead", ("num_seqs",), pre, fit["prefill_points"],
                                                dict(step_error), source)
    profile.meta["in_step_scale"] = {k: round(p[k], 4) for k in ("dense", "attn_prefill", "attn_decode")}
    profile.meta["in_step_offset_s"] = round(min(p["step_s"], 0.0), 7)
    profile.meta["after_idle_s"] = round(fit["after_idle_s"], 7)
    if fit.get("after_idle_curve"):
        profile.meta["after_idle_curve"] = fit["after_idle_curve"]
    profile.meta["engine_step_fit"] = {**fit["stats"], "params": {k: round(v, 7) for k, v in p.items()}}
    return fit


def measure_after_prefill(bench, repeats: int, progress: bool = True) -> list[tuple[int, int, float]]:
    """[(prefill tokens, k, seconds)] of the after-prefill probe (`calibrate.engine_steps.after_prefill_curve`):
    `AFTER_PREFILL_DECODERS` sequences decode while, every `AFTER_PREFILL_CYCLE` steps, a request of one
    of `AFTER_PREFILL_SIZES` tokens (those that fit the model) arrives and ends with its prefill, so
    the decode batch after it is the one before it: what changes is what the prefill left in the
    caches. k is 0 for the prefill step, then counts the decode-only steps after it. The sizes take
    turns (`repeats` cycles each), so a slow stretch of the machine lands on all of them alike."""
    mc = bench.config
    max_len = mc.max_position_embeddings
    sizes = [n for n in AFTER_PREFILL_SIZES if n <= max_len // 2]
    clock, _ = clock_for(bench.device)
    prompt, outputs = 32, (len(sizes) + 1) * AFTER_PREFILL_CYCLE + 2
    cfg = EngineConfig(model=mc, scheduler=SchedulerConfig(
        policy="continuous", max_num_batched_tokens=max_len, max_num_seqs=AFTER_PREFILL_DECODERS + 1,
        max_model_len=max_len), cache=CacheConfig(block_size=bench.block_size, num_gpu_blocks=(
            AFTER_PREFILL_DECODERS * -(-(prompt + outputs) // bench.block_size) + -(-max(sizes) // bench.block_size) + 4)),
        dtype=dtype_name(bench.dtype))
    engine = Engine(cfg, bench.device, model=bench.model)
    engine.clock = engine.runner.clock = clock  # the ops' clock; a step is its whole iteration
    engine._t0 = clock()
    rng = np.random.default_rng(17)
    out: list[tuple[int, int, float]] = []
    state = {"keep": False, "size": 0, "k": 0}

    def hook(plan, result):
        if plan.num_prefill_tokens:
            state["size"], state["k"] = plan.num_prefill_tokens, 0
        elif plan.num_decode_tokens:
            state["k"] += 1
        if state["keep"]:
            out.append((state["size"], state["k"], engine.last_step.duration))

    engine.step_hooks.append(hook)
    with torch.inference_mode(), tqdm(total=repeats + 1, desc="calibrate after-prefill steps", unit="round",
                                      disable=not progress, mininterval=0.5) as bar:
        for r in range(repeats + 1):  # round 0 pays the first calls of each shape: not kept
            for i in range(AFTER_PREFILL_DECODERS):
                engine.add_request(Request(f"ap-{r}-d{i}", 0.0, prompt, outputs, ignore_eos=True,
                                           prompt_token_ids=rng.integers(3, min(mc.vocab_size, 200), prompt).tolist()))
            for _ in range(AFTER_PREFILL_CYCLE):  # the decoders' own prefill settles first
                engine.step()
            state["keep"] = r > 0
            for j, n in enumerate(sizes[r % len(sizes):] + sizes[:r % len(sizes)]):
                engine.add_request(Request(f"ap-{r}-p{j}", 0.0, n, 1, ignore_eos=True,
                                           prompt_token_ids=rng.integers(3, min(mc.vocab_size, 200), n).tolist()))
                for _ in range(AFTER_PREFILL_CYCLE):
                    engine.step()
            state["keep"] = False
            engine.run_until_done()
            bar.update(1)
    return out


def settle() -> None:
    """Collect, then freeze, the objects alive now, before a timed engine phase.

    Python's collector walks every tracked object in its oldest generation, so the engine's steps
    get slower as earlier phases leave objects behind (the calibration's records, a bracketed run's
    plans and requests), which a bracketed run would read as the machine drifting. Frozen objects
    are skipped until `gc.unfreeze()` (at the end of `calibrate`), as a serving engine freezes its
    start-up heap.
    """
    gc.collect()
    gc.freeze()


def bracket_drift_pct(profile: Profile, before: list, after: list) -> float | None:
    """How much slower (%) the engine's calibration steps ran after a bracketed run than before it.

    Each half's median of measured / predicted (the fitted profile, steps after an idle pause left
    out). The profile describes the average of the two halves; a run between them met a machine
    somewhere in between, so a large value says the run's per-step comparison is dominated by the
    machine changing speed, not by the model.
    """
    model = ProfiledLatencyModel(profile)

    def level(steps):
        r = [t / model.step_time(p) for _, p, t in split_after_idle(steps)[0]]
        return float(np.median(r)) if r else None

    a, b = level(before), level(after)
    return None if a is None or b is None else round((b / a - 1.0) * 100.0, 1)


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]

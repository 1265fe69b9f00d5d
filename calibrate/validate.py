"""`servesim validate`: predict a workload with the simulator, run it on the real engine, compare.

1. Calibrate the engine's ops on the device (or load `--profile`), giving a `ProfiledLatencyModel`.
2. Run the config's workload on the real `gpu_backend.Engine` in real time, recording every step's
   plan and its measured time (model runner execution + the scheduler's schedule/update); on one
   CPU thread the clock leaves out the thread's waits for a core (`engine_clock`).
   When calibrating, this run happens between the two halves of the calibration's engine steps
   (`calibrate(between=...)`), so that a drifting machine is profiled in the run's conditions.
3. Simulate the same config and workload with the profiled model (same scheduler policy, same KV
   block counts).
4. Report: per-step error, matching steps by composition (each measured step's own plan is
   re-predicted, so the comparison does not depend on the two runs scheduling identically);
   TTFT/TPOT/ITL/E2E (mean, p50, p99) and throughput, predicted vs measured; CDF and step-time
   plots and an HTML page. The files (`validation.json`, `steps.csv`, `details.json`, `engine/`,
   `sim/`, ...) are described in docs/formats.md ("Reports").
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.cpu_cache import CpuCache, last_level_cache, weight_bytes
from calibrate.fit_checks import check_profile
from calibrate.model_dims import resolve_model
from calibrate.validation_page import write_html, write_plots
from gpu_backend.clock import ExcludingClock, UncontendedClock
from policies import Request
from policies.config import check_int
from records.files import write_json
from records.results import pooled_itls
from sim.config import load_config
from sim.latency.base import NO_PREFILL_YET, LatencyModel, after_prefill_step
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel
from sim.notes import with_notes
from sim.runner import build_cache_config, simulate
from sim.workload import build_workload

#: a pause between two engine steps longer than this is an idle wait (see `run_engine`)
IDLE_GAP_S = 1e-3
LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
STATS = ("mean", "p50", "p99")
THROUGHPUT = ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s")


def _cmp(predicted, measured) -> dict:
    p = None if predicted is None else float(predicted)
    m = None if measured is None else float(measured)
    err = abs(p - m) / abs(m) * 100.0 if p is not None and m not in (None, 0.0) else None
    return {"predicted": p, "measured": m, "abs_pct_error": err}


def compare(sim_summary: dict, engine_summary: dict, step_errors: np.ndarray) -> dict:
    """The `validation.json` structure (docs/formats.md, "Reports") from two summaries and per-step errors."""
    metrics = {}
    for name in LATENCY_METRICS:
        ps, ms = sim_summary.get(name) or {}, engine_summary.get(name) or {}
        metrics[name] = {s: _cmp(ps.get(s), ms.get(s)) for s in STATS}
    pt, mt = sim_summary.get("throughput") or {}, engine_summary.get("throughput") or {}
    metrics["throughput"] = {k: _cmp(pt.get(k), mt.get(k)) for k in THROUGHPUT}
    err = np.asarray(step_errors, dtype=float)
    steps = {"median": float(np.median(err)) if err.size else None,
             "p90": float(np.percentile(err, 90)) if err.size else None}
    return {"step_time_abs_pct_error": steps, "metrics": metrics}


class ScaledLatency(LatencyModel):
    """`inner`'s step times (and after-idle cost) times `factor`: how the means move with the steps."""

    def __init__(self, inner, factor: float) -> None:
        self.inner, self.factor = inner, factor
        self.after_idle_s = factor * float(getattr(inner, "after_idle_s", 0.0) or 0.0)
        cost = getattr(inner, "after_idle_cost", None)
        if cost is not None:
            self.after_idle_cost = lambda idle_s: factor * cost(idle_s)
        self.has_after_prefill = getattr(inner, "has_after_prefill", False)
        if self.has_after_prefill:  # the extra seconds are the machine's too: scaled alike
            self.after_prefill_cost = lambda k, n, seconds: factor * inner.after_prefill_cost(k, n, seconds / factor)

    def step_time(self, plan) -> float:
        return self.factor * self.inner.step_time(plan)

    def is_pure(self) -> bool:
        return self.inner.is_pure()


#: the step-time change (+-) `conditioning` simulates
SENSITIVITY_STEP = 0.05


def conditioning(config, lm, predicted) -> dict:
    """How much the workload's means amplify a step-time error, and how busy it keeps the engine.

    `amplification` {metric: % change of the mean per % change of every step time}, from two more
    simulations with every step +-5% (`SENSITIVITY_STEP`): near saturation queueing turns a 2% step
    error into a 10% TTFT error, and a mean error there says little about the model; `utilization`:
    the predicted run's busy time over its span (first arrival to last finish)."""
    out = {}
    runs = [simulate(config, latency_model=ScaledLatency(lm, 1.0 + d)).summary for d in (SENSITIVITY_STEP, -SENSITIVITY_STEP)]
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        base = (predicted.summary.get(name) or {}).get("mean")
        hi, lo = ((r.get(name) or {}).get("mean") for r in runs)
        out[name] = (round(float((hi - lo) / base / (2 * SENSITIVITY_STEP)), 2)
                     if None not in (base, hi, lo) and base > 0 else None)
    steps, reqs = predicted.steps, predicted.requests
    span = float(reqs.finish_time.max() - reqs.arrival_time.min()) if len(reqs) else 0.0
    util = float(steps.duration.sum()) / span if span > 0 and len(steps) else None
    return {"amplification": out, "utilization": None if util is None else round(util, 3)}


def engine_config_for(config, device: str):
    """The engine's config for a sim config; the simulator must use the same KV block counts."""
    from calibrate.engine_config import engine_config_from_sim

    return engine_config_from_sim(config, device)


def engine_clock(device: str) -> str:
    """The engine clock a validation run uses on `device` (`gpu_backend.clock`).

    On a single-threaded CPU run, "uncontended": the profile is measured in the thread's CPU time
    (`calibrate.op_bench.clock_for`), so the run it is compared with leaves out the time its thread
    waited for a core too; on a shared machine that wait was up to half of every step for minutes at a
    time, and it compounds into queueing the profile cannot know of. Otherwise the wall clock."""
    import torch

    if torch.device(device).type == "cpu" and torch.get_num_threads() == 1 and UncontendedClock.available():
        return "uncontended"
    return "wall"


def run_engine(config, device: str, progress: bool = True, model=None, clock: str | None = None, probe=None):
    """Run the config's workload on the engine (on `model` when given; its clock `clock`, default
    `engine_clock(device)`); returns (engine, EngineResult, [(plan, measured seconds, CPU seconds,
    after_idle, wall seconds, at)]): measured on the engine clock, wall including any wait for a core;
    after_idle is the idle seconds before a step that followed an idle wait, else 0; at is
    `time.perf_counter()` at the step's end. `probe` (a `calibrate.speed_probe.SpeedProbe` on the same
    model) is read after steps; it and this function's own bookkeeping are left out of the engine clock
    (`gpu_backend.clock.ExcludingClock`)."""
    from calibrate.engine_config import build_engine

    engine = build_engine(config, device, model=model, clock=clock or engine_clock(device))
    # this function's own bookkeeping after each step, and the probe, run outside the engine's time:
    # a server has neither, and the replay's arrivals should meet the engine as they would there
    engine.clock = engine.runner.clock = ExcludingClock(engine.clock)
    records = []
    at_entry = [0.0, 0.0]  # thread CPU and wall time when the current iteration began
    prev_end = [None]
    step = engine._step

    # the iteration's CPU time on this thread: a contention-free diagnostic. The engine's own
    # arguments pass through (run_workload gives its time limit, `until`)
    def timed_step(*args, **kwargs):
        at_entry[0], at_entry[1] = time.thread_time(), time.perf_counter()
        return step(*args, **kwargs)

    engine._step = timed_step

    def hook(plan, result):
        with engine.clock.excluded():
            rec = engine.last_step  # the whole iteration on the engine clock (`Engine._step`)
            cpu, wall = time.thread_time() - at_entry[0], time.perf_counter() - at_entry[1]
            # the engine sat idle before this step (waiting for an arrival) when more than a millisecond
            # passed between the previous step's end and this one's start: its caches went cold, which a
            # profile's `after_idle_cost(idle seconds)` charges (the simulator's replica adds it after an
            # idle wait)
            gap = rec.start - prev_end[0] if prev_end[0] is not None else 0.0
            idle = gap if gap > IDLE_GAP_S else 0.0
            prev_end[0] = rec.start + rec.duration
            records.append((plan, rec.duration, cpu, idle, wall, time.perf_counter()))
            if probe is not None:  # after a step: never between an idle wait and the step after it
                probe.maybe_read()

    engine.step_hooks.append(hook)
    # warm the engine up on a throwaway request so first-call costs do not land in step 1
    _warm_up(engine)
    records.clear()
    prev_end[0] = None
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    result = engine.run_workload(workload, progress=progress)
    return engine, result, records


def _warm_up(engine) -> None:

    for i, n in enumerate((40, 8)):
        engine.add_request(Request(f"warmup{i}", engine.now(), n, 4, prompt_token_ids=[5] * n))
    engine.run_until_done()
    engine.recorder.requests.clear()
    engine.recorder.steps.clear()
    engine.num_steps = 0


def validate(config_path: str | Path, device: str = "cpu", profile: str | Path | None = None,
             out_dir: str | Path | None = None, quick: bool | str = True, overrides=(), progress: bool = True,
             threads: int | None = 1, speed_probe: bool = True) -> dict:
    """Run the whole check (see module docstring); returns the `validation.json` dict.

    `quick`: the calibration grid's mode (`calibrate.grid.Grid.make`); the grid covers the config's
    `max_model_len`. The calibration's checks of its own fits (`calibrate.fit_checks`) go to
    details.json (`calibration_warnings`), the report page, and as `CalibrationWarning`s."""
    return run_validation(config_path, device, profile, out_dir, quick, overrides, progress, threads,
                          speed_probe=speed_probe)[0]


def run_validation(config_path: str | Path, device: str = "cpu", profile: str | Path | None = None,
                   out_dir: str | Path | None = None, quick: bool | str = True, overrides=(), progress: bool = True,
                   threads: int | None = 1, notes=(), speed_probe: bool = True) -> tuple[dict, dict]:
    """`validate`, returning (the `validation.json` dict, the `details.json` dict); `notes` join the
    config's (`sim.notes`), kept in both runs' config.toml.

    `speed_probe`: read the machine's speed through the calibration and the run
    (`calibrate.speed_probe`): the calibration divides it out of its timings, and details.json says
    how fast the machine ran during the run (`speed_probe`). The headline comparison is at the speed
    `speed_basis` picks: the run's (each step's prediction times the speed around it, the means
    simulated at the run's median speed) where the probe follows the machine, else the calibration's;
    details.json keeps both (`at_run_speed`, `at_calibration_speed`) and why (`speed_basis`)."""
    import torch

    from calibrate.bench import calibrate
    from calibrate.op_bench import clock_for, device_name
    from calibrate.speed_probe import PROBE_PLAN, SpeedProbe
    from gpu_backend.engine import build_engine_model, check_device, resolve_dtype

    device = str(check_device(device))  # before anything is built there (a typo, or cuda without one)
    check_int("threads", threads, 1, allow_none=True)

    if threads is not None and torch.device(device).type == "cpu":
        torch.set_num_threads(threads)
    config = with_notes(load_config(config_path, list(overrides)), notes)
    model_path = str(config.model.name)
    engine_cfg, _ = engine_config_for(config, device)
    # the simulator must see the engine's KV geometry (block counts derive from dtype and memory)
    hw = dataclasses.replace(config.hardware, num_gpu_blocks=engine_cfg.cache.num_gpu_blocks)
    config = dataclasses.replace(config, hardware=hw)
    sim_cache = build_cache_config(config)
    if (sim_cache.num_gpu_blocks, sim_cache.num_cpu_blocks) != (engine_cfg.cache.num_gpu_blocks,
                                                                engine_cfg.cache.num_cpu_blocks):
        raise ValueError(f"hardware: the simulator would use {sim_cache.num_gpu_blocks}/{sim_cache.num_cpu_blocks} "
                         f"GPU/CPU blocks but the engine {engine_cfg.cache.num_gpu_blocks}/"
                         f"{engine_cfg.cache.num_cpu_blocks}; set model.dtype to the engine's dtype "
                         f"({engine_cfg.dtype}) and hardware.num_gpu_blocks")
    prof = None
    mismatches: list[str] = []  # how the given profile's machine differs from this one (details.json)
    if profile is not None:  # checked before the engine runs: a wrong profile must not cost the whole run
        prof = Profile.load(profile)
        prof.check_model(resolve_model(model_path, 1, prof.model["dtype"]))
        dtype = str(resolve_dtype(engine_cfg.dtype, device)).removeprefix("torch.")
        num_threads = torch.get_num_threads() if torch.device(device).type == "cpu" else None
        mismatches = profile_mismatches(prof.meta, device_name(torch.device(device)), dtype, num_threads)
        for line in mismatches:
            print(f"validate: warning: {line}", file=sys.stderr)
    run: dict = {}
    # the profile is measured on the very model the engine runs: two models of one process ran CPU
    # steps up to 18% apart (calibrate's `model`); the speed probe runs it too
    model = build_engine_model(engine_cfg, device)
    probe = SpeedProbe(model, device, clock=clock_for(torch.device(device))[0]) if speed_probe else None
    cache = last_level_cache() if torch.device(device).type == "cpu" else None

    def run_measured_engine() -> None:
        run["load_before"] = os.getloadavg()[0]
        start = time.perf_counter()
        run["engine"], run["measured"], run["records"] = run_engine(config, device, progress, model, probe=probe)
        run["window"] = (start, time.perf_counter())
        run["load_after"] = os.getloadavg()[0]

    t0 = time.perf_counter()
    reference = None
    if prof is not None:
        t_cal = time.perf_counter() - t0
        run_measured_engine()
        made = prof.meta.get("speed_probe") or {}
        plan = made.get("plan") or {}
        if (plan.get("decodes"), plan.get("kv_len"), plan.get("prefill_chunk")) == PROBE_PLAN:
            reference = made.get("reference_s")  # the profile's reference speed, read by the same probe
    else:
        # the calibration brackets the engine run (half its engine steps before, half after): on a
        # machine whose speed drifts the profile then sees the run's conditions on average; the
        # calibration workload and the validated one still share nothing
        prof = calibrate(model_path, device, quick=quick, progress=progress, model=model,
                         between=run_measured_engine, max_len=config.scheduler.max_model_len,
                         probe=probe or False)
        t_cal = prof.meta["calibration_s"]
        reference = (prof.meta.get("speed_probe") or {}).get("reference_s")
    lm = ProfiledLatencyModel(prof, model=resolve_model(model_path, 1, prof.model["dtype"]),
                              block_size=config.cache.block_size)
    engine, measured, records = run["engine"], run["measured"], run["records"]
    load_before, load_after = run["load_before"], run["load_after"]
    predicted = simulate(config, latency_model=lm)
    cond = conditioning(config, lm, predicted)
    # the machine's speed around each step against the profile's reference (1.0 without a probe)
    speed = (probe.speed_at([r[5] for r in records], reference) if probe is not None and reference
             else np.ones(len(records)))
    run_speed = float(np.median(speed)) if len(speed) else 1.0

    weights = weight_bytes(model)
    basis = speed_basis(device, probe is not None and bool(reference), cache, weights)
    at_run = basis["basis"] == "run"  # validation.json, steps.csv, sim/ and the page at the run's speed

    rows = []
    since_prefill = NO_PREFILL_YET  # decode-only steps since the last one that carried prefill tokens
    for (plan, m, c, idle, w, _), f in zip(records, speed):
        since_prefill, p = after_prefill_step(plan, since_prefill, lm.after_prefill_cost, lm.step_time(plan))  # as the replica
        p += lm.after_idle_cost(idle) if idle else 0.0
        head = p * f if at_run else p  # the headline's prediction
        row = {"step_id": plan.step_id, "num_seqs": plan.num_seqs, "num_prefill_tokens": plan.num_prefill_tokens,
               "num_decode_tokens": plan.num_decode_tokens, "num_swap_blocks":
               len(plan.swap_out_blocks) + len(plan.swap_in_blocks),
               # KV tokens the step's sequences attend to before their new ones (long-context
               # decode is where the attention curves are least certain)
               "num_context_tokens": sum(s.num_computed_tokens for s in plan.seqs if not s.is_padding),
               "measured_s": m, "measured_wall_s": w, "predicted_s": head, "abs_pct_error": abs(head - m) / m * 100.0,
               "measured_cpu_s": c, "abs_pct_error_vs_cpu": abs(head - c) / c * 100.0 if c > 0 else float("nan"),
               "after_idle": bool(idle), "idle_s": idle, "speed": float(f),
               "abs_pct_error_at_speed": abs(p * f - m) / m * 100.0}
        if at_run:  # the calibration's prediction beside the headline's
            row.update(predicted_at_calibration_s=p, abs_pct_error_at_calibration_speed=abs(p - m) / m * 100.0)
        rows.append(row)
    steps = pd.DataFrame(rows)

    def step_errors(column: str):
        return steps[column].to_numpy() if len(steps) else []

    report = compare(predicted.summary, measured.summary,
                     step_errors("abs_pct_error_at_calibration_speed" if at_run else "abs_pct_error"))
    at_calibration = mean_errors(report)
    # each step predicted at the speed around it, the run simulated at its median speed
    at_speed = None
    if probe is not None and reference:
        scaled = simulate(config, latency_model=ScaledLatency(lm, run_speed))
        c = compare(scaled.summary, measured.summary, step_errors("abs_pct_error_at_speed"))
        at_speed = mean_errors(c)
        if at_run:
            report, predicted = c, scaled

    details = {"config": str(config_path), "device": device, "profile_meta": prof.meta,
               "profile_path": str(profile) if profile else None, "calibration_s": round(t_cal, 1),
               # a profile measured on another device, dtype or thread count: its op times are not
               # this machine's, and the errors measure that as well (said on the page and in the app)
               "profile_mismatches": mismatches,
               "num_steps": len(steps), "torch_threads": torch.get_num_threads(),
               # the engine's clock (`engine_clock`), and the share of the run's step time its thread
               # spent waiting for a core (left out of every measured time on the uncontended clock)
               "engine_clock": engine.config.clock,
               "waited_for_core_fraction": float(1.0 - steps.measured_s.sum() / steps.measured_wall_s.sum())
               if len(steps) and engine.config.clock != "wall" else None,
               "load_avg_1m": [round(load_before, 2), round(load_after, 2)],  # before/after the engine run
               # the same per-step comparison against the engine thread's CPU time: separates model
               # error from time spent waiting for a core on a shared machine
               "step_time_abs_pct_error_vs_cpu_time": {
                   "median": float(steps.abs_pct_error_vs_cpu.median()) if len(steps) else None,
                   "p90": float(steps.abs_pct_error_vs_cpu.quantile(0.9)) if len(steps) else None},
               # each step's signed error minus the median of its 51 neighbours': what is left when
               # the machine's speed drifting over the run (other tenants of a shared host) is taken out
               "step_time_abs_pct_error_detrended": detrended_error(steps),
               # the machine's speed change across the run, seen by the calibration's engine steps
               # before and after it (calibrate.engine_bench.bracket_drift_pct); None with --profile
               "bracket_drift_pct": prof.meta.get("bracket_drift_pct") if profile is None else None,
               "wall_over_cpu_median": float((steps.measured_wall_s / steps.measured_cpu_s).median()) if len(steps)
               else None,
               "missing_ops": list(lm.missing_ops),
               # the machine's speed through the run against the calibration's reference
               # (`calibrate.speed_probe`), and the comparison with the predictions scaled by it
               "speed_probe": (probe.summary(reference, *run["window"]) if probe is not None else None),
               "at_run_speed": at_speed,
               # which speed validation.json's figures are at and why (`speed_basis`), and the comparison
               # at the calibration's speed (the headline where the basis is the calibration)
               "speed_basis": {**basis, "run_speed": run_speed},
               "at_calibration_speed": at_calibration,
               # how ill-conditioned the means are on this workload (`conditioning`)
               "mean_amplification": cond["amplification"], "predicted_utilization": cond["utilization"],
               # the calibration's checks of its own fits: a clamped scale or a missed held-out check
               # (a loaded profile made before the checks existed is checked now)
               "calibration_warnings": calibration_warnings(prof.meta),
               "engine_step_fit": {k: (prof.meta.get("engine_step_fit") or {}).get(k) for k in
                                   ("median_abs_pct", "holdout_median_abs_pct", "holdout_p90_abs_pct",
                                    "holdout_median_abs_pct_by_configuration")},
               "in_step_scale": prof.meta.get("in_step_scale"),
               # whether the model's weights fit the CPU's last-level cache (`calibrate.cpu_cache`)
               "last_level_cache": cache.as_dict(weights) if cache is not None else None,
               "fit_error": {n: op.fit_error for n, op in prof.ops.items()},
               "engine_summary": measured.summary, "sim_summary": predicted.summary}
    if out_dir is not None:

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "validation.json", report)
        steps.to_csv(out / "steps.csv", index=False)
        measured.save(out / "engine", plot=False)
        predicted.save(out / "sim", plot=False)
        write_json(out / "details.json", details, default=str)
        if profile is None:
            prof.save(out / "profile.json")
        dists = {label: {"ttft_s": r.requests["ttft_s"], "tpot_s": r.requests["tpot_s"],
                         "itl_s": pooled_itls(r.raw_requests), "e2e_s": r.requests["e2e_s"]}
                 for label, r in (("predicted", predicted), ("measured", measured))}
        plots = write_plots(out, steps, dists)
        write_html(out, report, config_path, prof, details, plots)
    return report, details


def profile_mismatches(meta: dict, device: str, dtype: str, threads: int | None = None) -> list[str]:
    """How a profile's machine (its `meta`) differs from this run's: the device (`device`, as
    `calibrate.op_bench.device_name` writes it), the dtype, the torch thread count (`threads`, on a
    CPU; None: not compared). One line each, for a warning: op times differ with every one of them.

    Device names are compared without their bracketed tails (a CPU's thread count, an importer's
    source) and a shorter name stands for a longer one ("NVIDIA H100" for "NVIDIA H100 80GB HBM3")."""
    lines = []
    made_on = meta.get("device")
    if made_on:
        a, b = (re.sub(r"\s*\(.*\)\s*$", "", str(name)).strip().lower() for name in (made_on, device))
        if not (a.startswith(b) or b.startswith(a)):
            lines.append(f"the profile was measured on {made_on}, this run is on {device}; its op times are "
                         "that device's")
    made_in = meta.get("dtype")
    if made_in and made_in != dtype:
        lines.append(f"the profile was measured in {made_in}, the engine runs {dtype}; op times differ with the dtype")
    made_with = meta.get("num_threads")
    if threads is not None and made_with is not None and made_with != threads:
        lines.append(f"the profile was measured with {made_with} torch thread(s), this run uses {threads}; "
                     "op times differ with the thread count")
    return lines


def mean_errors(report: dict) -> dict:
    """{`step_time_abs_pct_error`, `mean_abs_pct_error` {ttft_s, tpot_s, e2e_s}} of a `compare` report:
    the acceptance bar's four figures."""
    return {"step_time_abs_pct_error": report["step_time_abs_pct_error"],
            "mean_abs_pct_error": {k: report["metrics"][k]["mean"]["abs_pct_error"] for k in ("ttft_s", "tpot_s", "e2e_s")}}


def speed_basis(device: str, probed: bool, cache: CpuCache | None, weight_bytes: int) -> dict:
    """{"basis": "run" or "calibration", "why"}: the machine speed a validation's headline is at.

    At the run's speed (the speed probe's readings around each step over the calibration's) where the
    probe follows the machine: on a CPU whose last-level cache the model's weights exceed, steps and
    probe stream the weights from memory alike. Where the weights fit the cache, a reading follows
    what ran before it (which data the cache holds), not the machine, so the calibration's speed:
    there the run-speed comparison met the bar less often than the calibration's (tiny-llama, 18
    fresh workloads, docs/results/2026-12-06-run-speed.md). On a GPU the probe's run readings are
    untried, so the calibration's."""
    if not probed:
        return {"basis": "calibration", "why": "no speed probe read the run and its calibration"}
    if str(device).split(":")[0] != "cpu":
        return {"basis": "calibration", "why": f"the speed probe's run readings are untried on {device}"}
    if cache is None:
        return {"basis": "calibration", "why": "Linux does not describe this CPU's last-level cache, so whether "
                                               "the probe follows the machine is unknown"}
    if cache.holds(weight_bytes):
        return {"basis": "calibration", "why": f"the model's weights fit the {cache.name} cache, so the probe's "
                                               "readings follow its contents"}
    return {"basis": "run", "why": f"the model's weights ({weight_bytes / 2 ** 20:.0f} MiB) exceed the {cache.name} "
                                   "cache; steps and probe stream them from memory alike, so the probe follows the machine"}


def figures_by_speed(details: dict) -> tuple[str, dict, dict]:
    """(the speed a validation's headline is at, "run" or "calibration"; the bar's figures at that
    speed; the same at the other speed), from its details.json dict ({} where there are none)."""
    basis = (details.get("speed_basis") or {}).get("basis", "calibration")
    run, calibration = details.get("at_run_speed") or {}, details.get("at_calibration_speed") or {}
    return (basis, run, calibration) if basis == "run" else (basis, calibration, run)


def calibration_warnings(meta: dict) -> list[str]:
    """The fit checks of a profile's meta: as stored by `calibrate`, or made now for an older profile."""

    return list(meta["warnings"]) if "warnings" in meta else check_profile(meta)


def detrended_error(steps: pd.DataFrame, window: int = 51) -> dict:
    """{"median", "p90"} of |signed % error - its rolling median over `window` steps| (a diagnostic).

    Not the acceptance figure: it separates the model's error per step from a slow drift of the
    whole machine's speed, which moves every step of a stretch of the run alike.
    """
    if len(steps) < window:
        return {"median": None, "p90": None, "window": window}
    e = (steps.predicted_s - steps.measured_s) / steps.measured_s * 100.0
    d = (e - e.rolling(window, center=True, min_periods=window // 2).median()).abs().dropna()
    return {"median": float(d.median()), "p90": float(d.quantile(0.9)), "window": window}

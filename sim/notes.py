"""What one setting of a config did to another, one line each: the `Config.notes` of a run.

Some settings change what others mean without an error: a rate rescales a trace's recorded
arrivals (and makes `time_scale` moot), a trace under generated arrivals gives its lengths only, a
whole-prompt policy raises the step budget to max_model_len, `workload.max_model_len` bounds the
lengths instead of the scheduler's, and lengths over max_model_len are clipped or dropped. A user
who is not told reads the results of a run they did not mean, so the commands print these lines
and keep them in the resolved config (comments in config.toml). `setting_notes` speaks of the
config and its built workload before the run; `outcome_notes` of what the workload did during it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from policies.config import ConfigError
from records.display import number
from records.files import read_json_object
from sim.latency.profile import Profile
from sim.workload import registry
from sim.workload.config import WorkloadConfig
from sim.workload.traces import has_arrivals
from policies.schedulers import scheduler_class
from specs.gpu_spec import get_gpu

GENERATED_ARRIVALS = ("poisson", "gamma", "constant", "staged", "closed_loop")
CV_KINDS = ("gamma", "staged")  # the kinds whose gaps workload.cv shapes (sim.workload.workload)


def _fmt(v: float) -> str:
    return number(v, trim=True)


def setting_notes(config, workload=None) -> list[str]:
    """Lines for the settings of `config` that change another (`workload`: its built workload, for the trace)."""
    return (workload_notes(config, workload) + scheduler_notes(config) + queue_notes(config, workload)
            + context_notes(config) + profile_notes(config) + profile_range_notes(config))


def queue_notes(config, workload=None) -> list[str]:
    """A line when `scheduler.queue = priority` has nothing to order: every request has one priority
    (no workload.classes of different priorities; no trace priority column, which classes
    override). The queue then runs first come, first served, and the run is fcfs's to the step.
    A registered kind's generator, and a trace not read yet (`workload` None), say nothing."""
    w = config.workload
    if config.scheduler.queue != "priority" or w.kind in registry.KINDS:
        return []
    if w.classes:
        levels = {c.priority for c in w.classes}
    elif w.trace:
        trace = getattr(workload, "trace", None)
        if trace is None:
            return []
        levels = {0} if trace.priority is None else set(np.unique(trace.priority).tolist())
    else:
        levels = {0}
    if len(levels) > 1:
        return []
    return [f"scheduler.queue = priority has nothing to order: every request has priority {levels.pop()} "
            "(give workload.classes different priorities, or the trace a priority column), so requests "
            "run first come, first served, as under fcfs"]


def context_notes(config) -> list[str]:
    """A line when `scheduler.max_model_len` exceeds the model's context (`max_position_embeddings`):
    vLLM refuses to start so (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), and the model was not trained
    to attend that far; simulated all the same, as a what-if."""
    context = getattr(config.model.spec(), "max_position_embeddings", None)
    limit = config.scheduler.max_model_len
    if not isinstance(context, int) or limit <= context:
        return []
    return [f"scheduler.max_model_len = {limit} exceeds {config.model.name}'s context of {context} tokens "
            "(max_position_embeddings): vLLM refuses to start so unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; "
            "simulated as a what-if"]


def profile_notes(config) -> list[str]:
    """A line when `hardware.profile` is given but `hardware.latency` is not "profiled" (the profile
    is not read: a user pointing a run at a calibration would read the roofline's figures as its),
    and when it was measured on another GPU than `hardware.gpu`: the step times are the profile's
    GPU's, and `hardware.gpu` sizes the KV memory only. A profile of the engine on a CPU, or one that
    names no GPU, says nothing here."""
    hw = config.hardware
    if hw.profile and hw.latency != "profiled":
        return [f"hardware.profile {Path(hw.profile).name} is not used: hardware.latency = {hw.latency} (the "
                f"datasheet model); set hardware.latency = \"profiled\" for the profile's step times"]
    if hw.latency != "profiled" or not hw.profile:
        return []
    try:
        meta = read_json_object(hw.profile, "hardware.profile").get("meta") or {}
        made_on, runs_on = get_gpu(meta["gpu"]).name, get_gpu(hw.gpu).name
    except (ConfigError, KeyError, TypeError):  # no such file or GPU: the latency model says so
        return []
    if made_on == runs_on:
        return []
    return [f"hardware.gpu = {hw.gpu}, but hardware.profile {Path(hw.profile).name} was measured on {made_on}: "
            f"the step times are the {made_on}'s and {runs_on} sizes only the KV memory; set hardware.gpu = "
            f"{made_on}, or import a profile of the {runs_on} (servesim calibrate import)"]


#: a step's inputs a profile bounds: (what, its unit, the ops whose measured maximum bounds it, which input of each)
PROFILE_RANGES = (
    ("steps", "tokens", ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"), 0),
    ("prefill chunks", "tokens", ("attn_prefill",), 0),
    ("decode batches", "sequences", ("attn_decode",), 0),
    ("contexts", "tokens", ("attn_prefill", "attn_decode"), 1),
)


def profile_range_notes(config) -> list[str]:
    """A line when the scheduler allows steps beyond what `hardware.profile` measured: more tokens a
    step, longer prefill chunks, larger decode batches or longer contexts than its points reach.
    The curves go on there as docs/formats.md says of each kind (a grid's attention linearly, where
    its work grows with the square), so such steps are extrapolated, not measured. Said of the
    limits the scheduler allows, which a workload may not reach."""
    hw, sched = config.hardware, config.scheduler
    if hw.latency != "profiled" or not hw.profile:
        return []
    try:
        profile = Profile.load(hw.profile)
        measured = {op: profile.measured_max(op) for *_, ops, _ in PROFILE_RANGES for op in ops}
    except (ConfigError, OSError, TypeError, ValueError):  # unreadable: the latency model says so
        return []
    budget = ("scheduler.max_num_batched_tokens", sched.max_num_batched_tokens)
    length = ("scheduler.max_model_len", sched.max_model_len)
    if scheduler_class(sched.policy).whole_prompts and length[1] > budget[1]:  # the step budget it takes
        budget = length
    allowed = {"steps": budget, "prefill chunks": min(budget, length, key=lambda s: s[1]),
               "decode batches": ("scheduler.max_num_seqs", sched.max_num_seqs), "contexts": length}
    beyond = []
    for what, unit, ops, i in PROFILE_RANGES:
        bounds = [m[i] for op in ops if (m := measured[op]) is not None]
        setting, value = allowed[what]
        if bounds and value > min(bounds):
            beyond.append(f"{what} of up to {_fmt(min(bounds))} {unit} ({setting} = {value})")
    if not beyond:
        return []
    return [f"hardware.profile {Path(hw.profile).name} was measured on {', '.join(beyond)}: larger ones are "
            "extrapolated from its curves, not measured (docs/formats.md: how each curve continues)"]


def scheduler_notes(config) -> list[str]:
    """The scheduler's part: a whole-prompt policy's step budget (what `servesim serve` has to say
    too), and the settings such a policy leaves unused (a prefill cap; static's prefix cache)."""
    sched = config.scheduler
    if not scheduler_class(sched.policy).whole_prompts:
        return []
    notes = []
    if sched.max_num_batched_tokens < sched.max_model_len:
        notes.append(f"scheduler.policy = {sched.policy} schedules whole prompts: its step budget is "
                     f"max_model_len = {sched.max_model_len} tokens, not scheduler.max_num_batched_tokens = "
                     f"{sched.max_num_batched_tokens}")
    cache = config.cache
    if sched.policy == "static" and (cache.enable_prefix_caching or cache.offload_size_gb):
        # padded batches recompute every prompt (policies.static_scheduler)
        used = " and ".join(k for k, on in (("cache.enable_prefix_caching", cache.enable_prefix_caching),
                                             ("cache.offload_size_gb", cache.offload_size_gb)) if on)
        notes.append(f"{used} not used: scheduler.policy = static recomputes every prompt in its padded batch "
                     "(no prefix cache, no CPU tier)")
    if sched.long_prefill_token_threshold:  # it caps a prefill chunk, and these policies never chunk
        notes.append(f"scheduler.long_prefill_token_threshold = {sched.long_prefill_token_threshold} is not used: "
                     f"scheduler.policy = {sched.policy} prefills whole prompts (set policy = chunked to cap "
                     "a prompt's chunk)")
    return notes


def rate_unused(w) -> str | None:
    """Why `workload.rate` does not set the pace of workload config `w`, or None where it does (an
    open loop at one rate, or a trace rescaled to it)."""
    if w.kind == "closed_loop":
        return "a closed loop's pace is its users (workload.num_users) and their think time"
    if w.kind == "staged":
        return "workload.stages give the rates"
    if w.class_rates():
        return "each of workload.classes arrives at its own rate"
    if w.kind not in GENERATED_ARRIVALS and w.kind != "trace":
        return f"workload.kind = {w.kind} runs its own profile's load"
    return None


def workload_notes(config, workload=None) -> list[str]:
    """The workload's part: how its trace, rate and lengths bounds combine."""
    notes: list[str] = []
    w, sched = config.workload, config.scheduler
    trace = getattr(workload, "trace", None)
    if w.trace and w.kind == "trace" and w.rate is not None:
        mean = trace.mean_rate if trace is not None else float("nan")
        if np.isfinite(mean):
            factor = mean / w.rate
            notes.append(f"workload.rate = {_fmt(w.rate)} req/s rescales the trace's recorded arrivals "
                         f"(mean {_fmt(mean)} req/s): every arrival time x {_fmt(factor)}; leave workload.rate "
                         "unset to replay them as recorded")
        if w.time_scale != 1.0:
            notes.append(f"workload.time_scale = {_fmt(w.time_scale)} is not used: workload.rate sets the pace")
    if w.trace and w.kind in GENERATED_ARRIVALS:
        pace = f" at {_fmt(w.rate)} req/s" if w.rate is not None and w.kind != "closed_loop" else ""
        unused = [k for k in ("prompt_len", "output_len")
                  if getattr(w, k) != getattr(WorkloadConfig, k)]  # set in the config, yet the trace's win
        notes.append(f"workload.trace gives the prompt and output lengths only (its rows in order, reused "
                     f"cyclically); the arrivals are generated (workload.kind = {w.kind}{pace})"
                     + (f"; {' and '.join('workload.' + k for k in unused)} not used" if unused else "")
                     + ("" if trace is not None and not has_arrivals(trace.format)
                        else "; set workload.kind = trace to replay its recorded arrivals"))
    unused = rate_unused(w) if w.rate is not None else None
    if unused:
        notes.append(f"workload.rate = {_fmt(w.rate)} is not used: {unused}")
    if w.cv != 1.0 and w.kind not in CV_KINDS:  # a cv = 3 with the default kind would run Poisson unsaid
        notes.append(f"workload.cv = {_fmt(w.cv)} is not used: only kind = gamma (and each stage of kind = staged) "
                     f"draws gaps of a chosen coefficient of variation, not kind = {w.kind}")
    if w.max_model_len is not None and w.max_model_len != sched.max_model_len and w.kind not in registry.KINDS:
        notes.append(f"workload.max_model_len = {w.max_model_len} bounds the request lengths, not "
                     f"scheduler.max_model_len = {sched.max_model_len}")
    return notes


def outcome_notes(workload) -> list[str]:
    """Lines for what the workload did to its requests during the run (clipped or dropped as too long)."""
    clipped, filtered = getattr(workload, "num_clipped", 0), getattr(workload, "num_filtered", 0)
    limit = getattr(workload, "max_model_len", None)
    notes = []
    if clipped:
        notes.append(f"workload.too_long = clip: {clipped} requests had prompt + output over "
                     f"max_model_len = {limit} tokens and were shortened to fit")
    if filtered:
        notes.append(f"workload.too_long = filter: {filtered} requests had prompt + output over "
                     f"max_model_len = {limit} tokens and were left out of the workload")
    passes, trace = getattr(workload, "num_passes", 1), getattr(workload, "trace", None)
    if passes > 1 and trace is not None:
        notes.append(f"workload.trace: its {len(trace)} requests were replayed {passes} times over, one after "
                     "another, to make the workload's num_requests or duration")
    return notes


def window_notes(config, workload, num_requests: int) -> list[str]:
    """A line for the workload's requests that `sim.max_sim_time_s` left out: sent after the clock
    stops (open loop), or never sent because the requests before them had not ended (a closed loop
    of `workload.num_requests`), they are in no result (`num_requests`: those that are)."""
    limit, planned = config.sim.max_sim_time_s, getattr(workload, "num_issued", None) or 0
    if config.workload.kind == "closed_loop" and config.workload.num_requests:
        planned = max(planned, config.workload.num_requests)
    if limit is None or planned <= num_requests:
        return []
    # env.run(until=limit) stops before the events at `limit`: a request due then is left out too
    return [f"sim.max_sim_time_s = {limit:g}: {planned - num_requests} of the workload's {planned} requests are sent "
            "at or after the clock stops and are not simulated (not in the results)"]


def empty_notes(config, workload, num_requests: int) -> list[str]:
    """A line for a run whose workload made no request: nothing was measured, and the settings
    that made it so are named (a duration too short for its rate, stages of rate 0, a filter
    that dropped every request)."""
    if num_requests:
        return []
    w = config.workload
    if getattr(workload, "num_filtered", 0):
        why = (f"workload.too_long = filter dropped all {workload.num_filtered} (each over max_model_len = "
               f"{workload.max_model_len} tokens)")
        fix = "raise max_model_len, shorten the lengths or set workload.too_long = clip"
    elif w.kind == "staged":
        why = "its stages sent none (" + ", ".join(f"{_fmt(r)} req/s for {_fmt(d)} s" for r, d in w.stages) + ")"
        fix = "give a stage a rate above 0"
    elif w.duration is not None and w.rate is not None:
        why = f"none arrived within workload.duration = {_fmt(w.duration)} s at workload.rate = {_fmt(w.rate)} req/s"
        fix = "give a longer duration, a higher rate or num_requests"
    else:
        why, fix = "the workload's settings sent none", "check workload.num_requests, duration and rate"
    return [f"workload: the run had no requests: {why}; {fix}"]


def with_notes(config, notes) -> object:
    """`config` with `notes` appended to its own (each line once, in order)."""
    merged = list(config.notes)
    for line in notes:
        line = " ".join(str(line).split())  # one line each: a config.toml comment
        if line not in merged:
            merged.append(line)
    return dataclasses.replace(config, notes=tuple(merged))

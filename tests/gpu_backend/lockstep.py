"""The engine and the simulator in lockstep: one workload, the same step times, every decision compared.

The engine runs the workload on a virtual clock that moves only by each forward pass's measured
time (and by its idle waits for the next arrival), so arrivals meet its step boundaries exactly
where the simulator's do; the simulator then replays those measured step times (`ReplayedSteps`),
and the engine's measured copies to and from the KV offload tier in place of its modelled link
(`ReplayedCopies`).
Both record what their scheduler decides at every step (`Decisions`); with the same shared policy
objects the two records must be equal, so the first difference is a fault of one side.
"""
from __future__ import annotations

import json
import time
import types

import numpy as np

import gpu_backend.engine as engine_module
import sim.build
from calibrate.engine_config import build_engine
from sim.latency.base import LatencyModel
from sim.runner import simulate
from sim.workload import build_workload


class VirtualClock:
    """Seconds that pass only when told (`advance`): the engine's clock in a lockstep run."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


class ReplayedSteps(LatencyModel):
    """The simulator's step times: the engine's measured ones, in order, less what the engine spent on
    copies to and from the KV offload tier when the simulator charges those apart (`ReplayedCopies`)."""

    def __init__(self, durations: list[float], copies=None) -> None:
        self.durations, self.next, self.copies = list(durations), 0, copies

    def step_time(self, plan) -> float:
        duration = self.durations[self.next]
        self.next += 1
        return duration - (self.copies.step_seconds(plan) if self.copies is not None else 0.0)


class ReplayedCopies:
    """The KV offload tier's copies in the simulator: the engine's measured ones, not a modelled link.

    The engine copies synchronously inside its steps (`ModelRunner.last_timings["offload"]`); its
    tier's link takes no time of its own (`s_per_block` 0): a native load has landed, a store can be
    found, once the step that copied it has ended. `install` gives the simulator's tier the same: no
    link time, and for a synchronous backend (lmcache), whose copy time the simulator adds to a step
    (`Scheduler.offload_seconds`), each step's measured copies (`ReplayedSteps` takes them off the
    step's measured duration, so the sum is the engine's); a native backend's stay in the step."""

    def __init__(self, seconds: dict) -> None:
        self.seconds = seconds  # step id -> the engine's measured copy seconds in that step
        self.synchronous = False

    def step_seconds(self, plan) -> float:
        return self.seconds.get(plan.step_id, 0.0) if self.synchronous else 0.0

    def install(self, scheduler) -> None:
        tier = scheduler.block_manager.offload
        if tier is None:
            return
        tier.s_per_block = 0.0
        self.synchronous = tier.synchronous
        scheduler.offload_seconds = self.step_seconds


class Decisions:
    """Wraps a scheduler's `schedule` and `update` to record, for every plan with work, when it was
    made, each sequence (request, tokens, computed before, samples), preemptions, swaps (request ids
    and block counts), offload copies, KV blocks used, prefix hits so far, queue lengths and, with
    `count_cached`, blocks findable in the prefix cache (so evictions are compared too: only where
    the simulator's requests carry token ids, as the engine's do; a count-only request's blocks are
    offered when it lets them go, `policies.block_manager`); and for every update the requests that
    finished."""

    def __init__(self, scheduler, count_cached: bool = False) -> None:
        self.entries: list[tuple] = []
        schedule, update, bm = scheduler.schedule, scheduler.update, scheduler.block_manager

        def recorded_schedule(now):
            plan = schedule(now)
            if not plan.is_empty:
                self.entries.append((
                    "plan", round(now, 9),
                    tuple((s.request.req_id, s.num_tokens, s.num_computed_tokens, s.samples, s.is_padding)
                          for s in plan.seqs),
                    plan.preempted, plan.swapped_out, plan.swapped_in, len(plan.swap_out_blocks),
                    len(plan.swap_in_blocks), len(plan.offload_load_blocks), len(plan.offload_store_blocks),
                    bm.num_used_gpu_blocks, bm.num_prefix_hit_tokens, bm.num_prefix_queried_tokens,
                    scheduler.num_waiting, scheduler.num_running, scheduler.num_swapped,
                    bm.num_cached_blocks if count_cached else None))
            return plan

        def recorded_update(plan, result, now):
            finished = update(plan, result, now)
            self.entries.append(("update", round(now, 9), tuple(r.req_id for r in finished)))
            return finished

        scheduler.schedule, scheduler.update = recorded_schedule, recorded_update


class ReplayedDrafts:
    """Speculative decoding in the simulator: the engine's drafts and acceptances, not placeholders
    and draws. The engine's n-gram proposer reads real tokens (often proposing fewer than k, or none)
    and its verify accepts what the model agrees with; `record` wraps the engine's scheduler to note,
    per request, how many drafts each proposal held, and, in the order the scheduler reads them,
    how many each verify accepted; `install` gives the simulator's scheduler a proposer and an
    acceptance sampler that hand those back in the same order."""

    def __init__(self) -> None:
        self.proposed: dict = {}  # req_id -> [number of drafts of each proposal, in order]
        self.accepted: list[int] = []

    def record(self, scheduler) -> None:
        propose = scheduler.proposer

        def recorded(req):
            drafts = propose(req)
            self.proposed.setdefault(req.req_id, []).append(len(drafts))
            return drafts
        scheduler.proposer = recorded

    def note_verify(self, plan, result) -> None:
        """The accepted counts of `plan`'s verify sequences, in `Scheduler._record_spec_tokens`' order."""
        for req in plan.sampling_requests():
            if plan.spec_token_ids.get(req.req_id):
                self.accepted.append(result.num_accepted.get(req.req_id, 0))

    def install(self, scheduler) -> None:
        proposed, accepted = {k: iter(v) for k, v in self.proposed.items()}, iter(self.accepted)
        scheduler.proposer = lambda req: (0,) * next(proposed[req.req_id])
        scheduler.acceptance = lambda num_drafts: next(accepted)


def carries_token_ids(config) -> bool:
    """Whether the simulator's requests of `config`'s workload carry token ids (shared prefixes, hash
    ids), so that their blocks enter its prefix cache as the engine's do."""
    return any(r.prompt_token_ids is not None
               for r in build_workload(config.workload, config.scheduler.max_model_len).start())


def run_engine(config, monkeypatch, model=None, step_s: float | None = None):
    """The engine on `config`'s workload with a virtual clock: (EngineResult, Decisions, `Measured`:
    the duration of every step that computed, in order, the one in flight at a time limit included,
    which the steps table leaves out; its offload copies; its drafts and acceptances). `step_s`: every
    step takes that long on the virtual clock instead (a case that places a time limit inside a
    chosen step needs times that repeat)."""
    engine = build_engine(config, "cpu", model=model)
    engine.warm_up()  # no one-time costs in the first step: its time is like the others
    decisions = Decisions(engine.scheduler, carries_token_ids(config))
    clock = VirtualClock()
    engine.clock = clock  # the runner keeps its own: it measures the offload copies (`ReplayedCopies`)
    runner, durations, copies = engine.runner, [], {}
    execute = runner.execute
    drafts = ReplayedDrafts() if config.speculative.enabled else None
    if drafts is not None:
        drafts.record(engine.scheduler)

    def timed(plan):  # the step takes what its forward pass took; the host's own work takes no time
        start = time.perf_counter()
        result = execute(plan)
        if plan.has_compute:  # a plan of KV offload copies alone runs beside the steps (the simulator's 0 s)
            durations.append(time.perf_counter() - start if step_s is None else step_s)
            clock.advance(durations[-1])
            if plan.offload_load_blocks or plan.offload_store_blocks:
                copies[plan.step_id] = runner.last_timings["offload"]
        if plan.spec_token_ids:
            drafts.note_verify(plan, result)
        return result

    engine.runner.execute = timed
    # run_workload idles with time.sleep until the next arrival: on this clock, a jump
    monkeypatch.setattr(engine_module, "time", types.SimpleNamespace(sleep=clock.advance))
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    return engine.run_workload(workload, progress=False), decisions, Measured(durations, copies, drafts)


class Measured:
    """What the simulator replays of an engine run: each computing step's duration in order, the KV
    offload copies' seconds per step id (`ReplayedCopies`), speculative drafts and acceptances
    (`ReplayedDrafts`, None without speculation)."""

    def __init__(self, durations: list[float], copies: dict, drafts: ReplayedDrafts | None) -> None:
        self.durations, self.copies, self.drafts = durations, copies, drafts


def run_sim(config, measured: Measured, monkeypatch):
    """The simulator on `config`'s workload, replaying what the engine `measured` (step times, KV
    offload copies, speculative drafts and acceptances): (SimResult, Decisions)."""
    made = []
    build_scheduler = sim.build.build_scheduler
    copies = ReplayedCopies(measured.copies)

    def recorded(*args, **kwargs):
        scheduler = build_scheduler(*args, **kwargs)
        copies.install(scheduler)
        if measured.drafts is not None:
            measured.drafts.install(scheduler)
        made.append(Decisions(scheduler, carries_token_ids(config)))
        return scheduler

    monkeypatch.setattr(sim.build, "build_scheduler", recorded)
    result = simulate(config, latency_model=ReplayedSteps(measured.durations, copies), fast_decode=False)
    (decisions,) = made
    return result, decisions


def lockstep(config, monkeypatch, model=None, step_s: float | None = None):
    """Run the engine, then the simulator on its step times: (engine result, sim result, engine
    decisions, sim decisions). `step_s`: `run_engine`'s."""
    engine_result, engine_decisions, measured = run_engine(config, monkeypatch, model, step_s)
    sim_result, sim_decisions = run_sim(config, measured, monkeypatch)
    return engine_result, sim_result, engine_decisions.entries, sim_decisions.entries


def first_difference(ours: list, theirs: list) -> str | None:
    """Where two decision records first differ, in words (None when they are equal)."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"entry {i}: engine {a} != simulator {b}"
    if len(ours) != len(theirs):
        return f"the engine made {len(ours)} entries, the simulator {len(theirs)}"
    return None


#: summary counters both executors report, defined alike (cost and energy are the simulator's alone)
COUNTERS = ("num_requests", "num_finished", "num_rejected", "num_aborted", "num_preemptions", "num_swaps",
            "num_recomputes", "num_steps", "rejected_reasons", "prefix_cache_hit_rate", "padding_fraction",
            "kv_usage", "num_running", "num_waiting", "offload", "cpu_prefix_cache_hit_rate")


def same_figure(a, b) -> bool:
    """Summary figures equal, floats to 1e-12 relative: a time-weighted mean (kv_usage) sums step
    durations that the engine reads off its clock, (start + d) - start, and the simulator has as d,
    so they may differ in the last bit."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_figure(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return bool(np.isclose(a, b, rtol=1e-12, atol=0.0))
    return a == b


#: the engine's words for why a request ended -> the simulator's for the same reason (each names its own setting)
SAME_REASONS = {"the run ended (max_time_s)": "the simulation ended (sim.max_sim_time_s)"}


def different_counters(engine_result, sim_result) -> list[str]:
    """The counters of the two runs' summaries, requests and steps tables that differ (times within 1 ns)."""
    out = [f"summary {k}: engine {engine_result.summary.get(k)} != simulator {sim_result.summary.get(k)}"
           for k in COUNTERS if not same_figure(engine_result.summary.get(k), sim_result.summary.get(k))]
    for name, key in (("requests", "req_id"), ("steps", "step_id")):
        ours = getattr(engine_result, name).set_index(key).sort_index()
        theirs = getattr(sim_result, name).set_index(key).sort_index()
        if len(ours) != len(theirs):
            out.append(f"{name}: engine {len(ours)} rows != simulator {len(theirs)}")
            continue
        for column in ours.columns.drop("replica"):
            a, b = ours[column], theirs[column]
            if column == "reject_reason":
                a = a.replace(SAME_REASONS)
            if column == "preemption_intervals":  # JSON [[preempted_at, resumed_at], ...]
                a, b = (x.map(lambda v: str(np.round(json.loads(v), 9).tolist())) for x in (a, b))
            same = (np.isclose(a, b, rtol=0, atol=1e-9, equal_nan=True) if a.dtype.kind == "f"
                    else a.astype(str).to_numpy() == b.astype(str).to_numpy())
            if not same.all():
                i = int(np.argmin(same))
                out.append(f"{name}.{column} at {ours.index[i]}: engine {a.iloc[i]} != simulator {b.iloc[i]}")
    return out

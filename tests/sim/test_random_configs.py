"""Invariants of the simulator over seeded random configs (drawn by `random_configs.py`).

Hand-written tests pin one feature at a time; the faults that were left were in the combinations
(a closed loop whose requests are all rejected, swaps on a disaggregated run, KV held past a time
limit). So each config here combines many features at small sizes (tiny-llama, tiny KV pools, 20-300
requests), and each run must keep the invariants that hold for every config, one `check_*` each:

- requests: every workload request appears once, or is missing only for a documented reason (filtered
  as too long; due at or after the time limit); its arrival and lengths are the workload's; the
  summary's counts add up; no request is aborted without a time limit (a stall); a rejection gives a
  reason, and a request is rejected exactly when it can never fit (max_model_len, or blocks less the
  watermark); completed ones run in time order and produce max_tokens; TTFT, E2E, TPOT, queue and max
  ITL follow their definitions; time-outs end at arrival + timeout; nothing ends past the time limit;
- summary: duration, throughput, goodput, SLO attainment (a rejection is a miss), means and maxima,
  preemption counts, prefix-hit rate and max stall, all as the tables define them;
- steps: the token budget, max_num_seqs, KV blocks within the pool, positive durations, no overlapping
  steps on a replica, none started past the time limit, tokens conserved;
- the end: every GPU and CPU block back, `BlockManager.check_invariants()`, no scheduler left busy;
- preemptions: swaps + recomputes = preemptions, one interval per preemption, in order, inside
  [first scheduled, finish]; static batches never overlap nor preempt; a priority queue never first-
  admits a request while a more important one waits; client caps, round robin, autoscaler bounds;
- each default config, and every fourth slow one, is also run step by step (`fast_decode=False`: the
  same tables), again (the same tables: determinism) and streamed (the same summary).

Known and left, so checked in the form that holds (each named at its check): the steps table labels a
prefill's last 1-token chunk as a decode token (so the prefill and decode columns are conserved
together, not apart); `steps.num_seqs` counts padding entries (so padded policies are checked on
`num_running`); a swapped-out request blocks the admission of a more
important waiting one, as in vLLM (so the priority check looks at first admissions, which that never
reorders). A request due exactly at `sim.max_sim_time_s` is not sent (SimPy's `run(until)`).

The default run covers every feature of `random_configs.ALL_FEATURES` with a fixed list of indices
(`test_default_indices_cover_every_feature` keeps it so); the `slow` run draws 600 of another seed,
among them the indices where the fuzzer found the faults since fixed. A failure names the seed and
index: `random_config(seed, idx, folder)` rebuilds it alone. `test_each_check_catches_its_invariant_
broken` shows that the checks can fail, each on a good run with its invariant broken; a fault found at
HEAD would be a strict xfail (`SLOW_KNOWN_FAULTS`; the two this driver found are mended). Also here:
M/D/1 waits against Lindley's recursion and Pollaczek-Khinchine, and invalid configs refused on one
line naming the field.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from policies import ConfigError, Request
from policies.schedulers import scheduler_class
from random_configs import (ALL_FEATURES, REPO, TINY, RunTooLong, expected_requests, features, random_config,
                            run_capturing, time_allowance)
from sim.build import build_cache_config
from sim.config import load_config
from sim.runner import simulate

SEED = 0
# 40 of seed 0's first 600, picked to see every feature of ALL_FEATURES (checked below) and every outcome
# (preemption by swap and by recompute, rejections, time-outs, aborts at a time limit, prefix-cache hits,
# CPU-tier loads, draft tokens, padding) at least three times with at least 5 requests served, each
# run in well under a second; every one is also run the three ways (`check_same_run_three_ways`)
DEFAULT_INDICES = (0, 1, 2, 3, 4, 5, 34, 56, 59, 113, 118, 119, 130, 170, 198, 220, 222, 235, 267, 275, 324, 341,
                   355, 369, 372, 385, 395, 398, 405, 411, 432, 449, 454, 460, 480, 497, 504, 570, 593, 598)
SLOW_SEED = 2
# the fuzzer's finds of seed 2 (since fixed or named above) are among these: 187, 357, 372, 384, 449, 484,
# 533, 596; every fourth is also run the three ways
SLOW_INDICES = range(600)
# known faults at HEAD, by index of SLOW_SEED (strict: an index that passes again fails, to be removed here)
SLOW_KNOWN_FAULTS: dict[int, str] = {}  # 483 was one (a front-end request sent before the limit), mended
COMPLETED = ("length", "stop")
EPS = 1e-9
ALLOWANCE_S = 120


# --- small helpers --------------------------------------------------------------------------------
def close(a, b, rel: float = 1e-9) -> bool:
    """Equal to `rel` (relative above 1, absolute below); NaN equals NaN, None equals None."""
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def completed(req):
    return req[req["finish_reason"].isin(COMPLETED)]


def first_row(frame, mask) -> dict:
    """The first row of `frame` where `mask` holds, as a dict (for assertion messages)."""
    return frame[mask].iloc[0].to_dict()


def limit_of(run):
    return run.config.sim.max_sim_time_s


def disaggregated(run) -> bool:
    return bool(run.config.disaggregation.enabled)


def seats(run) -> int:
    sc = run.config.scheduler
    if sc.policy == "static" and sc.static_max_batch_size:
        return min(sc.max_num_seqs, sc.static_max_batch_size)
    return sc.max_num_seqs


# --- requests -------------------------------------------------------------------------------------
def check_each_request_once(run):
    """Every workload request once; missing only if filtered (not in the plan) or due at/after the limit."""
    req, limit, cap = run.result.requests, limit_of(run), run.config.workload.max_concurrency
    assert req["req_id"].is_unique, req.loc[req["req_id"].duplicated(), "req_id"].tolist()[:5]
    plan = expected_requests(run.config)
    if plan is None:
        return
    got = set(req["req_id"])
    assert not got - set(plan), f"req_ids not in the workload: {sorted(got - set(plan))[:5]}"
    if not (limit is not None and cap is not None):  # a capped client sends late: which made it is unknown
        missing = [k for k, due in plan.items() if k not in got and (limit is None or due[0] < limit)]
        assert not missing, f"{len(missing)} workload requests missing, e.g. {missing[:5]}"
    for row in req.itertuples():
        arrival, prompt, max_tokens, _ = plan[row.req_id]
        assert (row.num_prompt_tokens, row.max_tokens) == (prompt, max_tokens), row
        if cap is None:
            assert close(row.arrival_time, arrival), row


def check_closed_loop_count(run):
    """A closed loop without a time limit serves num_requests (none are filtered: clip/keep)."""
    wl = run.config.workload
    if wl.kind == "closed_loop" and limit_of(run) is None and wl.num_requests and wl.too_long != "filter":
        assert len(run.result.requests) == wl.num_requests


def check_summary_counts(run):
    req, s = run.result.requests, run.result.summary
    assert s["num_requests"] == len(req)
    ended = s["num_finished"] + s["num_rejected"] + s["num_aborted"] + s["num_timed_out"] + s["num_unfinished"]
    assert ended == len(req), s
    assert set(req["finish_reason"]) <= {"length", "stop", "rejected", "aborted", "timed_out"}
    assert not req["finish_reason"].isna().any()


def check_no_stall(run):
    """Without a time limit a request ends served, rejected or timed out, never aborted (a stall)."""
    if limit_of(run) is None:
        req = run.result.requests
        aborted = req["finish_reason"] == "aborted"
        assert not aborted.any(), first_row(req, aborted)


def check_rejections(run):
    """A reason each; rejected exactly when it can never fit (max_model_len, or the blocks less the watermark)."""
    req = run.result.requests
    rejected = req["finish_reason"] == "rejected"
    assert req.loc[rejected, "reject_reason"].map(lambda x: isinstance(x, str) and bool(x)).all()
    cache = build_cache_config(run.config)  # the random configs give both sides of a disaggregated pool this one
    null = scheduler_class(run.config.scheduler.policy).null_block  # vLLM v1's null block holds no KV
    usable = cache.num_gpu_blocks - null - int(cache.watermark * cache.num_gpu_blocks)
    total = req["num_prompt_tokens"] + req["max_tokens"]
    never = (total > run.config.scheduler.max_model_len) | (np.ceil((total - 1) / cache.block_size) > usable)
    assert not (rejected & ~never).any(), first_row(req, rejected & ~never)
    assert not (req["finish_reason"].isin(COMPLETED) & never).any(), first_row(req, never)


def check_request_times(run):
    """Completed: arrival <= first scheduled <= first token <= finish, max_tokens produced."""
    done = completed(run.result.requests)
    a, fs, ft, fin = (done[c] for c in ("arrival_time", "first_scheduled_time", "first_token_time", "finish_time"))
    order = (a - EPS <= fs) & (fs <= ft + EPS) & (ft <= fin + EPS) & (ft > a)
    assert order.all(), first_row(done, ~order)
    short = (done["finish_reason"] == "length") & (done["num_output_tokens"] != done["max_tokens"])
    assert not short.any(), first_row(done, short)


def check_request_metrics(run):
    """TTFT = first token - arrival, E2E = finish - arrival, TPOT = (E2E - TTFT)/(out - 1) (NaN for one
    token), queue = first scheduled - arrival, max ITL <= E2E - TTFT."""
    for row in completed(run.result.requests).itertuples():
        assert close(row.ttft_s, row.first_token_time - row.arrival_time), row
        assert close(row.e2e_s, row.finish_time - row.arrival_time), row
        assert close(row.queue_s, row.first_scheduled_time - row.arrival_time), row
        if row.num_output_tokens > 1:
            assert close(row.tpot_s, (row.e2e_s - row.ttft_s) / (row.num_output_tokens - 1), 1e-6), row
        else:
            assert row.tpot_s is None or math.isnan(row.tpot_s), row
        assert not row.max_itl_s > row.e2e_s - row.ttft_s + EPS, row


def check_time_limit_and_timeouts(run):
    """Nothing ends before it arrives or (but a time-out, at its deadline) past the time limit; a time-out
    ends at arrival + timeout; nothing completes later than its client's timeout."""
    req, limit, timeout = run.result.requests, limit_of(run), run.config.workload.request_timeout_s
    live = req[req["finish_reason"] != "rejected"]
    early = live["finish_time"] < live["arrival_time"] - EPS
    assert not early.any(), first_row(live, early)
    if limit is not None:
        late = (live["finish_time"] > limit + EPS) & (live["finish_reason"] != "timed_out")
        assert not late.any(), first_row(live, late)
    if timeout is not None:
        out = req[req["finish_reason"] == "timed_out"]
        deadline = out["arrival_time"].to_numpy(float) + timeout
        assert np.allclose(out["finish_time"].to_numpy(float), deadline, rtol=0, atol=1e-9)
        assert (completed(req)["e2e_s"] <= timeout + EPS).all()


# --- summary --------------------------------------------------------------------------------------
def check_summary_metrics(run):
    """The summary's figures as the tables define them (vLLM bench serve definitions)."""
    req, steps, s = run.result.requests, run.result.steps, run.result.summary
    if not len(req):
        return
    done = completed(req)
    end = np.nanmax(req["finish_time"].to_numpy(float))
    if len(steps):
        end = max(end, (steps["start"] + steps["duration"]).max())
    duration = end - req["arrival_time"].min()
    assert close(s["duration_s"], duration, 1e-6), (s["duration_s"], duration)
    if duration > 0:
        assert close(s["throughput"]["output_tokens_per_s"], done["num_output_tokens"].sum() / duration, 1e-6)
        assert close(s["throughput"]["requests_per_s"], len(done) / duration, 1e-6)
    if len(done):
        assert close(s["ttft_s"]["mean"], done["ttft_s"].mean(), 1e-6)
        assert close(s["e2e_s"]["max"], done["e2e_s"].max(), 1e-6)
        assert close(s["queue_s"]["mean"], done["queue_s"].mean(), 1e-6)  # over the successes, as TTFT
    slo = run.config.slo
    good = req["finish_reason"].isin(COMPLETED)  # a rejection misses every SLO
    if slo.ttft_s is not None:
        good &= req["ttft_s"] <= slo.ttft_s
    if slo.tpot_s is not None:
        good &= req["tpot_s"].isna() | (req["tpot_s"] <= slo.tpot_s)
    if slo.e2e_s is not None:
        good &= req["e2e_s"] <= slo.e2e_s
    assert close(s["slo_attainment"], good.sum() / len(req)), (s["slo_attainment"], good.sum() / len(req))
    if s["duration_s"] > 0 and s.get("goodput_requests_per_s") is not None:
        assert close(s["goodput_requests_per_s"], good.sum() / s["duration_s"], 1e-6)
    assert s["num_preemptions"] == req["num_preemptions"].sum()
    assert s["num_swaps"] == req["num_swaps"].sum() and s["num_recomputes"] == req["num_recomputes"].sum()
    prompts = req.loc[req["first_scheduled_time"].notna(), "num_prompt_tokens"].sum()  # those that looked it up
    if prompts:
        assert close(s["prefix_cache_hit_rate"], req["num_cached_tokens"].sum() / prompts)
    if s.get("max_stall_s") is not None and done["max_itl_s"].notna().any():
        assert close(s["max_stall_s"], done["max_itl_s"].max())


# --- steps ----------------------------------------------------------------------------------------
def check_step_budgets(run):
    """Per step: tokens within the budget (whole-prompt policies: max(budget, max_model_len); padding counts
    where there is padding), at most max_num_seqs sequences, KV blocks within the pool (on both sides of a
    disaggregated pool: the random configs give them the same scheduler and hardware)."""
    steps, sc = run.result.steps, run.config.scheduler
    if not len(steps):
        return
    whole = sc.policy in ("static", "continuous")
    budget = max(sc.max_num_batched_tokens, sc.max_model_len) if whole else sc.max_num_batched_tokens
    tokens = steps["num_prefill_tokens"] + steps["num_decode_tokens"]
    padded = sc.policy == "static" or bool(sc.max_paddings)
    if padded:
        tokens = tokens + steps["num_padding_tokens"]
    assert not (tokens > budget).any(), first_row(steps, tokens > budget)
    # steps.num_seqs counts padding entries as sequences (known, left): padded policies by num_running
    over = (steps["num_running"] > seats(run)) | ((steps["num_seqs"] > seats(run)) & (not padded))
    assert not over.any(), first_row(steps, over)
    pool = build_cache_config(run.config).num_gpu_blocks
    assert steps["num_kv_blocks_used"].max() <= pool


def check_steps_in_time(run):
    """Positive durations (zero only for a step that just moves blocks to or from the CPU tier, or one
    that preempted and then could place nothing); no two steps of a replica overlap; none starts past
    the time limit."""
    steps, limit = run.result.steps, limit_of(run)
    if not len(steps):
        return
    assert (steps["duration"] >= 0).all() and not steps["duration"].isna().any()
    if not run.config.cache.offload_size_gb:
        idle = (steps["duration"] <= 0) & ~((steps["num_preempted"] > 0) & (steps["num_prefill_tokens"] +
                                                                           steps["num_decode_tokens"] == 0))
        assert not idle.any(), first_row(steps, idle)
    for replica, g in steps.groupby("replica"):
        g = g.sort_values(["start", "step_id"])
        starts, ends = g["start"].to_numpy(), (g["start"] + g["duration"]).to_numpy()
        overlap = starts[1:] < ends[:-1] - EPS
        assert not overlap.any(), (replica, g.iloc[int(np.argmax(overlap)) + 1].to_dict())
        if limit is not None:
            assert starts.max() <= limit + EPS, replica


def check_token_conservation(run):
    """Without preemption, cache hits, drafts, cut-offs or padding, the steps compute each prompt once and
    each output token but the first. The steps table labels a prefill's last 1-token chunk after some
    context as a decode token (known, left: `policies.batch_plan.plan_totals`), so the two columns are
    conserved together, and decode tokens are at least the outputs less one."""
    req, steps, s, sc = run.result.requests, run.result.steps, run.result.summary, run.config.scheduler
    rejected = req["finish_reason"] == "rejected"
    done = completed(req)
    simple = (len(steps) and not disaggregated(run) and not run.config.speculative.enabled and s["num_preemptions"] == 0
              and limit_of(run) is None and run.config.workload.request_timeout_s is None
              and (req["num_cached_tokens"] == 0).all() and sc.policy != "static" and len(done) == (~rejected).sum())
    if not simple:
        return
    prefill, decode = steps["num_prefill_tokens"].sum(), steps["num_decode_tokens"].sum()
    want_prefill, want_decode = done["num_prompt_tokens"].sum(), (done["num_output_tokens"] - 1).sum()
    assert prefill + decode == want_prefill + want_decode, (prefill, decode, want_prefill, want_decode)
    assert decode >= want_decode, (decode, want_decode)


# --- the end of the run ---------------------------------------------------------------------------
def check_kv_returned(run):
    """Every replica (retired ones, both sides of a disaggregated pool, time-limited runs too) ends with all
    its GPU and CPU blocks free, no holds, consistent bookkeeping and nothing unfinished."""
    assert run.schedulers, "no scheduler captured"
    for name, scheduler in run.schedulers:
        bm = scheduler.block_manager
        assert bm.num_free_gpu_blocks == bm.num_gpu_blocks and not bm.holders, \
            (name, bm.num_used_gpu_blocks, list(bm.holders)[:5])
        assert bm.num_free_cpu_blocks == bm.num_cpu_blocks, (name, bm.num_cpu_blocks - bm.num_free_cpu_blocks)
        bm.check_invariants()
        assert not scheduler.has_unfinished(), name


def check_prefix_cache(run):
    """Cache hits only with prefix caching on (never for static), and always less than the whole prompt."""
    req, sc, cache = run.result.requests, run.config.scheduler, run.config.cache
    caching = cache.enable_prefix_caching if cache.enable_prefix_caching is not None else sc.policy == "vllm"
    hits = req["num_cached_tokens"]
    if not caching or sc.policy == "static":
        assert (hits == 0).all(), hits.sum()
    whole = hits > req["num_prompt_tokens"] - 1
    assert not whole.any(), first_row(req, whole)


def check_clipping(run):
    """too_long = clip leaves no request over max_model_len."""
    wl, req = run.config.workload, run.result.requests
    if wl.too_long == "clip":
        over = req["num_prompt_tokens"] + req["max_tokens"] > (wl.max_model_len or run.config.scheduler.max_model_len)
        assert not over.any(), first_row(req, over)


# --- preemption, batching, priority ---------------------------------------------------------------
def check_preemption_bookkeeping(run):
    """swaps + recomputes = preemptions; one interval per preemption, in order, within [first scheduled,
    finish]. steps.num_preempted counts the recomputes, on every layout (with a time limit too: the step
    in flight at the limit is tabled when it preempted, `Replica.end_step`; and a plan that preempted and
    then placed nothing is a row of its own)."""
    req, steps = run.result.requests, run.result.steps
    split = req["num_swaps"] + req["num_recomputes"] != req["num_preemptions"]
    assert not split.any(), first_row(req, split)
    for row in req.itertuples():
        intervals = row.preemption_intervals
        intervals = json.loads(intervals) if isinstance(intervals, str) else list(intervals or ())
        assert len(intervals) == row.num_preemptions, row
        bounds = [t for interval in intervals for t in interval]
        assert bounds == sorted(bounds), row
        if bounds:
            assert row.first_scheduled_time - EPS <= bounds[0] and bounds[-1] <= row.finish_time + EPS, row
    if len(steps):
        tabled, counted = int(steps["num_preempted"].sum()), int(req["num_recomputes"].sum())
        assert tabled == counted, (tabled, counted)
        assert not (req["num_swaps"].sum() and steps["num_swap_out_blocks"].sum() == 0)


def check_static_batches(run):
    """Static batching: no preemption; a batch (one first-scheduled time) ends before the next starts; no
    batch beyond static_max_batch_size. Skipped: front-end runs (client times, each shifted by its own
    ingress) and disaggregation (first scheduled on the prefill side, batched again on the decode side)."""
    req, sc = run.result.requests, run.config.scheduler
    if sc.policy != "static" or disaggregated(run) or run.config.frontend.enabled or not len(req):
        return
    assert req["num_preemptions"].sum() == 0
    for replica, g in req[req["first_scheduled_time"].notna()].groupby("replica"):
        batches = g.groupby("first_scheduled_time")["finish_time"].max().sort_index()
        starts, ends = batches.index.to_numpy(), batches.to_numpy()
        assert not (starts[1:] < ends[:-1] - 1e-12).any(), (replica, batches)
        if sc.static_max_batch_size:
            assert g.groupby("first_scheduled_time").size().max() <= seats(run)


def check_priority_first_admissions(run):
    """A priority queue never first-admits a request while a more important one (arrived earlier on the
    same replica) still waits. Only first admissions: a swapped-out request is resumed before any waiting
    one is admitted, whatever their priorities (vLLM's order; known, left). Skipped where the table's
    times are not the scheduler's view: async scheduling (an arrival is seen two steps later), the front
    end (client times), disaggregation (a decode side admits what its transfers deliver, in their order)."""
    req, config = run.result.requests, run.config
    if (config.scheduler.queue != "priority" or disaggregated(run) or config.scheduler.async_scheduling
            or config.frontend.enabled):
        return
    for replica, g in req[req["first_scheduled_time"].notna()].groupby("replica"):
        t = g["first_scheduled_time"].to_numpy(float)
        arrival, priority = g["arrival_time"].to_numpy(float), g["priority"].to_numpy()
        # waiting[i, j]: j arrived before i was admitted, and was admitted after it, with a more important key
        waiting = ((arrival[None, :] < t[:, None] - 1e-12) & (t[None, :] > t[:, None] + 1e-12)
                   & (priority[None, :] < priority[:, None]))
        if waiting.any():
            i, j = np.argwhere(waiting)[0]
            raise AssertionError(f"replica {replica}: req {g['req_id'].iloc[i]} (priority {priority[i]}) admitted at "
                                 f"{t[i]:.6f} while req {g['req_id'].iloc[j]} (priority {priority[j]}, arrived "
                                 f"{arrival[j]:.6f}) waited until {t[j]:.6f}")


# --- cluster and client ---------------------------------------------------------------------------
def check_client_concurrency(run):
    """max_concurrency: never more requests in flight than the cap (a finish frees its slot first)."""
    cap, req = run.config.workload.max_concurrency, run.result.requests
    if cap is None or not len(req):
        return
    live = req[req["finish_reason"] != "rejected"]
    events = sorted([(t, 1) for t in live["arrival_time"]] + [(t, -1) for t in live["finish_time"]])
    assert np.cumsum([d for _, d in events]).max(initial=0) <= cap


def check_round_robin(run):
    """round_robin over a fixed cluster, open loop, no time limit: per-replica counts differ by at most one."""
    c, req = run.config.cluster, run.result.requests
    fixed = c.num_replicas > 1 and not disaggregated(run) and not run.config.autoscaling.enabled
    if (c.router == "round_robin" and fixed and run.config.workload.kind != "closed_loop" and limit_of(run) is None
            and len(req)):
        per = req.groupby("replica").size()
        if len(per) == c.num_replicas:
            assert per.max() - per.min() <= 1, per.to_dict()


def check_autoscaler_bounds(run):
    """Serving + provisioning (+ draining) within max_replicas, serving at least min_replicas (but the final
    row, which marks the end), and no more replicas used than max_replicas."""
    a, reps, req = run.config.autoscaling, run.result.replicas, run.result.requests
    if not a.enabled or reps is None or not len(reps):
        return
    up = reps["num_serving"] + reps["num_provisioning"]
    assert (up + reps["num_draining"] <= a.max_replicas).all(), reps.max().to_dict()
    assert (reps["num_serving"].iloc[:-1] >= a.min_replicas).all()
    most = (run.result.summary.get("autoscaling") or {}).get("max_replicas_up")
    assert most is None or most <= a.max_replicas
    used = set(req.loc[req["finish_reason"] != "rejected", "replica"].astype(str))
    assert len(used) <= a.max_replicas, used


CHECKS = (check_each_request_once, check_closed_loop_count, check_summary_counts, check_no_stall, check_rejections,
          check_request_times, check_request_metrics, check_time_limit_and_timeouts, check_summary_metrics,
          check_step_budgets, check_steps_in_time, check_token_conservation, check_kv_returned, check_prefix_cache,
          check_clipping, check_preemption_bookkeeping, check_static_batches, check_priority_first_admissions,
          check_client_concurrency, check_round_robin, check_autoscaler_bounds)


# --- the same run three ways ----------------------------------------------------------------------
def assert_same_tables(a, b) -> None:
    """Equal request and step tables (floats to 1e-9; preemption intervals aside: lists)."""
    for name, keys in (("requests", ["req_id"]), ("steps", ["replica", "start", "step_id"])):
        x, y = getattr(a, name), getattr(b, name)
        assert len(x) == len(y), (name, len(x), len(y))
        x, y = (t.sort_values(keys).reset_index(drop=True) for t in (x, y))
        for col in x.columns:
            if col == "preemption_intervals":
                continue
            if x[col].dtype.kind == "f":
                u, v = x[col].to_numpy(float), y[col].to_numpy(float)
                assert np.array_equal(np.isnan(u), np.isnan(v)), f"{name}.{col}"
                assert np.allclose(u, v, rtol=0, atol=1e-9, equal_nan=True), f"{name}.{col}"
            else:
                assert (x[col].astype(str) == y[col].astype(str)).all(), f"{name}.{col}"


def assert_same_summary(streamed: dict, exact: dict, path: str = "summary") -> None:
    """Key for key: numbers to 1e-9 relative, the rest equal."""
    assert streamed.keys() == exact.keys(), (path, streamed.keys() ^ exact.keys())
    for key, want in exact.items():
        got, where = streamed[key], f"{path}.{key}"
        if isinstance(want, dict) and isinstance(got, dict):
            assert_same_summary(got, want, where)
        elif isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(got, (int, float)):
            assert close(float(got), float(want)), (where, got, want)
        else:
            assert json.dumps(got, default=str) == json.dumps(want, default=str), (where, got, want)


def check_same_run_three_ways(run) -> None:
    """Step by step (fast_decode=False) and again: the same tables; streamed: the same summary."""
    assert_same_tables(run.result, simulate(run.config, fast_decode=False))
    assert_same_tables(run.result, simulate(run.config))
    assert_same_summary(simulate(run.config, stream=True).summary, run.result.summary)


# --- drivers --------------------------------------------------------------------------------------
def broken_invariants(run) -> list[str]:
    """The checks that fail on `run`, each as 'check_name: message'."""
    broken = []
    for check in CHECKS:
        try:
            check(run)
        except AssertionError as e:
            broken.append(f"{check.__name__}: {str(e)[:400]}")
    return broken


def assert_invariants(seed: int, idx: int, folder, three_ways: bool) -> None:
    """Run config (seed, idx) and assert every invariant; a refused config must say why on one line."""
    cfg = random_config(seed, idx, folder)
    replay = f"config {seed}:{idx} = {json.dumps(cfg)}"
    try:
        with time_allowance(ALLOWANCE_S):
            config = load_config(cfg)
            run = run_capturing(cfg, config)
            broken = broken_invariants(run)
            if three_ways and not broken:
                try:
                    check_same_run_three_ways(run)
                except AssertionError as e:
                    broken.append(f"check_same_run_three_ways: {str(e)[:400]}")
    except ConfigError as e:  # a valid-looking combination the simulator refuses (e.g. a tier holding no block)
        assert "\n" not in str(e) and ":" in str(e), f"{replay}\nrefused without naming a field: {e!r}"
        return
    except RunTooLong as e:
        pytest.fail(f"{replay}\n{e}")
    assert not broken, replay + "\n" + "\n".join(broken)


@pytest.fixture(scope="module")
def trace_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


def test_default_indices_cover_every_feature(trace_folder):
    covered = set().union(*(features(random_config(SEED, i, trace_folder)) for i in DEFAULT_INDICES))
    assert not ALL_FEATURES - covered, sorted(ALL_FEATURES - covered)


@pytest.mark.parametrize("idx", DEFAULT_INDICES)
def test_invariants_hold(idx, trace_folder):
    assert_invariants(SEED, idx, trace_folder, three_ways=True)


@pytest.mark.slow
@pytest.mark.parametrize("idx", [pytest.param(i, marks=pytest.mark.xfail(reason=SLOW_KNOWN_FAULTS[i], strict=True))
                                 if i in SLOW_KNOWN_FAULTS else i for i in SLOW_INDICES])
def test_invariants_hold_over_many_configs(idx, trace_folder):
    assert_invariants(SLOW_SEED, idx, trace_folder, three_ways=idx % 4 == 0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_sent_before_the_limit_is_in_the_results(stream):
    """Requests due every 0.1 s, a 50 ms front-end ingress, a 0.32 s limit: the one sent at 0.3 s was sent
    before the clock stopped, so it is in the results (aborted, as any request the limit cuts off); it was
    in no table before (slow index 483 found it)."""
    result = simulate(load_config({
        "model": {"name": TINY}, "hardware": {"num_gpu_blocks": 100},
        "workload": {"kind": "constant", "rate": 10.0, "num_requests": 10,
                     "prompt_len": {"kind": "constant", "value": 8}, "output_len": {"kind": "constant", "value": 4}},
        "sim": {"max_sim_time_s": 0.32}, "frontend": {"request_overhead_s": 0.05}}), stream=stream)
    assert result.summary["num_requests"] == 3 and result.summary["num_aborted"] >= 1
    if not stream:
        last = result.requests.sort_values("arrival_time").iloc[-1]
        assert last["arrival_time"] == pytest.approx(0.3) and last["finish_reason"] == "aborted"
        assert "max_sim_time_s" in last["reject_reason"]



def test_disaggregated_steps_count_the_preemptions(trace_folder):
    """Config 2:326 (vllm, one prefill and two decode replicas, no time limit): every recompute the requests
    record is a preemption in some step, as on colocated replicas. The prefill replica, its pool held by
    KV waiting for the link, preempted and then could place nothing: that plan was never tabled (0 of 13)."""
    result = simulate(load_config(random_config(2, 326, trace_folder)))
    assert result.steps["num_preempted"].sum() == result.requests["num_recomputes"].sum() > 0


# --- the checks can fail: each catches its invariant broken in a copy of a good run ----------------
def tampered(run, requests=None, steps=None, summary=None):
    """A copy of `run` whose result has the given tables or summary in place of its own."""
    r = run.result
    result = SimpleNamespace(requests=r.requests if requests is None else requests,
                             steps=r.steps if steps is None else steps,
                             summary=r.summary if summary is None else summary, replicas=r.replicas)
    return replace(run, result=result)


def with_column(frame, row: int, column: str, value):
    frame = frame.copy()
    frame.loc[frame.index[row], column] = value
    return frame


def later_admission_of_a_more_important_request(req):
    """The last request admitted on the first one's replica, made more important and arrived before that
    first one's admission."""
    req = req.sort_values("first_scheduled_time").copy()
    first = req.index[0]
    second = req.index[req["replica"] == req.loc[first, "replica"]][-1]
    req.loc[second, "arrival_time"] = req.loc[first, "first_scheduled_time"] - 1e-3
    req.loc[second, "priority"] = req.loc[first, "priority"] - 1
    return req


TAMPERINGS = {  # name: (what to break in a run of config SEED:267 (swaps), the check)
    "a request twice": (lambda run: tampered(run, requests=pd.concat([run.result.requests,
                                                                     run.result.requests.iloc[:1]])),
                        "check_each_request_once"),
    "a request lost": (lambda run: tampered(run, requests=run.result.requests.iloc[1:]), "check_each_request_once"),
    "TTFT off by 1 ms": (lambda run: tampered(run, requests=with_column(
        run.result.requests, 3, "ttft_s", run.result.requests["ttft_s"].iloc[3] + 1e-3)), "check_request_metrics"),
    "first token before arrival": (lambda run: tampered(run, requests=with_column(
        run.result.requests, 2, "first_token_time", -1.0)), "check_request_times"),
    "a step over budget": (lambda run: tampered(run, steps=with_column(
        run.result.steps, 5, "num_prefill_tokens", 10_000)), "check_step_budgets"),
    "overlapping steps": (lambda run: tampered(run, steps=with_column(
        run.result.steps, 5, "start", run.result.steps["start"].iloc[4])), "check_steps_in_time"),
    "a preemption uncounted": (lambda run: tampered(run, summary={**run.result.summary, "num_preemptions": 0}),
                               "check_summary_metrics"),
    "a swap counted twice": (lambda run: tampered(run, requests=with_column(
        run.result.requests, int(np.argmax(run.result.requests["num_swaps"].to_numpy())), "num_swaps",
        run.result.requests["num_swaps"].max() + 1)), "check_preemption_bookkeeping"),
    "a block never freed": (lambda run: run.schedulers[0][1].block_manager.allocate(Request(10**9, 0.0, 8, 4), 8)
                            or run, "check_kv_returned"),
    "priority order": (lambda run: tampered(run, requests=later_admission_of_a_more_important_request(
        run.result.requests)), "check_priority_first_admissions"),
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_each_check_catches_its_invariant_broken(tampering, trace_folder):
    cfg = random_config(SEED, 267, trace_folder)
    cfg["scheduler"]["queue"] = "priority"
    run = run_capturing(cfg, load_config(cfg))
    assert not broken_invariants(run)
    breaking, check = TAMPERINGS[tampering]
    assert any(line.startswith(f"{check}:") for line in broken_invariants(breaking(run)))


# --- queueing theory: M/D/1 -----------------------------------------------------------------------
MD1_BASE = {"model": {"name": TINY}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 1000},
            "scheduler": {"policy": "continuous", "max_num_seqs": 1}, "cache": {"block_size": 16},
            "workload": {"kind": "poisson", "rate": 1.0, "num_requests": 1, "seed": 7,
                         "prompt_len": {"kind": "constant", "value": 64},
                         "output_len": {"kind": "constant", "value": 16}}}


def md1_service_time() -> float:
    """D: the E2E of a lone request (one at a time, fixed lengths: every service takes exactly this)."""
    return float(simulate(load_config(MD1_BASE)).requests["e2e_s"].iloc[0])


def lindley_waits(arrivals: np.ndarray, service: float) -> np.ndarray:
    """The exact FIFO single-server waits of these arrivals: w[k+1] = max(0, w[k] + D - gap[k])."""
    waits = np.zeros(len(arrivals))
    for k, gap in enumerate(np.diff(arrivals)):
        waits[k + 1] = max(0.0, waits[k] + service - gap)
    return waits


def check_md1(rho: float, num_requests: int, num_batches: int = 20) -> None:
    """One replica serving one request at a time, fixed lengths, Poisson arrivals: an M/D/1 queue.

    Exact: each request's wait (queue_s) is Lindley's recursion on the very same arrivals, and every
    service (first scheduled to finish) takes D. Statistical: the mean wait is Pollaczek-Khinchine's
    rho D / (2 (1 - rho)) at the sampled rate (which removes the rate's own sampling error), within four
    standard errors of the mean. The waits are correlated (a busy period carries over), so the standard
    error is estimated from `num_batches` batch means, not as std / sqrt(n), which would be far too small.
    """
    service = md1_service_time()
    cfg = {**MD1_BASE, "workload": {**MD1_BASE["workload"], "rate": rho / service, "num_requests": num_requests}}
    req = simulate(load_config(cfg)).requests.sort_values("arrival_time")
    arrivals, waits = req["arrival_time"].to_numpy(float), req["queue_s"].to_numpy(float)
    assert np.allclose(waits, lindley_waits(arrivals, service), rtol=0, atol=1e-9)
    services = (req["finish_time"] - req["first_scheduled_time"]).to_numpy(float)
    assert np.allclose(services, service, rtol=0, atol=1e-9)
    rho_sampled = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) * service
    pollaczek_khinchine = rho_sampled * service / (2 * (1 - rho_sampled))
    batch_means = waits[: len(waits) // num_batches * num_batches].reshape(num_batches, -1).mean(axis=1)
    standard_error = batch_means.std(ddof=1) / math.sqrt(num_batches)
    assert abs(waits.mean() - pollaczek_khinchine) <= 4 * standard_error, \
        (rho, waits.mean(), pollaczek_khinchine, standard_error)


@pytest.mark.parametrize("rho", [0.5, 0.85])
def test_md1_waits_follow_lindley_and_pollaczek_khinchine(rho):
    """2,000 requests: the exact checks in full, the mean within 4 SE (about 35% of it at rho 0.5)."""
    check_md1(rho, 2_000)


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.3, 0.5, 0.7, 0.85])
def test_md1_mean_wait_is_pollaczek_khinchine_over_20000_requests(rho):
    """20,000 requests (about 4 s each): 4 SE is about 10% of the mean wait at rho 0.5."""
    check_md1(rho, 20_000)


# --- invalid configs ------------------------------------------------------------------------------
INVALID_BASE = {"model": {"name": TINY}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 100},
                "workload": {"num_requests": 5, "prompt_len": {"kind": "constant", "value": 8},
                             "output_len": {"kind": "constant", "value": 4}}}
LONG_AMONG_SHORT = REPO / "examples/traces/long_among_short.csv"
# (the field the message must start with, the overrides)
INVALID = [
    ("workload.rate", ["workload.rate=-1"]),
    ("workload.rate", ["workload.rate=nan"]),
    ("workload.rate", ["workload.rate=inf"]),
    ("workload.rate", ["workload.rate=fast"]),
    ("cache.block_size", ["cache.block_size=0"]),
    ("cache.block_size", ["cache.block_size=3.0"]),
    ("cache.watermark", ["cache.watermark=1.5"]),
    ("cache.enable_prefix_caching", ['cache.enable_prefix_caching="yes"']),
    ("scheduler.max_num_seqs", ["scheduler.max_num_seqs=0"]),
    ("scheduler.max_num_seqs", ["scheduler.max_num_seqs=true"]),
    ("scheduler.policy", ["scheduler.policy=fifo"]),
    ("scheduler.max_num_batched_tokens", ["scheduler.max_num_batched_tokens=0"]),
    ("scheduler.bogus", ["scheduler.bogus=1"]),
    ("scheduler.max_model_len", ["scheduler.max_model_len=1"]),
    ("scheduler.hybrid_swap_threshold", ["scheduler.hybrid_swap_threshold=-1"]),
    ("scheduler.queue", ["scheduler.queue=lifo"]),
    ("hardware.num_gpu_blocks", ["hardware.num_gpu_blocks=0"]),
    ("hardware.num_gpu_blocks", ["hardware.num_gpu_blocks=-5"]),
    ("hardware.num_gpu_blocks", ["hardware.num_gpu_blocks=2.5"]),
    ("hardware.swap_space_gb", ["hardware.swap_space_gb=-1"]),
    ("hardware.tp", ["hardware.tp=3"]),
    ("hardware.gpu", ["hardware.gpu=bogus"]),
    ("workload.num_requests", ["workload.num_requests=0"]),
    ("workload.num_requests", ["workload.num_requests=1.5"]),
    ("workload.prompt_len.value", ["workload.prompt_len.kind=constant", "workload.prompt_len.value=0"]),
    ("workload.prompt_len.high", ["workload.prompt_len.kind=uniform", "workload.prompt_len.low=5",
                                  "workload.prompt_len.high=2"]),
    ("workload.output_len.median", ["workload.output_len.kind=lognormal", "workload.output_len.median=0"]),
    ("workload.cv", ["workload.kind=gamma", "workload.cv=-2"]),
    ("workload.num_users", ["workload.kind=closed_loop", "workload.num_users=0"]),
    ("workload.think_time", ["workload.kind=closed_loop", "workload.think_time=-1"]),
    ("workload.classes", ["workload.classes=[{name='a', fraction=0.5}]"]),
    ("workload.seed", ["workload.seed=-1"]),
    ("workload.stages[0].duration", ["workload.kind=staged", "workload.stages=[[1, 0]]"]),
    ("workload.max_concurrency", ["workload.max_concurrency=0"]),
    ("workload.request_timeout_s", ["workload.request_timeout_s=0"]),
    ("workload.prefix_len", ["workload.num_prefix_groups=2", "workload.prefix_len=-3"]),
    ("workload.time_scale", ["workload.kind=trace", f'workload.trace="{LONG_AMONG_SHORT}"', "workload.time_scale=0"]),
    ("sim.max_sim_time_s", ["sim.max_sim_time_s=-1"]),
    ("sim.max_sim_time_s", ["sim.max_sim_time_s=nan"]),
    ("slo.ttft_s", ["slo.ttft_s=0"]),
    ("cluster.num_replicas", ["cluster.num_replicas=0"]),
    ("cluster.router", ["cluster.num_replicas=2", "cluster.router=random"]),
    ("cluster.replicas[0].count", ["cluster.replicas=[{count=0}]"]),
    ("autoscaling.max_replicas", ["autoscaling.enabled=true", "autoscaling.max_replicas=0"]),
    ("autoscaling.interval_s", ["autoscaling.enabled=true", "autoscaling.interval_s=0"]),
    ("disaggregation.prefill.count", ["disaggregation.enabled=true", "disaggregation.prefill.count=0"]),
    ("speculative.num_speculative_tokens", ["speculative.method=ngram", "speculative.num_speculative_tokens=0"]),
    ("speculative.acceptance_rate", ["speculative.method=ngram", "speculative.num_speculative_tokens=2",
                                     "speculative.acceptance_rate=1.5"]),
    # refused when the run is set up, not when the file is read
    ("cluster.num_replicas", ["disaggregation.enabled=true", "cluster.num_replicas=2"]),
    ("workload.request_timeout_s", ["disaggregation.enabled=true", "workload.request_timeout_s=1"]),
    ("cache.offload_size_gb", ["cache.enable_prefix_caching=true", "cache.offload_size_gb=1e-7"]),
]


@pytest.mark.parametrize("field, overrides", INVALID, ids=[" ".join(o) for _, o in INVALID])
def test_an_invalid_config_is_refused_on_one_line_naming_the_field(field, overrides):
    with time_allowance(ALLOWANCE_S), pytest.raises(ConfigError) as refused:
        simulate(load_config(INVALID_BASE, overrides))
    message = str(refused.value)
    assert "\n" not in message and message.split(":", 1)[0] == field, message

"""Fit the host-overhead terms to measured per-request timings (BLIS-style, linear in the terms).

Every step's duration is linear in the terms: `compute_scale * gpu_s + schedule_s +
schedule_per_seq_s * seqs + prepare_per_token_s * tokens + sample_per_seq_s * sampled`. With the
schedule of one simulation held fixed, a request's TTFT is the sum of the step time it waited
through from arrival to first token (a fraction of the step it arrived in), its E2E the same to its
last token, its TPOT the part between divided by (tokens - 1); `frontend_s` adds to TTFT and E2E.
So each measured request gives linear equations in the six terms (`RunSystem`). `fit_overhead`
solves the runs' equations together: relative errors of each run's mean TPOT and of the mean TTFT
of requests the simulation did not queue (a queued request's wait is not linear in the terms: the
amount of work ahead of it moves with them, which re-simulating takes care of), plus a lighter
weight on every request, bounds (no negative time,
`compute_scale` within [0.7, 1.4], a front end of at most 50 ms) and a weak pull toward "no overhead" so that terms a data set
cannot tell apart stay at zero. Iterating simulate -> fit moves the schedule with the terms.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fidelity.host_overhead import HostOverhead
from fidelity.runs import METRICS

TERMS = ("compute_scale", "schedule_s", "schedule_per_seq_s", "prepare_per_token_s", "sample_per_seq_s", "frontend_s")
# the terms a fit moves; the others stay as given (per-sequence scheduling is collinear with
# per-sequence sampling in decode steps, per-token preparation with the GPU's own token cost)
FIT_TERMS = ("compute_scale", "schedule_s", "sample_per_seq_s", "frontend_s")
STEP_FEATURES = ("gpu_s", "one", "num_seqs", "num_tokens", "num_sampled")
# typical size of each term (the prior's scale) and its bounds
PRIOR = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
SCALE = np.array([0.3, 5e-3, 1e-4, 1e-5, 1e-4, 0.05])
LOWER = np.array([0.7, 0.0, 0.0, 0.0, 0.0, 0.0])
# a front end (HTTP + tokenization) costs milliseconds; a fit that wants seconds is explaining
# queueing it does not model, so the bound keeps it from hiding that
UPPER = np.array([1.4, 0.05, 1e-3, 1e-4, 1e-3, 0.05])
PRIOR_WEIGHT = 0.01
REQUEST_WEIGHT = 0.3  # share of a (run, metric)'s weight spread over its single requests
QUEUE_FREE_S = 0.02  # a request waiting less than this before its first step counts as not queued
FIT_METRICS = ("ttft_s", "tpot_s")  # E2E = TTFT + (n - 1) x TPOT adds no new equation


def theta_of(overhead: HostOverhead) -> np.ndarray:
    return np.array([getattr(overhead, t) for t in TERMS], dtype=float)


def overhead_of(theta: np.ndarray) -> HostOverhead:
    return HostOverhead(**{t: float(v) for t, v in zip(TERMS, theta)})


@dataclass
class RunSystem:
    """One run's linear equations: per metric, rows A (requests x terms) and measured values y."""

    name: str
    A: dict[str, np.ndarray]
    y: dict[str, np.ndarray]

    def predict_means(self, theta: np.ndarray) -> dict[str, float]:
        return {m: float((self.A[m] @ theta).mean()) for m in METRICS if len(self.y[m])}


def _step_features(steps: pd.DataFrame) -> np.ndarray:
    """Per step, the `STEP_FEATURES` the terms multiply (steps x 5; "one" the constant)."""
    return np.column_stack([np.ones(len(steps)) if c == "one" else steps[c].to_numpy(float) for c in STEP_FEATURES])


def hidden_parts(steps: pd.DataFrame, overhead: HostOverhead) -> tuple[np.ndarray, np.ndarray]:
    """(host hidden, GPU hidden) per step of a simulation run with `overhead`: async scheduling
    overlapped a step that took less than its GPU + host time (`sim.replica.Replica`), and the
    shorter part is the one hidden. Where a part is hidden its terms do not move the step, so
    the step's linear equation leaves them out (the fit's linearization at these terms)."""
    th = theta_of(overhead)
    F = _step_features(steps)
    device, host = th[0] * F[:, 0], F[:, 1:] @ th[1:5]
    if overhead.serialize_per_context_token_s and "context_tokens" in steps:  # a set term, never fitted
        host = host + overhead.serialize_per_context_token_s * steps["context_tokens"].to_numpy(float)
    overlapped = steps["duration"].to_numpy(float) < (device + host) * (1 - 1e-9) - 1e-12
    return overlapped & (device >= host), overlapped & (device < host)


def _window_features(steps: pd.DataFrame, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per (a, b): sum over steps of (overlap of the step with (a, b]) / duration * the step's features
    (without the hidden part's, `hidden_parts`, where the steps table says which)."""
    start = steps["start"].to_numpy(float)
    dur = steps["duration"].to_numpy(float)
    end = start + dur
    F = _step_features(steps)
    if "host_hidden" in steps:
        F[steps["host_hidden"].to_numpy(bool), 1:] = 0.0
        F[steps["gpu_hidden"].to_numpy(bool), 0] = 0.0
    C = np.vstack([np.zeros((1, F.shape[1])), np.cumsum(F, axis=0)])
    out = np.zeros((len(a), F.shape[1]))
    for j, (lo, hi) in enumerate(zip(a, b)):
        if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
            continue
        i0 = int(np.searchsorted(end, lo, side="right"))  # first step ending after lo
        i1 = int(np.searchsorted(end, hi + 1e-12, side="right"))  # steps ending at or before hi
        if i0 >= len(end) or i0 >= i1:
            continue
        row = C[i1] - C[i0]
        if start[i0] < lo:  # arrived mid-step: only the rest of that step counts
            row = row - F[i0] * (1.0 - (end[i0] - lo) / dur[i0])
        out[j] = row
    return out


def run_system(prediction, measured: pd.DataFrame | None = None, means: dict | None = None) -> RunSystem:
    """The linear equations of one simulated run against its measured requests (matched by req_id).

    With `means` instead ({metric: measured mean}: a run measured only in summary, whose requests
    were regenerated from its profile), one equation per metric: the mean over simulated requests.
    """
    req = prediction.requests
    steps = prediction.steps
    if "gpu_s" not in steps:
        raise ValueError(f"run {prediction.run.name}: the simulation did not record step features")
    if means is not None:
        sim = req.assign(ttft_s=np.nan, e2e_s=np.nan, tpot_s=np.nan)
        full = run_system(prediction, sim.assign(req_id=sim["req_id"].astype(str)), None)
        return RunSystem(prediction.run.name,
                         {m: full.A[m].mean(axis=0, keepdims=True) if len(full.A[m]) else full.A[m] for m in METRICS},
                         {m: np.array([means[m]]) if len(full.A[m]) and np.isfinite(means.get(m, np.nan))
                          else np.zeros(0) for m in METRICS})
    meas = measured.set_index(measured["req_id"].astype(str))
    unmeasured = bool(measured["ttft_s"].isna().all())  # the mean-only case: keep every simulated row
    A = {m: [] for m in METRICS}
    y = {m: [] for m in METRICS}
    for engine, rq in req.groupby("engine"):
        st = steps[steps["engine"] == engine].sort_values("start")
        rq = rq[rq["req_id"].astype(str).isin(meas.index) & rq["first_token_time"].notna()]
        if not len(rq):
            continue
        arr, first, fin = (rq[c].to_numpy(float) for c in ("arrival_time", "first_token_time", "finish_time"))
        w_ttft = _window_features(st, arr, first)
        w_e2e = _window_features(st, arr, fin)
        w_dec = _window_features(st, first, fin)
        n = rq["num_output_tokens"].to_numpy(float)
        ones = np.ones((len(rq), 1))
        mrow = meas.loc[rq["req_id"].astype(str)]
        # TTFT equations only for requests the simulation did not queue: a queued request's TTFT is
        # mostly other requests' work, whose amount moves with the terms (not linear in them)
        unqueued = (rq["queue_s"].to_numpy(float) <= QUEUE_FREE_S) if "queue_s" in rq else np.ones(len(rq), bool)
        A["ttft_s"].append(np.hstack([w_ttft, ones])[unqueued])
        y["ttft_s"].append(mrow["ttft_s"].to_numpy(float)[unqueued])
        A["e2e_s"].append(np.hstack([w_e2e, ones]))
        y["e2e_s"].append(mrow["e2e_s"].to_numpy(float))
        keep = n > 1
        A["tpot_s"].append(np.hstack([w_dec[keep] / (n[keep, None] - 1), np.zeros((int(keep.sum()), 1))]))
        y["tpot_s"].append(mrow["tpot_s"].to_numpy(float)[keep])
    A2, y2 = {}, {}
    for m in METRICS:
        a = np.vstack(A[m]) if A[m] else np.zeros((0, len(TERMS)))
        v = np.concatenate(y[m]) if y[m] else np.zeros(0)
        ok = (np.isfinite(v) | unmeasured) & np.all(np.isfinite(a), axis=1)
        A2[m], y2[m] = a[ok], v[ok]
    return RunSystem(prediction.run.name, A2, y2)


def _stack(systems: list[RunSystem]) -> tuple[np.ndarray, np.ndarray]:
    rows, rhs = [], []
    for s in systems:
        for m in FIT_METRICS:
            a, v = s.A[m], s.y[m]
            if not len(v) or not np.mean(v) > 0:
                continue
            scale = float(np.mean(v))
            rows.append(a.mean(axis=0, keepdims=True) / scale)  # the run's mean: the scored quantity
            rhs.append(np.array([1.0]))
            w = np.sqrt(REQUEST_WEIGHT / len(v))
            rows.append(w * a / scale)
            rhs.append(w * v / scale)
    k = len(TERMS)
    rows.append(PRIOR_WEIGHT * np.diag(1.0 / SCALE))
    rhs.append(PRIOR_WEIGHT * PRIOR / SCALE)
    return np.vstack(rows), np.concatenate(rhs).reshape(-1) if rhs else np.zeros(k)


def fit_overhead(systems: list[RunSystem], terms: tuple[str, ...] = FIT_TERMS) -> HostOverhead:
    """The bounded least-squares terms for these runs' equations (see the module doc); `terms` are
    the ones it moves (the others stay at the prior: no overhead, `compute_scale` 1)."""
    unknown = sorted(set(terms) - set(TERMS))
    if unknown:
        raise ValueError(f"terms: {unknown[0]!r} is not a host-overhead term; allowed: {', '.join(TERMS)}")
    if not systems:
        return HostOverhead()
    A, b = _stack(systems)
    free = np.array([t in terms for t in TERMS])
    theta = PRIOR.copy()
    for _ in range(len(TERMS) + 1):  # active set: pin terms that leave their bounds, re-solve the rest
        fixed = ~free
        rhs = b - A[:, fixed] @ theta[fixed]
        sol, *_ = np.linalg.lstsq(A[:, free], rhs, rcond=None)
        theta[free] = sol
        out = (theta < LOWER) | (theta > UPPER)
        if not out.any():
            break
        theta = np.clip(theta, LOWER, UPPER)
        free &= ~out
        if not free.any():
            break
    return overhead_of(np.clip(theta, LOWER, UPPER))

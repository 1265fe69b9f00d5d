"""The engine's own steps on a calibration workload, and the in-step fit they give the profile.

Op curves are timed in isolation; a real engine step also pays host work no op accounts for
(scheduling, batch assembly, module calls, Python glue, sampling bookkeeping) and runs its ops in
other cache conditions (between two steps the scheduler, sampler and bookkeeping evict the caches;
sequences have real, uneven block tables). Both are measured on the real `Engine` (by
`calibrate.engine_bench.measure_engine_steps`, which runs it); this module holds the workload and the fit:

1. the workload: fixed and seeded, sharing nothing with any validation workload (`ENGINE_GROUPS`
   of requests arriving together, prompts log-uniform over 4 to ~1,000 tokens, 2 to 40 outputs),
   run under the four `ENGINE_POLICIES` so that single decodes, decode batches, first and later
   chunks, whole prompts and mixed steps all occur; each engine sleeps before a group (`IDLE_GAPS`);
2. `fit_engine_steps`: the host overhead and the in-step scales of the op curves from those steps,
   and the after-idle excess (`after_idle_s`, and by the length of the pause: `after_idle_curve`);
3. `after_prefill_curve`: the seconds the first decode-only steps after a prefill take on top of their
   plans, by the prefill's size, from a probe of its own (`calibrate.engine_bench.measure_after_prefill`).
"""
from __future__ import annotations

import numpy as np

from policies import BatchPlan

#: (policy, max_num_batched_tokens or None for the model length) of the calibration runs. A budget
#: of 16 gives mixed steps of a few decodes and a short chunk: without it the per-prefill-sequence
#: cost and the dense work per token could not be told apart (both grow with a 64-token chunk), and
#: a 24-token budget's mixed steps came out 26% over (docs/results/2026-12-06-speed-probe.md)
ENGINE_POLICIES = (("chunked", 16), ("chunked", 64), ("chunked", 256), ("continuous", None))
#: sizes of the request groups submitted together (capped at max_num_seqs)
ENGINE_GROUPS = (1, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
# a factor beyond these means the op curves and the engine steps were timed in different machine
# states (a slow stretch on a shared host), not a cache effect: measured in-step factors were 0.9-1.25
SCALE_BOUNDS = (0.67, 1.5)
#: seconds each engine sleeps before a group arrives (a server's engine waits for arrivals in
#: sleeps of up to 50 ms); the first step after it gives `after_idle_s`
IDLE_S = 0.03
#: the pauses the calibration's groups cycle through: a validate run's engine idled 0.01-1 s before
#: its after-idle steps, and their excess grew with the pause (1.9 ms after 10-30 ms, 3.5 ms after
#: 0.3 s and more: docs/results/2026-12-02-cpu-validation.md)
IDLE_GAPS = (0.01, 0.03, 0.1, 0.3)
PARAMS = ("step_s", "per_seq_s", "per_prefill_seq_s", "dense", "attn_prefill", "attn_decode")



def interleave(groups) -> tuple[int, ...]:
    """`groups` smallest, largest, second smallest, second largest, ...: the order the calibration
    runs them in. In ascending order a machine drifting over the calibration (a shared host's speed
    moves from one minute to the next) put more of its slow stretch on the large steps than on the
    small ones, which the fit cannot tell from the dense scale and the per-step constant trading
    against each other (the fit's weakest direction).
    """
    ordered, out = sorted(groups), []
    while ordered:
        out.append(ordered.pop(0))
        if ordered:
            out.append(ordered.pop())
    return tuple(out)


def _features(model, plan: BatchPlan) -> np.ndarray:
    """[1, num_seqs, num_prefill_seqs, dense, attn_prefill, attn_decode, swap] of `plan` (seconds for ops)."""
    b = model.breakdown(plan, scaled=False)
    n_pre = sum(1 for s in plan.seqs if not s.is_decode)
    dense = b["linear"] + b["elementwise"] + b["embed"] + b["lm_head"]
    return np.array([1.0, plan.num_seqs, n_pre, dense, b["attn_prefill"], b["attn_decode"], b["swap"] + b["all_reduce"]])


def _solve(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import least_squares

    # the per-step constant may be negative: the ops timed alone pay a per-step floor (weights read
    # cold, each micro-benchmark's own calls) that a step's ops, sharing warm caches, do not. Held at
    # >= 0 it sat at 0 in every calibration and the dense scale shrank in its place (0.67-0.87), which
    # took as much off the compute of a long chunk as off a decode's floor: prefill-only steps of a
    # 64-token chunk -7%, of 256 -15%. Bounded so that no step of at least one token can go below 0.
    lo = [-SCALE_BOUNDS[0] * float(X[:, 3].min()), 0.0, 0.0] + [SCALE_BOUNDS[0]] * 3
    hi = [np.inf, np.inf, np.inf] + [SCALE_BOUNDS[1]] * 3
    A, fixed = X[:, :6], X[:, 6]

    def rel(p):
        return (A @ p + fixed - y) / y

    x0 = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    return least_squares(rel, x0, bounds=(lo, hi), loss="cauchy", f_scale=0.05).x


#: decode-only steps after one that carried prefill tokens that get a cost of their own: on the tiny
#: CPU model the first three or four ran 18, 10, 6, 4% over the model in validation runs (a warm-up
#: after any prefill, larger after a longer one), ~0 from the sixth on
AFTER_PREFILL_STEPS = 5
#: prefill sizes the after-prefill probe times (`calibrate.engine_bench.measure_after_prefill`): the excess grew
#: with the prefill's size, on the tiny CPU model from ~0.1 ms after 16 tokens to ~1.2 ms after 1,024
#: on the first decode step, alike with 1 or 4 decoding sequences (docs/results/2026-12-06-after-prefill.md)
AFTER_PREFILL_SIZES = (16, 64, 256, 1024)
#: steps of one probe cycle: the prefill, then decode-only steps; the last few are the cycle's steady ones
AFTER_PREFILL_CYCLE = 12
#: sequences decoding through the probe (the excess is a cost per step, not per sequence)
AFTER_PREFILL_DECODERS = 2


def after_prefill_curve(records: list[tuple[int, int, float]], min_cycles: int = 2) -> dict | None:
    """`meta.after_prefill_curve` from the probe's `records` (prefill tokens of the cycle's prefill, k, seconds),
    k = 0 for the prefill step itself, 1, 2, ... for the decode-only steps after it: per prefill size, the
    median seconds of the k-th step (k <= `AFTER_PREFILL_STEPS`) less the median of the same cycles' steps
    from k = AFTER_PREFILL_STEPS + 2 on, at least 0, and never less after a longer prefill (its
    activations leave no more of the caches to the decode step; the largest step of the noise goes).
    None with fewer than `min_cycles` cycles of some size."""
    by_size: dict[int, dict[int, list[float]]] = {}
    for prefill_tokens, k, t in records:
        if k >= 1 and t > 0:
            by_size.setdefault(prefill_tokens, {}).setdefault(k, []).append(t)
    sizes = sorted(by_size)
    rows = []
    for n in sizes:
        steps = by_size[n]
        steady = [t for k, ts in steps.items() if k > AFTER_PREFILL_STEPS + 1 for t in ts]
        near = [steps.get(k, []) for k in range(1, AFTER_PREFILL_STEPS + 1)]
        if min(len(ts) for ts in near) < min_cycles or len(steady) < min_cycles:
            return None
        base = float(np.median(steady))
        rows.append([max(float(np.median(ts)) - base, 0.0) for ts in near])
    if not rows:
        return None
    rows = np.maximum.accumulate(np.array(rows), axis=0)
    if not rows.any():  # nothing to charge (a device whose caches a prefill does not disturb)
        return None
    return {"prefill_tokens": sizes, "excess_s": [[round(float(v), 7) for v in row] for row in rows]}


def split_after_idle(steps: list[tuple]) -> tuple[list, list]:
    """([(configuration, plan, seconds)] of steady steps, [(configuration, plan, seconds, pause seconds)]
    of steps after an idle pause) of `steps` (configuration, plan, seconds[, after_idle]), leaving out
    empty and untimed steps; after_idle is the pause in seconds (True: `IDLE_S`), false for a steady step."""
    steady, idle = [], []
    for n, p, t, *rest in steps:
        if t > 0 and not p.is_empty:
            if rest and rest[0]:
                idle.append((n, p, t, IDLE_S if rest[0] is True else float(rest[0])))
            else:
                steady.append((n, p, t))
    return steady, idle


def fit_engine_steps(model, steps: list[tuple]) -> dict:
    """The in-step fit of `steps`: params, residual points and errors.

    `steps`: (configuration, plan, seconds[, after_idle]). With the op curves' breakdown of each plan,

        measured = a + b * num_seqs + c * num_prefill_seqs
                   + s_dense * (GEMMs, norms, rotary, embedding, LM head, sampler)
                   + s_prefill * prefill attention + s_decode * decode attention + swaps

    fitted on relative error with a Cauchy loss (a step hit by a burst of load from other processes
    must not bend it), a, b, c >= 0 and the scales within `SCALE_BOUNDS`. a + b * num_seqs becomes
    `step_overhead`, c * num_prefill_seqs `prefill_overhead`, the scales `meta.in_step_scale` (see
    `sim.latency.profiled`). Why scales and not only an additive residual: an op's in-step cost differs
    from its isolated cost by a factor (caches), so a residual that fits small steps is wrong for large
    ones. The error is reported in-sample and leave-one-configuration-out (each scheduler configuration
    predicted by the fit on the others). Steps that followed an idle pause (cold caches) are left out;
    the median of their time over the fit's prediction is `after_idle_s` (>= 0; 0 with fewer than 3
    such steps; the simulator's replica adds it to a step that follows an idle wait), and with pauses of
    several lengths (at least 3 steps each) `after_idle_curve` gives it per pause length.
    """
    steps, idle = split_after_idle(steps)
    if len(steps) < 8:
        raise ValueError(f"engine steps: {len(steps)} measured steps are too few to fit the engine's overhead")
    X = np.array([_features(model, p) for _, p, _ in steps])
    y = np.array([t for _, _, t in steps])
    names = np.array([n for n, _, _ in steps])
    params = _solve(X, y)
    pred = X[:, :6] @ params + X[:, 6]
    err = np.abs(pred - y) / y * 100.0
    holdout, by_config = [], {}
    for name in np.unique(names):
        if len(np.unique(names)) < 2:
            break
        train = names != name
        p = _solve(X[train], y[train])
        e = np.abs(X[~train, :6] @ p + X[~train, 6] - y[~train]) / y[~train] * 100.0
        holdout.extend(e)
        by_config[str(name)] = round(float(np.median(e)), 2)
    # residual points of the host-overhead curves: measured minus the scaled ops (and, for
    # step_overhead, minus the prefill extra), one row per step
    ops_part = X[:, 3:6] @ params[3:6] + X[:, 6]
    step_pts = [[float(X[i, 1]), float(y[i] - ops_part[i] - params[2] * X[i, 2])] for i in range(len(y))]
    pre_pts = [[float(X[i, 2]), float(y[i] - ops_part[i] - params[0] - params[1] * X[i, 1])]
               for i in range(len(y)) if X[i, 2] > 0]
    after_idle, curve = 0.0, None
    if len(idle) >= 3:
        xi = np.array([_features(model, p) for _, p, _, _ in idle])
        excess = np.array([t for _, _, t, _ in idle]) - (xi[:, :6] @ params + xi[:, 6])
        after_idle = max(float(np.median(excess)), 0.0)
        gaps = np.array([g for *_, g in idle])
        knots = sorted(set(gaps.tolist()))
        if len(knots) >= 2 and all((gaps == g).sum() >= 3 for g in knots):
            # the median excess per pause, never less after a longer pause (caches only get colder)
            ys = np.maximum.accumulate([max(float(np.median(excess[gaps == g])), 0.0) for g in knots])
            curve = {"idle_s": [float(g) for g in knots], "excess_s": [round(float(y), 7) for y in ys]}
    return {
        "after_idle_s": after_idle, "after_idle_curve": curve,
        "params": dict(zip(PARAMS, (float(v) for v in params))),
        "step_points": step_pts, "prefill_points": pre_pts,
        "max_num_seqs": int(X[:, 1].max()),
        "stats": {"num_steps": int(len(y)), "num_after_idle_steps": len(idle),
                  "configurations": sorted(set(names.tolist())),
                  "median_abs_pct": round(float(np.median(err)), 2),
                  "p90_abs_pct": round(float(np.percentile(err, 90)), 2),
                  "max_abs_pct": round(float(err.max()), 2),
                  "holdout_median_abs_pct": round(float(np.median(holdout)), 2) if holdout else None,
                  "holdout_p90_abs_pct": round(float(np.percentile(holdout, 90)), 2) if holdout else None,
                  "holdout_max_abs_pct": round(float(np.max(holdout)), 2) if holdout else None,
                  # each configuration's own steps predicted by the fit on the others (continuous from
                  # the two chunked ones: the policy's steps as the rest of the calibration sees them)
                  "holdout_median_abs_pct_by_configuration": by_config},
    }

"""Check an imported profile against measured static-batch step times (Splitwise, DGX-H100/A100).

../shared/data/groundtruth/splitwise-static-batches/data/perf_model.csv has, per (model, hardware,
TP, prompt size, batch size, output tokens), the measured prefill iteration of the whole batch
(`prompt_time`, ms) and one decode iteration (`token_time`, ms). Each row becomes two BatchPlans:
`batch_size` prefills of `prompt_size` tokens, and `batch_size` decodes at the mean KV length of
the generation (prompt + token_size / 2). `check` predicts both with given latency models; it
fits nothing (the data is the test set).

`held_out_check` is for the eager engine of 2023 (`sim.latency.eager.EagerLatencyModel`): the
kernel curves and the launch path come from other data (`calibrate.importers.eager_launch`); the
host work outside the forward pass (a constant per step, per sequence and per prompt step, which
no published source gives for this engine and host) is fitted on this data, **leave one TP out**:
the points of each TP are predicted with terms fitted on the other TPs' points only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from calibrate.importers.eager_launch import host_work_ops
from policies import BatchPlan, Request, ScheduledSeq
from sim.latency.eager import EagerLatencyModel
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel

CSV = Path("groundtruth/splitwise-static-batches/data/perf_model.csv")
MODELS = {"llama2-70b": "llama-2-70b"}
HARDWARE = {"h100-80gb": "H100", "a100-80gb": "A100"}


def prefill_plan(batch_size: int, prompt_size: int) -> BatchPlan:
    seqs = tuple(ScheduledSeq(Request(i, 0.0, prompt_size, 1), prompt_size, 0, True) for i in range(batch_size))
    return BatchPlan(0, seqs)


def decode_plan(batch_size: int, kv_len: int) -> BatchPlan:
    seqs = tuple(ScheduledSeq(Request(i, 0.0, kv_len, 2), 1, kv_len - 1, True) for i in range(batch_size))
    return BatchPlan(0, seqs)


def check(shared_data: Path, models: dict[int, ProfiledLatencyModel], hardware: str = "h100-80gb",
          model: str = "llama2-70b"):
    """DataFrame: one row per measured (config, phase) with measured and predicted ms and the error.

    `models` maps TP -> latency model; rows of other TPs are skipped. Repeats of a config are
    averaged first (the CSV has ~5 repeats of each point).
    """
    import pandas as pd

    df = pd.read_csv(Path(shared_data) / CSV)
    df = df[(df.model == model) & (df.hardware == hardware) & df.tensor_parallel.isin(list(models))]
    keys = ["tensor_parallel", "prompt_size", "batch_size", "token_size"]
    df = df.groupby(keys, as_index=False)[["prompt_time", "token_time"]].median()
    rows = []
    for r in df.itertuples():
        lm = models[int(r.tensor_parallel)]
        pred_p = lm.step_time(prefill_plan(int(r.batch_size), int(r.prompt_size))) * 1e3
        kv = int(r.prompt_size) + int(r.token_size) // 2
        pred_t = lm.step_time(decode_plan(int(r.batch_size), kv)) * 1e3
        for phase, measured, predicted in (("prefill", r.prompt_time, pred_p), ("decode", r.token_time, pred_t)):
            rows.append({"tp": int(r.tensor_parallel), "prompt_size": int(r.prompt_size),
                         "batch_size": int(r.batch_size), "token_size": int(r.token_size), "phase": phase,
                         "measured_ms": float(measured), "predicted_ms": float(predicted),
                         "error_pct": float((predicted - measured) / measured * 100.0)})
    return pd.DataFrame(rows)


def summary(rows) -> dict:
    """Median and p90 absolute % error, overall and per phase."""
    out = {}
    for name, part in [("all", rows)] + list(rows.groupby("phase")):
        err = np.abs(part.error_pct.to_numpy())
        out[name] = {"n": int(err.size), "median_abs_pct": float(np.median(err)),
                     "p90_abs_pct": float(np.percentile(err, 90))}
    return out


# --- the eager (2023) engine: launch path overlapped with the GPU, host terms fitted leave-one-TP-out ---
HOST_TERMS = ("step_s", "per_seq_s", "prefill_s")


def host_ops(step_s: float, per_seq_s: float, prefill_s: float, source: str) -> dict:
    """`step_overhead` and `prefill_overhead` ops of the host work outside the forward pass
    (`calibrate.importers.eager_launch.host_work_ops`; `servesim calibrate import --host-terms` writes the same)."""
    return host_work_ops(step_s, per_seq_s, prefill_s, source)


def eager_profile(kernels: Profile, terms: dict | None = None, source: str = "") -> Profile:
    """A copy of `kernels` (a kernel-only profile with `meta.eager_launch`) with the host terms added
    (none: the launch path alone)."""
    out = Profile(meta=dict(kernels.meta), model=dict(kernels.model), ops=dict(kernels.ops))
    for name in ("step_overhead", "prefill_overhead"):
        out.ops.pop(name, None)
    if terms:
        out.ops.update(host_ops(terms["step_s"], terms["per_seq_s"], terms["prefill_s"], source))
        out.meta["host_terms"] = {**terms, "source": source}
    return out


def fit_host_terms(rows) -> dict:
    """Host time outside the forward pass from `rows` of `check` made with launch-path-only models:
    measured - predicted = step_s + per_seq_s x batch (+ prefill_s for prefill rows), all >= 0,
    least squares on relative error with a soft-L1 loss, so that a few odd measurements do not pull
    the fit (TP2's batch of 64: a 360 ms prefill after 2.4 s for 32; at TP2 such batches likely
    exceed the KV cache left beside 69 GB of weights a GPU)."""
    from scipy.optimize import least_squares

    meas = rows.measured_ms.to_numpy() * 1e-3
    resid = meas - rows.predicted_ms.to_numpy() * 1e-3
    batch = rows.batch_size.to_numpy().astype(float)
    is_prefill = (rows.phase == "prefill").to_numpy().astype(float)

    def f(p):
        return (p[0] + p[1] * batch + p[2] * is_prefill - resid) / meas

    fit = least_squares(f, x0=[5e-3, 1e-4, 5e-3], bounds=([0, 0, 0], [1.0, 0.1, 1.0]), loss="soft_l1", f_scale=0.05)
    return dict(zip(HOST_TERMS, (float(v) for v in fit.x)))


def held_out_check(shared_data: Path, kernels: dict[int, Profile], hardware: str = "h100-80gb"):
    """(rows, terms): every TP predicted by an `EagerLatencyModel` whose host terms were fitted on the
    *other* TPs' points only (leave one TP out); `terms[tp]` are the terms used for TP `tp`.

    `kernels` maps TP -> kernel-only profile with `meta.eager_launch` (the launch path, not fitted).
    """
    import pandas as pd

    base = check(shared_data, {tp: EagerLatencyModel(eager_profile(p)) for tp, p in kernels.items()}, hardware)
    parts, terms = [], {}
    for tp, p in kernels.items():
        others = sorted(t for t in kernels if t != tp)
        terms[tp] = fit_host_terms(base[base.tp != tp])
        src = f"fitted on Splitwise {hardware} TP {'/'.join(map(str, others))} step times (TP {tp} held out)"
        parts.append(check(shared_data, {tp: EagerLatencyModel(eager_profile(p, terms[tp], src))}, hardware))
    return pd.concat(parts, ignore_index=True), terms


def machine_terms(shared_data: Path, kernels: dict[int, Profile], hardware: str) -> tuple[dict, str]:
    """(terms, what they were fitted on): the host work outside the forward pass fitted on every TP
    of `hardware` in `kernels` (TP -> kernel-only profile with `meta.eager_launch`)."""
    base = check(shared_data, {tp: EagerLatencyModel(eager_profile(p)) for tp, p in kernels.items()}, hardware)
    src = (f"fitted on Splitwise {hardware} TP {'/'.join(map(str, sorted(kernels)))} step times "
           f"({len(base)} points)")
    return fit_host_terms(base), src


def other_hardware_check(shared_data: Path, kernels: dict[int, Profile], hardware: str,
                         fit_kernels: dict[int, Profile], fit_hardware: str):
    """(rows, terms): `hardware`'s points predicted with host terms fitted on every TP of `fit_hardware`
    (the same engine on another machine): no step time of `hardware` is fitted at all."""
    if fit_hardware == hardware:
        raise ValueError(f"fit_hardware: must differ from the scored hardware {hardware!r}")
    terms, src = machine_terms(shared_data, fit_kernels, fit_hardware)
    rows = check(shared_data, {tp: EagerLatencyModel(eager_profile(p, terms, src)) for tp, p in kernels.items()},
                 hardware)
    return rows, {tp: terms for tp in kernels}

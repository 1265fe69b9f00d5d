"""Check an imported profile against measured static-batch step times (Splitwise, DGX-H100/A100).

../shared/data/groundtruth/splitwise-static-batches/data/perf_model.csv has, per (model, hardware,
TP, prompt size, batch size, output tokens), the measured prefill iteration of the whole batch
(`prompt_time`, ms) and one decode iteration (`token_time`, ms). Each row becomes two BatchPlans:
`batch_size` prefills of `prompt_size` tokens, and `batch_size` decodes at the mean KV length of
the generation (prompt + token_size / 2). The profile predicts both; nothing here is fitted to
this data (it is the test set).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from policies import BatchPlan, Request, ScheduledSeq
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

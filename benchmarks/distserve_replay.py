"""Replay DistServe's real A100 runs (vLLM and disaggregated, OPT-13B, ShareGPT) and compare means.

Data: ../shared/data/groundtruth/distserve-a100-opt13b (DistServe's alignment data, Apache-2.0; see
its README): per request prompt/output lengths, issue time, TTFT, latency. Each run is replayed
with its recorded arrivals and lengths on the layout its name gives (`layout` lists them: one
vLLM replica, or DistServe's prefill + decode instances). Latency models: `roofline` (A100
datasheet) and `distserve` (DistServe's own per-TP coefficients, profile_data/profiler-a100-80g.*.json).

    .venv/bin/python benchmarks/distserve_replay.py [--latency roofline,distserve] [--runs 'vllm-*'] [--csv out.csv]
        [--plot replay.png]

Prints, per run, measured vs predicted mean TTFT and TPOT (ms) and the relative errors.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("SERVESIM_SHARED_DATA", REPO.parent / "shared" / "data")) / "groundtruth" / \
    "distserve-a100-opt13b"
NAME = re.compile(r"^(vllm|distserve)(?:-c(\d)(\d)d(\d)(\d))?-(\d+)-([\d.]+)\.exp$")


def read_run(path: Path) -> pd.DataFrame:
    """Per-request measured table: arrival (s from the first), lengths, ttft_s, tpot_s (vLLM definition)."""
    from fidelity.sources.distserve import distserve_requests

    req = distserve_requests(path).copy()
    req["arrival_time"] -= req["arrival_time"].min()
    n = req["num_output_tokens"]
    req["tpot_s"] = np.where(n > 1, (req["e2e_s"] - req["ttft_s"]) / (n - 1).clip(lower=1), np.nan)
    return req.sort_values("arrival_time").reset_index(drop=True)


def kv_blocks(tp: int, pp: int = 1) -> int | None:
    path = DATA / "profile_data" / "max_num_tokens.csv"
    if not path.is_file():
        return None
    kv = pd.read_csv(path)
    row = kv[(kv["model"] == "facebook/opt-13b") & (kv["tp"] == tp) & (kv["pp"] == pp)]
    return int(row["max_num_tokens"].iloc[0]) // 16 if len(row) else None


def layout(name: str) -> tuple[dict, str]:
    """Config sections for a run name, and a short description.

    `vllm-N-RATE`: one OPT-13B replica, TP 1, vLLM of early 2024, whole-prompt prefill first
    (`continuous`), 256 seqs, 2048-token budget (the data's README: assumed defaults).
    `distserve-c21d11-*`: prefill TP 2 + decode TP 1; `distserve-c21d12-*`: decode "pp 2" run as
    decode TP 2 (no pipeline parallelism here: an approximation). Plain `distserve-*` (layout not
    recorded) is taken as c21d11, whose measured means match theirs. DistServe returns the first
    token from the prefill instance (`first_token = "prefill"`); KV moves over NVLink (one 4xA100
    node); KV capacity per instance from profile_data/max_num_tokens.csv (`kv_blocks`).
    """
    m = NAME.match(name)
    kind, ctp, cpp, dtp, dpp = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
    base = {
        "model": {"name": "OPT-13B"},
        "hardware": {"gpu": "A100-80G", "tp": 1, "num_gpu_blocks": kv_blocks(1)},
        "scheduler": {"policy": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 2048,
                      "max_model_len": 2048},
    }
    if kind == "vllm":
        return base, "vLLM 1 x TP1"
    if ctp is None:
        # not recorded; their measured TTFT/TPOT equal the c21d11 runs' at the same rate (e.g.
        # distserve-300-3: 88/38 ms, distserve-c21d11-300-3: 92/38 ms), so assume that layout
        ctp, cpp, dtp, dpp = 2, 1, 1, 1
        desc = "DistServe (not recorded: assumed P TP2 + D TP1)"
    else:
        ctp, cpp, dtp, dpp = int(ctp), int(cpp), int(dtp), int(dpp)
        desc = f"DistServe P TP{ctp} + D TP{dtp}" + (f" (pp{dpp} run as TP{dtp * dpp})" if dpp > 1 else "")
    p_tp, d_tp = ctp * cpp, dtp * dpp
    base["disaggregation"] = {
        "enabled": True, "link": "nvlink", "first_token": "prefill",
        "prefill": {"count": 1, "tp": p_tp, "hardware": {"num_gpu_blocks": kv_blocks(ctp, cpp)}},
        "decode": {"count": 1, "tp": d_tp, "hardware": {"num_gpu_blocks": kv_blocks(dtp, dpp)}},
    }
    return base, desc


def distserve_factory(kind: str):
    """Per-replica DistServe coefficients: the `vllm` file for vLLM runs, the `distserve` file otherwise."""
    from fidelity.sources.distserve import DistServeLatencyModel

    path = DATA / "profile_data" / f"profiler-a100-80g.{kind}.json"
    return lambda config: DistServeLatencyModel(path, tp=config.hardware.tp)


def predict(path: Path, measured: pd.DataFrame, latency: str) -> pd.DataFrame:
    from sim.config import load_config
    from fidelity.replay import ReplayWorkload
    from sim.runner import simulate

    sections, _ = layout(path.name)
    config = load_config(sections)
    model = None
    if latency == "distserve":
        model = distserve_factory("vllm" if path.name.startswith("vllm") else "distserve")
        if not config.disaggregation.enabled:
            model = model(config)
    table = measured[["arrival_time", "num_prompt_tokens", "num_output_tokens"]].copy()
    table["num_prompt_tokens"] = table["num_prompt_tokens"].clip(upper=2047)  # OPT's 2048-token context
    return simulate(config, latency_model=model, workload=ReplayWorkload(table)).requests


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency", default="roofline,distserve", help="latency models (roofline, distserve)")
    ap.add_argument("--runs", default="*", help="glob over run file names (default: all)")
    ap.add_argument("--csv", help="also write the table here")
    ap.add_argument("--plot", help="write predicted-vs-measured scatter plots (PNG) here")
    args = ap.parse_args(argv)
    folder = DATA / "data-ground-truth" / "opt-13b-sharegpt"
    if not folder.is_dir():
        print(f"skipped: {folder} not found (set SERVESIM_SHARED_DATA)")
        return 0
    files = sorted((f for f in folder.glob(f"{args.runs}.exp") if NAME.match(f.name)),
                   key=lambda f: (f.name.split("-")[0], NAME.match(f.name).group(1), len(f.name), f.name))
    models = [m.strip() for m in args.latency.split(",") if m.strip()]
    rows = []
    for f in tqdm(files, desc="runs", file=sys.stderr):
        measured = read_run(f)
        row = {"run": f.stem, "layout": layout(f.name)[1], "requests": len(measured),
               "ttft_ms": measured["ttft_s"].mean() * 1e3, "tpot_ms": measured["tpot_s"].mean() * 1e3}
        for m in models:
            pred = predict(f, measured, m)
            row[f"{m}_ttft_ms"] = pred["ttft_s"].mean() * 1e3
            row[f"{m}_tpot_ms"] = pred["tpot_s"].mean() * 1e3
            row[f"{m}_ttft_err"] = row[f"{m}_ttft_ms"] / row["ttft_ms"] - 1
            row[f"{m}_tpot_err"] = row[f"{m}_tpot_ms"] / row["tpot_ms"] - 1
        rows.append(row)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_rows", 100):
        fmt = {c: (lambda v: f"{v:+.0%}") if c.endswith("_err") else (lambda v: f"{v:.0f}")
               for c in table.columns if c.endswith(("_ms", "_err"))}
        print(table.to_string(index=False, formatters=fmt))
    for m in models:
        for metric in ("ttft", "tpot"):
            err = table[f"{m}_{metric}_err"].abs()
            print(f"{m:>9} {metric}: median |error| {err.median():.0%} over {len(err)} runs")
    if args.csv:
        table.to_csv(args.csv, index=False)
    if args.plot:
        plot(table, models, args.plot)
    return 0


def plot(table: pd.DataFrame, models: list[str], path: str) -> None:
    """Predicted vs measured mean TTFT and TPOT, log-log, one marker per run kind and latency model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    kind = np.where(table["run"].str.startswith("vllm"), "vLLM", "DistServe")
    for ax, metric in zip(axes, ("ttft", "tpot")):
        lo = hi = None
        for m, marker in zip(models, "os^"):
            for k in ("vLLM", "DistServe"):
                sel = kind == k
                x, y = table.loc[sel, f"{metric}_ms"], table.loc[sel, f"{m}_{metric}_ms"]
                ax.scatter(x, y, marker=marker, alpha=0.7, label=f"{k}, {m}")
                lo = min(x.min(), y.min(), lo if lo is not None else np.inf)
                hi = max(x.max(), y.max(), hi if hi is not None else 0)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured mean {metric.upper()} (ms)")
        ax.set_ylabel(f"predicted mean {metric.upper()} (ms)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle("DistServe A100 OPT-13B runs: servesim replay vs measurement")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())

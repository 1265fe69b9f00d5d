"""Sweep plots: latency percentiles and goodput against load (matplotlib, PNG).

One line per combination of the other swept keys, so a sweep over rate x layout shows each
layout's curve. matplotlib is the `calibrate` extra; without it no plot is written.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

LATENCY_PANELS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
PERCENTILES = ("p50", "p90", "p99")


def _pyplot():
    """matplotlib.pyplot on the Agg backend, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, path: str | Path) -> Path:
    """Write `fig` as a PNG at `path` and free it."""
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _groups(df, x: str, keys: Sequence[str]):
    others = [k for k in keys if k != x and k in df and df[k].nunique() > 1]
    if not others:
        yield "", df.sort_values(x)
        return
    for values, sub in df.groupby(others, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        yield ", ".join(f"{k}={v}" for k, v in zip(others, values)), sub.sort_values(x)


def plot_sweep(df, x: str, keys: Sequence[str], path: str | Path, title: str = "") -> Path | None:
    """Latency percentiles (ms) and goodput vs `x`; returns the PNG path (None without matplotlib)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    styles = {"p50": ":", "p90": "--", "p99": "-"}
    for label, sub in _groups(df, x, keys):
        color = None
        for ax, (metric, name) in zip(axes[:3], LATENCY_PANELS):
            for p in PERCENTILES:
                col = f"{metric}_{p}"
                if col in sub:
                    line, = ax.plot(sub[x], sub[col] * 1e3, styles[p], marker="o", ms=3, color=color,
                                    label=f"{label} {p}".strip())
                    color = line.get_color()
            ax.set_title(f"{name} percentiles")
            ax.set_xlabel(x)
            ax.set_ylabel("ms")
            ax.set_yscale("log")
        ax = axes[3]
        ax.plot(sub[x], sub["slo_attainment"] * 100, marker="o", color=color, label=label or "attainment")
        ax.set_title("SLO attainment (goodput %)")
        ax.set_xlabel(x)
        ax.set_ylabel("% of requests meeting every SLO")
        ax.set_ylim(0, 105)
    axes[3].axhline(90, color="grey", lw=0.8, ls="--")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[3].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return _save(plt, fig, path)


def plot_search(table, min_attainment: float, path: str | Path, per_gpu: bool = False) -> Path | None:
    """SLO attainment against rate for each layout of a capacity search, the knee marked."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for layout, sub in table.groupby("layout", sort=False):
        sub = sub.sort_values("rate")
        x = sub["rate"] / sub["num_gpus"] if per_gpu else sub["rate"]
        line, = ax.plot(x, sub["slo_attainment"] * 100, marker="o", ms=3, label=layout)
        ok = sub[sub["slo_met"]]
        if len(ok):
            knee = ok["rate"].max() / (ok["num_gpus"].iloc[0] if per_gpu else 1)
            ax.axvline(knee, color=line.get_color(), ls=":", lw=1)
    ax.axhline(min_attainment * 100, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("request rate per GPU (req/s)" if per_gpu else "request rate (req/s)")
    ax.set_ylabel("% of requests meeting every SLO")
    ax.set_title("SLO search: attainment vs load (dotted: highest sustained rate)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(plt, fig, path)


def plot_plan(table, path: str | Path) -> Path | None:
    """Every planner candidate: cost per hour against GPU count, filled where the SLO is met."""
    plt = _pyplot()
    if plt is None or "cost_per_hour" not in table:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    t = table.dropna(subset=["cost_per_hour"])
    groups = list(t.groupby(["layout", "gpu"], sort=True))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, ((layout, gpu), sub) in enumerate(groups):
        marker = "o" if layout == "colocated" else "s"
        color = colors[k % len(colors)]
        dx = (k - (len(groups) - 1) / 2) * 0.06  # side by side: layouts of one GPU count often cost the same
        met = sub[sub["slo_met"].astype(bool)]
        miss = sub[~sub["slo_met"].astype(bool)]
        ax.scatter(met["num_gpus"] + dx, met["cost_per_hour"], marker=marker, color=color,
                   label=f"{layout} {gpu}: meets SLO")
        ax.scatter(miss["num_gpus"] + dx, miss["cost_per_hour"], marker=marker, facecolors="none", edgecolors=color,
                   label=f"{layout} {gpu}: misses")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("USD per hour")
    ax.set_title("Planner candidates")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(plt, fig, path)

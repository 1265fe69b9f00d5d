"""Capacity plots (matplotlib, PNG): a sweep's latency percentiles and goodput against load, a
search's attainment against rate, a plan's candidates' cost against what each gives.

One line per combination of the other swept keys, so a sweep over rate x layout shows each
layout's curve. matplotlib is the `calibrate` extra; without it no plot is written.
"""
from __future__ import annotations

import statistics
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
    """SLO attainment against rate for each layout of a capacity search, the knee marked; a search
    over several workload seeds (a `seed` column) draws one line a seed, in its layout's colour,
    and marks the median of the seeds' answers (`max_sustained_rate`)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for layout, by_layout in table.groupby("layout", sort=False):
        seeds = list(by_layout.groupby("seed", sort=False)) if "seed" in by_layout else [(None, by_layout)]
        color, knees = None, []
        for i, (_, sub) in enumerate(seeds):
            sub = sub.sort_values("rate")
            x = sub["rate"] / sub["num_gpus"] if per_gpu else sub["rate"]
            line, = ax.plot(x, sub["slo_attainment"] * 100, marker="o", ms=3, color=color,
                            label=layout if i == 0 else None, alpha=1.0 if len(seeds) == 1 else 0.5)
            color = line.get_color()
            ok = sub[sub["slo_met"]]
            if len(ok):
                rate = sub["max_sustained_rate"].iloc[0] if "max_sustained_rate" in sub else ok["rate"].max()
                knees.append(rate / (ok["num_gpus"].iloc[0] if per_gpu else 1))
        if knees:
            ax.axvline(statistics.median(knees), color=color, ls=":", lw=1)
    ax.axhline(min_attainment * 100, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("request rate per GPU (req/s)" if per_gpu else "request rate (req/s)")
    ax.set_ylabel("% of requests meeting every SLO")
    ax.set_title("SLO search: attainment vs load (dotted: highest sustained rate"
                 + ("; the seeds' median)" if "seed" in table and table["seed"].nunique() > 1 else ")"))
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(plt, fig, path)


PLAN_PANELS = (("slo_attainment", None, "% of requests meeting every SLO", 100.0),
               ("ttft_s_p90", "slo_ttft_s", "p90 TTFT (ms)", 1e3),
               ("tpot_s_p90", "slo_tpot_s", "p90 TPOT (ms)", 1e3))


def plot_plan(table, path: str | Path, min_attainment: float | None = None, chosen: dict | None = None) -> Path | None:
    """Every planner candidate at the target load: what each costs per hour against what it gives
    (SLO attainment, p90 TTFT, p90 TPOT, each with its target), filled where the SLO is met; `chosen`
    (a row: the cheapest that meets it) starred. At one offered load, cost per GPU-hour is what
    separates candidates and latency is what more money buys, so both axes carry information."""
    plt = _pyplot()
    if plt is None or "cost_per_hour" not in table:
        return None
    t = table.dropna(subset=["cost_per_hour"])
    panels = [p for p in PLAN_PANELS if p[0] in t and t[p[0]].notna().any()]
    if t.empty or not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    axes = axes[0]
    groups = list(t.groupby(["layout", "gpu"], sort=True))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, ((layout, gpu), sub) in enumerate(groups):
        marker = "o" if layout == "colocated" else "s"
        color = colors[k % len(colors)]
        # side by side: layouts of one GPU count often cost the same
        x = sub["cost_per_hour"] * (1 + (k - (len(groups) - 1) / 2) * 0.015)
        met = sub["slo_met"].astype(bool).to_numpy()
        for ax, (col, _, _, scale) in zip(axes, panels):
            y = sub[col] * scale
            ax.scatter(x[met], y[met], marker=marker, color=color, label=f"{layout} {gpu}: meets SLO")
            ax.scatter(x[~met], y[~met], marker=marker, facecolors="none", edgecolors=color,
                       label=f"{layout} {gpu}: misses")
    for ax, (col, target, label, scale) in zip(axes, panels):
        line = min_attainment if target is None else (t[target].dropna().iloc[0] if target in t and
                                                      t[target].notna().any() else None)
        if line is not None:
            ax.axhline(float(line) * scale, color="grey", ls="--", lw=0.8, label="target")
        if chosen is not None and chosen.get(col) is not None:
            ax.scatter([chosen["cost_per_hour"]], [chosen[col] * scale], marker="*", s=220, color="gold",
                       edgecolors="black", zorder=5, label=f"cheapest within SLO: {chosen.get('shape', '')}")
        if target is not None:
            ax.set_yscale("log")  # plain numbers, and the 2s and 5s between the decades
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(plt.FuncFormatter(
                lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
        ax.set_xlabel("USD per hour")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Planner candidates at the target load: cost against attainment and latency")
    return _save(plt, fig, path)

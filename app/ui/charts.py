"""Plotly figures of servesim results: CDFs, step timelines, per-request timelines, load curves."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from records.results import preemption_table

METRIC_LABELS = {"ttft_s": "TTFT (s)", "tpot_s": "TPOT (s)", "e2e_s": "E2E latency (s)"}


def cdf(series_by_label: dict[str, pd.Series], title: str) -> go.Figure:
    """Empirical CDFs of one metric, one line per label (NaNs dropped)."""
    fig = go.Figure()
    for label, series in series_by_label.items():
        values = np.sort(pd.to_numeric(series, errors="coerce").dropna().to_numpy())
        if values.size == 0:
            continue
        fig.add_trace(go.Scatter(x=values, y=np.arange(1, values.size + 1) / values.size, mode="lines",
                                 name=label))
    fig.update_layout(title=title, xaxis_title=title, yaxis_title="fraction of requests", height=320,
                      margin=dict(l=40, r=10, t=40, b=40))
    return fig


def metric_cdfs(requests_by_label: dict[str, pd.DataFrame]) -> list[go.Figure]:
    return [cdf({k: df[col] for k, df in requests_by_label.items()}, label)
            for col, label in METRIC_LABELS.items()]


def step_timeline(steps: pd.DataFrame) -> go.Figure:
    """Prefill and decode tokens per step, KV usage and queue lengths over simulated time.

    Each replica (the `replica` column: several behind a router, or a disaggregated run's prefill
    and decode instances) has its own lines: their steps interleave in time, and one line through
    all of them would jump between the replicas' values at every step."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("tokens per step", "KV cache usage", "queues"))
    if steps.empty:
        return fig
    groups = (list(steps.groupby(steps["replica"].astype(str), sort=False)) if "replica" in steps
              else [("", steps)])
    padded = "num_padding_tokens" in steps and steps["num_padding_tokens"].sum() > 0
    for replica, part in groups:
        tail = f" ({replica})" if len(groups) > 1 else ""
        t = part["start"]
        line = dict(mode="lines", legendgroup=replica)
        fig.add_trace(go.Scatter(x=t, y=part["num_prefill_tokens"], name=f"prefill tokens{tail}",
                                 stackgroup=f"tok{tail}", **line), row=1, col=1)
        fig.add_trace(go.Scatter(x=t, y=part["num_decode_tokens"], name=f"decode tokens{tail}",
                                 stackgroup=f"tok{tail}", **line), row=1, col=1)
        if padded:
            fig.add_trace(go.Scatter(x=t, y=part["num_padding_tokens"], name=f"padding tokens{tail}",
                                     stackgroup=f"tok{tail}", **line), row=1, col=1)
        fig.add_trace(go.Scatter(x=t, y=part["kv_usage"], name=f"KV usage{tail}", **line), row=2, col=1)
        for col, name in (("num_waiting", "waiting"), ("num_running", "running"), ("num_swapped", "swapped")):
            if col in part:
                fig.add_trace(go.Scatter(x=t, y=part[col], name=f"{name}{tail}", **line), row=3, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    fig.update_layout(height=620, margin=dict(l=40, r=10, t=40, b=40))
    return fig


def request_timeline(requests: pd.DataFrame, start: int = 0, count: int = 40) -> go.Figure:
    """Gantt bars for a window of requests: queued, prefill (to first token), decode (to finish).

    Requests that were preempted are outlined in red, and each interval off the GPU (from the step
    that preempted it to the one that ran it again: the `preemption_intervals` column) is drawn
    over its bar in red.
    """
    window = requests.sort_values("arrival_time").iloc[start:start + count]
    fig = go.Figure()
    labels = window["req_id"].astype(str)
    phases = (
        ("queued", "arrival_time", "first_scheduled_time", "#c7c7c7"),
        ("prefill", "first_scheduled_time", "first_token_time", "#ff7f0e"),
        ("decode", "first_token_time", "finish_time", "#1f77b4"),
    )
    preempted = window.get("num_preemptions", pd.Series(0, index=window.index)).fillna(0) > 0
    for name, a, b, color in phases:
        base, end = window[a], window[b]
        fig.add_trace(go.Bar(y=labels, x=(end - base), base=base, orientation="h", name=name, marker_color=color,
                             marker_line_color=np.where(preempted, "red", color), marker_line_width=1.5))
    off = preemption_table(window)
    if len(off):  # drawn last: on top of the phase bars (overlay mode)
        fig.add_trace(go.Bar(y=off["req_id"].astype(str), x=off["resumed_at"] - off["preempted_at"],
                             base=off["preempted_at"], orientation="h", name="preempted", marker_color="#d62728",
                             width=0.5))
    fig.update_layout(barmode="overlay", height=max(300, 14 * len(window) + 80), xaxis_title="time (s)",
                      yaxis_title="request", yaxis=dict(autorange="reversed"),
                      margin=dict(l=40, r=10, t=30, b=40))
    return fig


def load_curves(table: pd.DataFrame, x: str, columns: dict[str, str], title: str, x_title: str | None = None,
                y_title: str | None = None, log_y: bool = False) -> go.Figure:
    """Lines of several columns of a sweep table against its load column `x` (axes titled `x_title`,
    default `x`, and `y_title`; `log_y`: a log y axis, for lines of different magnitudes)."""
    fig = go.Figure()
    for col, label in columns.items():
        if col in table:
            fig.add_trace(go.Scatter(x=table[x], y=table[col], mode="lines+markers", name=label))
    fig.update_layout(title=title, xaxis_title=x_title or x, yaxis_title=y_title, height=360,
                      margin=dict(l=40, r=10, t=40, b=40))
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def predicted_vs_measured(metrics: dict) -> go.Figure:
    """Grouped bars of predicted and measured values from a validation.json `metrics` block."""
    names, predicted, measured = [], [], []
    for metric, stats in metrics.items():
        for stat, row in (stats.items() if isinstance(stats, dict) else []):
            if isinstance(row, dict) and "predicted" in row:
                names.append(f"{metric} {stat}")
                predicted.append(row["predicted"])
                measured.append(row.get("measured"))
    fig = go.Figure([go.Bar(x=names, y=predicted, name="predicted"), go.Bar(x=names, y=measured, name="measured")])
    fig.update_layout(barmode="group", height=380, yaxis_type="log", margin=dict(l=40, r=10, t=30, b=80))
    return fig


def replica_timeline(replicas: pd.DataFrame, requests: pd.DataFrame) -> go.Figure:
    """An autoscaled run: replicas serving / provisioning / draining over time, and each request's
    TTFT at its arrival time beneath (how the ramp felt to users)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("replicas", "TTFT by arrival time"))
    for col, label in (("num_serving", "serving"), ("num_provisioning", "provisioning (loading the model)"),
                       ("num_draining", "draining")):
        fig.add_trace(go.Scatter(x=replicas["time"], y=replicas[col], name=label, mode="lines",
                                 line_shape="hv", stackgroup="replicas"), row=1, col=1)
    fig.add_trace(go.Scatter(x=requests["arrival_time"], y=requests["ttft_s"], name="TTFT (s)", mode="markers",
                             marker=dict(size=3)), row=2, col=1)
    fig.update_layout(height=460, margin=dict(l=40, r=10, t=40, b=40))
    fig.update_xaxes(title_text="simulated time (s)", row=2, col=1)
    return fig

"""TTFT as a sum of named parts, measured and predicted, each with where it comes from.

    ttft = client_send_s + api_server_s + engine_queue_s + prefill_steps_s + first_chunk_s

- client_send_s: the client's send until the server has the request (network, the client's encoding);
- api_server_s: the API server before the engine queue (HTTP, tokenization, the hand-off);
- engine_queue_s: waiting in the engine's queue until its first scheduled step;
- prefill_steps_s: the steps from that one to the end of the step that makes the first token;
- first_chunk_s: that token's chunk back to the client.

Measured: from the run's own timestamps (vLLM's request spans, `measured_parts`; the client's
per-request times where they join them, `client_view`) or, as means, vLLM's own metrics
(`prometheus_parts`). Predicted (`predicted_parts`): the simulator's own times and the front end it
was given. Nothing here is fitted. A part a view cannot see is 0 and its origin says so.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fidelity.client_timeout import served_line, served_row
from fidelity.client_workload import check_workload
from fidelity.runs import RealRun
from fidelity.sources.guidellm_results import successes_with_spans

PARTS = ("client_send_s", "api_server_s", "engine_queue_s", "prefill_steps_s", "first_chunk_s")


def step_boundary(at: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """For each time in `at`: the end of the engine step in flight then (a step's [start, end)), or the
    time itself where no step runs. `steps` has `start` and `duration` columns, steps not overlapping."""
    start = steps["start"].to_numpy(dtype=float)
    order = np.argsort(start, kind="stable")
    start, end = start[order], start[order] + steps["duration"].to_numpy(dtype=float)[order]
    if len(start) == 0:
        return np.asarray(at, dtype=float).copy()
    i = np.searchsorted(start, at, side="right") - 1
    inside = (i >= 0) & (at < end[np.maximum(i, 0)])
    return np.where(inside, end[np.maximum(i, 0)], at)


def predicted_parts(requests: pd.DataFrame, frontend, frontend_s: float = 0.0,
                    gpu_model: str = "", frontend_per_token_s: float = 0.0,
                    steps: pd.DataFrame | None = None, frontend_origin: str = "") -> tuple[pd.DataFrame, dict[str, str]]:
    """Per request (the simulator's `requests` table, before `apply_frontend` adds `frontend_s`):
    the parts as columns (NaN for a request with no first token), and each part's origin.

    The parts come from the simulated arrival, first schedule and first token, and the front end:
    `frontend` (`sim.frontend.FrontendConfig`, calibrate.frontend's measurement of our serve
    stack) and the host prior's `frontend_s` (+ `frontend_per_token_s` per prompt token; where that
    came from: `frontend_origin`, else the host prior is named).
    With the run's `steps` (start, duration), a request that reaches the engine while a step runs
    counts the rest of that step in api_server_s, as vLLM v1's spans do: its engine core takes new
    requests, and stamps them QUEUED, only between steps (`EngineCore.run_busy_loop`)."""
    n = requests["num_prompt_tokens"].to_numpy(dtype=float)
    ingress = frontend.request_overhead_s + frontend.tokenize_s_per_token * n if frontend is not None else 0.0 * n
    egress = frontend.stream_overhead_s if frontend is not None else 0.0
    arrival = requests["arrival_time"].to_numpy(dtype=float)
    scheduled = requests["first_scheduled_time"].to_numpy(dtype=float)
    first = requests["first_token_time"].to_numpy(dtype=float)
    ok = np.isfinite(first) & np.isfinite(scheduled)
    nan = np.where(ok, 0.0, math.nan)
    at_engine = arrival + ingress
    boundary = at_engine.copy()  # the step in flight when the request reaches its engine, if any
    if steps is not None and "replica" in steps and "replica" in requests:
        replica = requests["replica"].to_numpy()
        for r, own in steps.groupby("replica"):
            mine = replica == r
            boundary[mine] = step_boundary(at_engine[mine], own)
    elif steps is not None:
        boundary = step_boundary(at_engine, steps)
    in_flight = np.minimum(boundary, np.where(ok, scheduled, at_engine)) - at_engine  # never past its first step
    out = pd.DataFrame({
        "req_id": requests["req_id"].to_numpy(),
        "client_send_s": nan,
        "api_server_s": ingress + frontend_s + frontend_per_token_s * n + in_flight + nan,
        "engine_queue_s": scheduled - arrival - ingress - in_flight + nan,
        "prefill_steps_s": first - egress - scheduled + nan,
        "first_chunk_s": egress + nan,
    })
    fe = frontend is not None and (frontend.request_overhead_s or frontend.tokenize_s_per_token)
    api = []
    if fe:
        api.append(f"[frontend] {frontend.request_overhead_s * 1e3:.2f} ms + "
                   f"{frontend.tokenize_s_per_token * 1e6:.2f} us/prompt token (our serve stack, calibrate.frontend)")
    if frontend_s or frontend_per_token_s:
        per_token = f" + {frontend_per_token_s * 1e6:.2f} us/prompt token" if frontend_per_token_s else ""
        api.append(frontend_origin or f"host prior front end {frontend_s * 1e3:.1f} ms{per_token} (fidelity.predict.host_prior)")
    if steps is not None:
        api.append("the simulated step in flight when it reached the engine (vLLM v1 queues between steps)")
    origins = {
        "client_send_s": "not modelled: the simulated client sends at the server",
        "api_server_s": "; ".join(api) or "not modelled (no [frontend], no host front end)",
        "engine_queue_s": ("simulated scheduler: first scheduled step - the first step boundary at the engine"
                           if steps is not None else "simulated scheduler: first scheduled step - arrival at the engine"),
        "prefill_steps_s": f"simulated steps ({gpu_model or 'GPU model'} + host terms) until the first token",
        "first_chunk_s": (f"[frontend] stream_overhead_s {egress * 1e3:.2f} ms (calibrate.frontend)" if egress
                          else "not modelled (no [frontend] stream_overhead_s)"),
    }
    return out, origins


def _mean_of(block: dict, key: str) -> float:
    value = (block.get(key) or {}) if isinstance(block, dict) else {}
    return float(value["mean"]) if isinstance(value, dict) and value.get("mean") is not None else math.nan


def prometheus_parts(run: RealRun) -> list[tuple[str, pd.DataFrame, dict[str, str]]]:
    """inference-perf's `summary_prometheus_metrics.json` (vLLM's own histograms over the run): the
    server view's parts as means, and the client's view where the lifecycle summary has its TTFT
    (the client-server difference, send + HTTP + first chunk, is one part there: no per-request
    stamps split it)."""
    path = run.path / "summary_prometheus_metrics.json"
    if not path.is_file():
        return []
    with open(path) as f:
        ok = (json.load(f).get("successes") or {})
    queue, prefill, ttft = (_mean_of(ok, k) for k in ("request_queue_time", "request_prefill_time",
                                                       "time_to_first_token"))
    if not all(np.isfinite(v) for v in (queue, prefill, ttft)):
        return []
    server = pd.DataFrame([{"client_send_s": 0.0, "api_server_s": ttft - queue - prefill, "engine_queue_s": queue,
                            "prefill_steps_s": prefill, "first_chunk_s": 0.0, "ttft_s": ttft}])
    origins = {
        "client_send_s": "not in the view: vLLM's TTFT starts at its arrival",
        "api_server_s": "vLLM metrics: time_to_first_token - request_queue_time - request_prefill_time (means)",
        "engine_queue_s": "vLLM metrics: request_queue_time (mean)",
        "prefill_steps_s": "vLLM metrics: request_prefill_time (mean)",
        "first_chunk_s": "not in the view: vLLM's TTFT ends at the engine's first token",
    }
    views = [("server", server, origins)]
    client_ttft = float(run.measured()["ttft_s"]) if (run.path / "summary_lifecycle_metrics.json").is_file() else math.nan
    if np.isfinite(client_ttft):
        client = server.assign(api_server_s=server["api_server_s"] + client_ttft - ttft, ttft_s=client_ttft)
        views.append(("client", client, {**origins, "api_server_s": origins["api_server_s"] + " + client TTFT - "
                                         "vLLM TTFT (the client's send, HTTP and the first chunk together)",
                                         "client_send_s": "inside api_server_s (no per-request stamps)",
                                         "first_chunk_s": "inside api_server_s (no per-request stamps)"}))
    return views


def measured_parts(run: RealRun) -> tuple[pd.DataFrame | None, dict[str, str], str]:
    """Per request: the parts from the run's vLLM request spans (`time_in_queue_s`,
    `time_in_prefill_s`, `ttft_s` from vLLM's arrival), their origins and the view ("server":
    TTFT from vLLM's arrival, what the run's spans score; "client": from the client's send). None
    when the run has no timestamps between a request's arrival and its first token."""
    spans = run.path / "per_request_server_spans.csv" if run.path.is_dir() else None
    if spans is None or not spans.is_file():
        return None, {}, ""
    df = pd.read_csv(spans)
    if not {"time_in_queue_s", "time_in_prefill_s", "ttft_s"} <= set(df.columns):
        return None, {}, ""
    queue = df["time_in_queue_s"].astype(float)
    prefill = df["time_in_prefill_s"].astype(float)
    ttft = df["ttft_s"].astype(float)
    out = pd.DataFrame({"req_id": df["request_id"].astype(str), "client_send_s": 0.0,
                        "api_server_s": ttft - queue - prefill, "engine_queue_s": queue,
                        "prefill_steps_s": prefill, "first_chunk_s": 0.0, "ttft_s": ttft})
    origins = {
        "client_send_s": "not in the view: vLLM's TTFT starts at its arrival",
        "api_server_s": "vLLM span: ttft - time_in_queue - time_in_prefill (arrival to the engine queue)",
        "engine_queue_s": "vLLM span: time_in_queue_s",
        "prefill_steps_s": "vLLM span: time_in_prefill_s (first scheduled to first token)",
        "first_chunk_s": "not in the view: vLLM's TTFT ends at the engine's first token",
    }
    return out, origins, "server"


def client_view(run: RealRun, server: pd.DataFrame) -> tuple[pd.DataFrame | None, dict[str, str]]:
    """The client's view of the same requests, where its per-request times join the spans
    (guidellm's `response_id`): the client's send and first chunk around the server's parts."""
    joined = successes_with_spans(Path(run.path))
    if joined is None or not len(joined):
        return None, {}
    joined = joined[["response_id", "ttft_ms", "request_start_time", "start_unix_ns"]].copy()
    joined["req_id"] = joined["response_id"] + "-0"
    j = joined.merge(server, on="req_id", how="inner")
    c_ttft = j["ttft_ms"].astype(float) / 1e3
    send = j["start_unix_ns"].astype("float64") / 1e9 - j["request_start_time"].astype(float)
    out = pd.DataFrame({"req_id": j["req_id"], "client_send_s": 0.0, "api_server_s": send + j["api_server_s"],
                        "engine_queue_s": j["engine_queue_s"], "prefill_steps_s": j["prefill_steps_s"],
                        "first_chunk_s": c_ttft - send - j["ttft_s"], "ttft_s": c_ttft})
    origins = {
        "client_send_s": "not separable: inside api_server_s (no timestamp between the client's send and vLLM's arrival)",
        "api_server_s": "vLLM arrival - the client's request_start_time (two clocks), + the span's hand-off",
        "engine_queue_s": "vLLM span: time_in_queue_s",
        "prefill_steps_s": "vLLM span: time_in_prefill_s",
        "first_chunk_s": "client TTFT - (vLLM arrival - client start) - vLLM TTFT",
    }
    return out, origins


def parts_rows(pred) -> list[dict]:
    """The ttft_parts table's rows of one `Prediction`: per part, the measured and predicted means
    over the requests that have a first token, and their origins."""
    run = pred.run
    predicted = pred.requests
    p_orig = getattr(pred, "ttft_part_origins", {}) or {}
    have = [c for c in PARTS if c in predicted]
    rows = []
    server, s_orig, view = measured_parts(run)
    views = [(view, server, s_orig)] if server is not None else []
    if server is not None:
        client, c_orig = client_view(run, server)
        if client is not None:
            views.append(("client", client, c_orig))
    views = views or prometheus_parts(run) or [("", None, {})]
    for name, measured, m_orig in views:
        for part in (*PARTS, "ttft_s"):
            m = float(measured[part].mean()) if measured is not None else (
                float(run.measured()["ttft_s"]) if part == "ttft_s" else math.nan)
            p = float(predicted[part].mean()) if part in have or part == "ttft_s" else math.nan
            rows.append({"run": run.name, "source": run.source, "view": name or "none", "part": part,
                         "measured_s": m, "predicted_s": p,
                         "measured_origin": m_orig.get(part, "the run's TTFT" if part == "ttft_s" else
                                                       "no timestamps inside the run's TTFT"),
                         "predicted_origin": p_orig.get(part, "simulated TTFT" if part == "ttft_s" else "")})
    return rows


def ttft_parts_table(predictions) -> pd.DataFrame:
    """One row per (run, view, part) over the reproduced runs' predictions."""
    rows = [row for pred in predictions for row in parts_rows(pred)]
    return pd.DataFrame(rows, columns=["run", "source", "view", "part", "measured_s", "predicted_s",
                                       "measured_origin", "predicted_origin"])


PART_LABELS = {"client_send_s": "client send", "api_server_s": "API server", "engine_queue_s": "engine queue",
               "prefill_steps_s": "steps to the first token", "first_chunk_s": "first chunk back"}


def plot_ttft_parts(table: pd.DataFrame, path: Path, ncols: int = 4) -> Path | None:
    """ttft_parts.png: per run, its mean TTFT as stacked parts, measured (the table's first view of
    the run; one plain bar where its timestamps see no parts) above predicted, in ms. One panel a
    run, each on its own scale (runs differ by orders of magnitude). None without matplotlib."""
    try:
        import matplotlib  # an optional extra: only the plot needs it

        matplotlib.use("Agg")
        import matplotlib.patches
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = list(dict.fromkeys(table["run"]))
    if not runs:
        return None
    nrows = -(-len(runs) // ncols)
    fig, axes = plt.subplots(nrows, min(ncols, len(runs)), figsize=(4.2 * min(ncols, len(runs)), 1.9 * nrows),
                             squeeze=False)
    colors = dict(zip(PARTS, plt.get_cmap("tab10").colors))
    for ax, run in zip(axes.flat, runs):
        rows = table[table["run"] == run]
        view = rows["view"].iloc[0]
        rows = rows[rows["view"] == view].set_index("part")
        for y, side in ((1, "measured_s"), (0, "predicted_s")):
            parts = rows.loc[list(PARTS), side].astype(float).fillna(0.0) * 1e3
            total = float(rows.loc["ttft_s", side]) * 1e3
            if side == "measured_s" and not parts.sum() > 0:  # no timestamps inside the run's TTFT
                ax.barh(y, total, color="lightgrey", hatch="//", edgecolor="grey")
                continue
            left = 0.0
            for part, width in parts.items():
                ax.barh(y, width, left=left, color=colors[part])
                left += width
        ax.set_yticks([1, 0], [f"measured ({view})" if view != "none" else "measured", "predicted"], fontsize=7)
        ax.set_title(str(run)[-40:], fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("mean TTFT (ms)", fontsize=7)
    for ax in list(axes.flat)[len(runs):]:
        ax.set_visible(False)
    whole = matplotlib.patches.Patch(facecolor="lightgrey", hatch="//", edgecolor="grey")
    fig.legend([matplotlib.patches.Patch(color=colors[p]) for p in PARTS] + [whole],
               [PART_LABELS[p] for p in PARTS] + ["measured TTFT, no timestamps inside it"], loc="lower center",
               ncol=len(PARTS) + 1, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 if nrows > 1 else 0.12, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_run_tables(rep, runs, out) -> list[str]:
    """Beside report.csv: `ttft_parts.csv` (`ttft_parts_table`; `ttft_parts.png`, `plot_ttft_parts`,
    with matplotlib), `workload.csv` (each run's generated workload against its measured lengths,
    `fidelity.client_workload`) and `served.csv` (its requests by how they ended, measured and
    predicted, `fidelity.client_timeout`); returns the
    lines to print (what the client sent, any resolution by the measured lengths, and the runs
    whose client gave up on requests)."""
    out = Path(out)
    parts = ttft_parts_table(list(rep.predictions.values()))
    parts.to_csv(out / "ttft_parts.csv", index=False)
    plot_ttft_parts(parts, out / "ttft_parts.png")
    checks = [c for c in (check_workload(r) for r in runs) if c is not None]
    pd.DataFrame([c.row() for c in checks]).to_csv(out / "workload.csv", index=False)
    served = [served_row(pred) for pred in rep.predictions.values()]
    pd.DataFrame(served).to_csv(out / "served.csv", index=False)
    used = {name: pred.workload for name, pred in rep.predictions.items()}
    return [f"{c.run}: {line}" for c in checks if used.get(c.run) != "replay" or c.resolution for line in c.lines()] + \
        [line for line in map(served_line, served) if line]

"""A load generator's benchmarks, measured against a simulated run of the same profile.

A guidellm sweep is a curve (requests per second against latency), not one mean: its later
benchmarks' rates come from what its first two achieved. The run's guidellm report gives each
benchmark as measured (`fidelity.sources.guidellm_results.ReportBenchmarks`, read with the run). Where the run is
predicted from its profile (`servesim reproduce --workload profile`, or a sampled report) each
simulated request carries its benchmark (`phase`); a replayed request takes the benchmark the report
measured it in. inference-perf's load stages are the same kind of curve: a run simulated by its
generator tags each request with its stage, and the stage's own report
(`stage_N_lifecycle_metrics.json`) gives its means (`stage_rows`; TPOT there is the TPOT of the
means, as the run's summary is scored). `benchmark_rows` sets the two side by side;
`servesim reproduce` writes them to benchmarks.csv (`write_benchmarks`).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from fidelity.benchmark_stats import benchmark_stats
from fidelity.predict import Prediction
from fidelity.sources.inference_perf_results import read_summary_means, requested_output_mean
from fidelity.sources.vllm_server import run_file

#: what is compared per benchmark (keys of both sides' rows), and its name on the CLI
COMPARED = {"requests_per_s": "req/s", "ttft_mean_ms": "TTFT", "itl_mean_ms": "ITL", "e2e_mean_s": "E2E"}
#: per inference-perf stage: its sends per second, and TPOT of the means (its stage report's)
STAGE_COMPARED = {"requests_per_s": "req/s", "ttft_mean_ms": "TTFT", "tpot_of_means_ms": "TPOT", "e2e_mean_s": "E2E"}
AXIS = {"ttft_mean_ms": "mean TTFT (ms)", "itl_mean_ms": "mean ITL (ms)", "e2e_mean_s": "mean E2E (s)",
        "tpot_of_means_ms": "TPOT of the means (ms)"}


def predicted_benchmarks(requests: pd.DataFrame, starts: list[float] | None = None) -> list[dict]:
    """Each benchmark of a simulated run (its requests' `phase`), as the client would report it
    (`fidelity.benchmark_stats`: requests per second over its span, TTFT, ITL, E2E). A benchmark
    starts at `starts[k]` (a replay: when the report says it started), else where guidellm starts
    it: when the one before it has ended (the first at time 0), or at its first send if earlier."""
    out, start = [], 0.0
    for k, (phase, g) in enumerate(requests.groupby("phase", sort=True)):
        ok = g[np.isfinite(g["e2e_s"].to_numpy(dtype=float))]
        end = float((ok["arrival_time"] + ok["e2e_s"]).max()) if len(ok) else math.nan
        begin = starts[k] if starts is not None and k < len(starts) else start
        span, start = end - min(begin, float(g["arrival_time"].min())), end
        itl = ok["tpot_s"].to_numpy(dtype=float)
        has_itl = np.isfinite(itl)
        stats = benchmark_stats(ok["ttft_s"], itl[has_itl], ok["e2e_s"], int(ok["num_output_tokens"].sum()), span,
                                itl_gaps=ok["num_output_tokens"].to_numpy(dtype=float)[has_itl] - 1)
        out.append({"benchmark": int(phase), "strategy": str(g["strategy"].iloc[0]) if "strategy" in g else "",
                    "requests": stats.pop("requests"), "failed": len(g) - len(ok), **stats})
    return out


def with_phases(requests: pd.DataFrame, phases: dict[str, int]) -> pd.DataFrame | None:
    """A replay's predicted requests with the benchmark each was measured in (`phases`, by request
    id; vLLM's spans name a response `<id>-<choice>`), or None where one is not among them."""
    ids = requests["req_id"].astype(str)
    phase = ids.where(ids.isin(phases.keys()), ids.str.replace(r"-\d+$", "", regex=True)).map(phases)
    if phase.isna().any():
        return None
    return requests.assign(phase=phase.astype(int))


def stage_rows(pred: Prediction) -> list[dict]:
    """An inference-perf run simulated by its generator, stage by stage: measured (each stage's
    `stage_N_lifecycle_metrics.json`: sends per second achieved, mean TTFT and E2E of the successes,
    TPOT of the means as `read_summary_means` scores the run, with the stage's own requested output
    length under ignore_eos) against the same of the simulated stage; [] where the run has no stage reports or was not simulated stage by stage."""
    run, requests = pred.run, pred.requests
    if "stage" not in requests or not run.path.is_dir():
        return []
    stages = sorted(int(k) for k in requests["stage"].dropna().unique())
    files = [run_file(run.path, f"stage_{k}_lifecycle_metrics.json", run.profile) for k in stages]
    if not stages or any(f is None for f in files):
        return []
    ignore_eos = requested_output_mean(run.profile) is not None
    rows = []
    for k, file in zip(stages, files):
        g = requests[requests["stage"] == k]
        # under ignore_eos the server generates what the stage's own sends asked for (the generator's
        # max_tokens: the client's prompts, exactly), not the run's mean over every prompt
        m = read_summary_means(file, float(g["max_tokens"].mean()) if ignore_eos and "max_tokens" in g else None)
        ok = g[np.isfinite(g["e2e_s"].to_numpy(dtype=float))]
        sends = float(g["arrival_time"].max() - g["arrival_time"].min())
        ttft, e2e = (float(ok[c].mean()) if len(ok) else math.nan for c in ("ttft_s", "e2e_s"))
        n = float(ok["num_output_tokens"].mean()) if len(ok) else math.nan
        predicted = {"requests_per_s": (len(g) - 1) / sends if sends > 0 else math.nan,
                     "ttft_mean_ms": 1e3 * ttft, "e2e_mean_s": e2e,
                     "tpot_of_means_ms": 1e3 * (e2e - ttft) / (n - 1) if n > 1 else math.nan}
        measured = {"requests_per_s": m.get("achieved_rate_per_s", math.nan),
                    "ttft_mean_ms": 1e3 * m.get("ttft_s", math.nan), "e2e_mean_s": m.get("e2e_s", math.nan),
                    "tpot_of_means_ms": 1e3 * m.get("tpot_s", math.nan)}
        rows.extend(_compared(pred, k, f"stage {k}", measured, predicted, STAGE_COMPARED, "inference-perf stages"))
    return rows


def _compared(pred: Prediction, index: int, strategy: str, measured: dict, predicted: dict, keys: dict,
              what: str) -> list[dict]:
    rows = []
    for key in keys:
        want, got = measured[key], predicted[key]
        rows.append({"run": pred.run.name, "workload": pred.workload, "what": what, "benchmark": index,
                     "strategy": strategy, "metric": key, "measured": want, "predicted": got,
                     "error": (got - want) / want if want and math.isfinite(want) else math.nan})
    return rows


def benchmark_rows(pred: Prediction) -> list[dict]:
    """Per benchmark (guidellm) or stage (inference-perf, `stage_rows`) and figure: measured (the
    run's own report), predicted, error; [] where the run has no such report or is scored by
    another measurement (the prediction then follows that one's definitions:
    `fidelity.metric_definitions`). A prediction from the profile ran the benchmarks itself (a
    `phase` per request, as many as measured); a replay's requests take the benchmark they were
    measured in."""
    if pred.run.measured_by.startswith("inference-perf"):
        return stage_rows(pred)
    # measured by the client's own report (read with the run); other measurements' predictions
    # follow their definitions (vLLM's spans)
    report = pred.run.client_benchmarks if pred.run.measured_by == "guidellm" else None
    if report is None:
        return []
    replayed = "phase" not in pred.requests
    requests = with_phases(pred.requests, report.phases) if replayed else pred.requests
    if requests is None:
        return []
    predicted = predicted_benchmarks(requests, list(report.starts) if replayed and report.starts else None)
    measured = report.rows
    if len(measured) != len(predicted):
        return []
    return [row for m, p in zip(measured, predicted)
            for row in _compared(pred, m["benchmark"], m["strategy"], m, p, COMPARED, "guidellm benchmarks")]


def benchmark_line(rows: list[dict]) -> str | None:
    """One CLI line per run of several benchmarks or stages: the median |error| of each figure over
    them (a run of one is its whole mean, report.csv's row)."""
    t = pd.DataFrame(rows)
    if not rows or t["benchmark"].nunique() < 2:
        return None
    med = t.assign(abs_error=t["error"].abs()).groupby("metric", sort=False)["abs_error"].median()
    labels = {**STAGE_COMPARED, **COMPARED}
    figures = ", ".join(f"{labels[key]} " + (f"{100 * med[key]:.1f}%" if math.isfinite(med[key]) else "n/a")
                        for key in med.index)
    how = "predicted from its profile" if rows[0]["workload"] != "replay" else "replayed"
    return (f"{rows[0]['run']}: {t['benchmark'].nunique()} {rows[0]['what']} {how}: "
            f"median |error| {figures} (benchmarks.csv)")


def write_benchmarks(predictions: list[Prediction], path: Path) -> tuple[list[str], str]:
    """benchmarks.csv (and benchmarks.png beside it, with matplotlib) of every run scored benchmark
    by benchmark (none written without one); (the CLI line of each, report.md's section or "")."""
    tables = [benchmark_rows(pred) for pred in predictions]
    if not any(tables):
        return [], ""
    table = pd.DataFrame([row for rows in tables for row in rows])
    table.to_csv(path, index=False)
    plot_benchmarks(table, Path(path).with_suffix(".png"))
    return [line for line in map(benchmark_line, tables) if line], benchmarks_markdown(table)


def benchmarks_markdown(table: pd.DataFrame) -> str:
    """report.md's section: per run and benchmark (or stage), each figure measured / predicted (error)."""
    lines = ["## Benchmark by benchmark, stage by stage", "",
             "Measured (the run's own per-benchmark or per-stage report) / predicted (error); the curves: "
             "benchmarks.png.", ""]
    for what, w in table.groupby("what", sort=False):
        keys = list(dict.fromkeys(w["metric"]))
        lines += [f"### {what}", "", "| run | workload | # | strategy | " + " | ".join(AXIS.get(k, "req/s") for k in keys)
                  + " |", "|---|---|---:|---|" + "---:|" * len(keys)]
        for (run, bench), g in w.groupby(["run", "benchmark"], sort=False):
            cells = g.set_index("metric")
            figures = [f"{cells.loc[k, 'measured']:.3g} / {cells.loc[k, 'predicted']:.3g} "
                       f"({100 * cells.loc[k, 'error']:+.1f}%)" for k in keys]
            lines.append(f"| {run} | {g['workload'].iloc[0]} | {bench} | {g['strategy'].iloc[0]} | "
                         + " | ".join(figures) + " |")
        lines.append("")
    return "\n".join(lines)


def plot_benchmarks(table: pd.DataFrame, path: Path) -> Path | None:
    """Each run's curve, measured and predicted: mean TTFT, ITL (or TPOT) and E2E against requests
    per second, one point per benchmark or stage (None without matplotlib)."""
    try:
        import matplotlib  # an optional extra: only a plot needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = list(dict.fromkeys(table["run"]))
    fig, axes = plt.subplots(len(runs), 3, figsize=(4.6 * 3, 3.4 * len(runs)), squeeze=False)
    for row, run in zip(axes, runs):
        t = table[table["run"] == run]
        rate = t[t["metric"] == "requests_per_s"].set_index("benchmark")
        shown = [k for k in dict.fromkeys(t["metric"]) if k != "requests_per_s"][:3]
        for ax, key in zip(row, shown):
            m = t[t["metric"] == key].set_index("benchmark")
            for side, style in (("measured", "o-"), ("predicted", "s--")):
                if not np.isfinite(m[side].to_numpy(dtype=float)).any():  # a simulation alone: no measurement
                    continue
                xy = sorted(zip(rate[side], m[side]))
                ax.plot([x for x, _ in xy], [y for _, y in xy], style, label=side, ms=4)
            ax.set(xlabel="requests/s", ylabel=AXIS[key], title=run if key == shown[0] else "",
                   yscale="log" if key in ("ttft_mean_ms", "e2e_mean_s") else "linear")  # queues span decades
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_simulated(rows: list[dict], path: Path, title: str = "simulated") -> Path | None:
    """benchmarks.png of a simulation's own benchmarks (`GuidellmWorkload.benchmark_rows`), no
    measurement beside them: its TTFT, ITL and E2E against the rate each benchmark achieved."""
    long = [{"run": title, "what": "benchmarks", "benchmark": r["benchmark"], "metric": key,
             "measured": math.nan, "predicted": r[key]} for r in rows for key in COMPARED]
    return plot_benchmarks(pd.DataFrame(long), path) if long else None

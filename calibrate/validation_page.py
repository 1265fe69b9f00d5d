"""A validation's page: cdfs.png and steps.png (predicted against measured), and index.html with
the table and what `details.json` says of the machine around the run (`diagnostics`)."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from records.display import number, slower_or_faster
from sim.latency.profile import Profile


def diagnostics(details: dict) -> list[str]:
    """What a report's `details.json` says of the machine, as short phrases (report page, app)."""
    notes = []
    detrended = (details.get("step_time_abs_pct_error_detrended") or {}).get("median")
    if detrended is not None:
        notes.append(f"per-step error with the machine's drift over the run taken out: {detrended:.1f}%")
    drift = details.get("bracket_drift_pct")
    if drift is not None:
        notes.append(f"the calibration's engine steps ran {slower_or_faster(drift)} after the run than before it")
    speed = (details.get("speed_probe") or {}).get("run_median")
    if speed is not None:
        notes.append(f"by the speed probe the machine ran the engine {slower_or_faster((speed - 1) * 100)} during "
                     "the run than during its calibration")
    basis = details.get("speed_basis") or {}
    if basis.get("why"):
        notes.append(f"predictions at the {basis['basis']}'s speed: {basis['why']}")
    if (details.get("last_level_cache") or {}).get("weights_fit"):
        notes.append("the model's weights fit in the CPU's last-level cache: its step times depend on what other "
                     "tenants leave of it")
    if details.get("load_avg_1m"):
        notes.append(f"load average {details['load_avg_1m'][0]}-{details['load_avg_1m'][1]}")
    held = (details.get("engine_step_fit") or {}).get("holdout_median_abs_pct")
    if held is not None:
        notes.append(f"calibration's engine-step fit held out: {held:.1f}%")
    return notes


def write_plots(out: Path, steps: pd.DataFrame, dists: dict) -> bool:
    """cdfs.png (each metric of `dists[label]`, predicted vs measured) and steps.png (step time over the run);
    False, and no plots, without matplotlib (the GPU check's machine may lack it: the figures are
    in validation.json and steps.csv all the same)."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dists["measured"])  # the metrics, in the order of the panels
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.6))
    for ax, name in zip(axes, names):
        for label, style in (("measured", "-"), ("predicted", "--")):
            v = np.sort(np.asarray(pd.Series(dists[label][name]).dropna(), dtype=float)) * 1e3
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, style, where="post", label=label)
        if name == "itl_s":  # gaps span decode steps to prefill stalls: a log axis shows both
            ax.set_xscale("log")
        ax.set_xlabel(f"{name[:-2].upper()} (ms)")
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "cdfs.png", dpi=110)
    plt.close(fig)

    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 3.8), gridspec_kw={"width_ratios": [3, 1]})
    if len(steps):
        a.plot(steps.index, steps.measured_s * 1e3, lw=0.8, label="measured")
        a.plot(steps.index, steps.predicted_s * 1e3, lw=0.8, label="predicted (same plan)")
        lim = [0, float(max(steps.measured_s.max(), steps.predicted_s.max()) * 1e3 * 1.05)]
        b.scatter(steps.measured_s * 1e3, steps.predicted_s * 1e3, s=4, alpha=0.5)
        b.plot(lim, lim, "k--", lw=0.8)
        b.set_xlim(lim)
        b.set_ylim(lim)
    a.set_xlabel("engine step")
    a.set_ylabel("step time (ms)")
    a.legend()
    b.set_xlabel("measured (ms)")
    b.set_ylabel("predicted (ms)")
    fig.tight_layout()
    fig.savefig(out / "steps.png", dpi=110)
    plt.close(fig)
    return True


def write_html(out: Path, report: dict, config_path, prof: Profile, details: dict | None = None,
               plots: bool = True) -> None:
    """index.html: the figures, a table of predicted vs measured, and the machine diagnostics of `details`."""

    def fmt(v, scale=1.0, unit=""):
        return "-" if v is None else f"{number(v * scale)}{unit}"

    rows = []
    for name, block in report["metrics"].items():
        scale, unit = (1e3, " ms") if name != "throughput" else (1.0, "")
        for stat, c in block.items():
            rows.append(f"<tr><td>{name}</td><td>{stat}</td><td>{fmt(c['predicted'], scale, unit)}</td>"
                        f"<td>{fmt(c['measured'], scale, unit)}</td><td>{fmt(c['abs_pct_error'], 1, '%')}</td></tr>")
    st = report["step_time_abs_pct_error"]
    notes = diagnostics(details or {})

    def img(name: str) -> str:
        return f'<img src="{name}" width="100%">' if plots else "<p>(no plot: matplotlib is not installed)</p>"

    note = f"<p>{html.escape('; '.join(notes))}</p>" if notes else ""
    for w in (details or {}).get("profile_mismatches") or []:
        note += f'<p style="color:#b00020"><b>profile warning:</b> {html.escape(w)}</p>'
    for w in (details or {}).get("calibration_warnings") or []:
        note += f'<p style="color:#b00020"><b>calibration warning:</b> {html.escape(w)}</p>'
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>servesim validate</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px}}</style>
</head><body><h1>servesim validate: {html.escape(str(config_path))}</h1>
<p>Profile: {html.escape(str(prof.meta.get('device')))}, {html.escape(str(prof.meta.get('source')))},
{html.escape(str(prof.meta.get('date')))}</p>
<h2>Per-step time (each measured step re-predicted from its own plan)</h2>
<p>median abs error {fmt(st['median'], 1, '%')}, p90 {fmt(st['p90'], 1, '%')}</p>{note}{img("steps.png")}
<h2>Request metrics</h2>{img("cdfs.png")}
<table><tr><th>metric</th><th>stat</th><th>predicted</th><th>measured</th><th>abs error</th></tr>{''.join(rows)}</table>
</body></html>"""
    (out / "index.html").write_text(page)

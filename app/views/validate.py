"""Validate: predicted vs measured, from a `servesim validate` report or a small run on this CPU.

A report folder holds validation.json (the figures), steps.csv (per-step predicted and measured
times) and the CDF / step-time PNGs. "Run on CPU" calls `calibrate.validate.validate` on one of the
shipped tiny-model configs (needs torch: `pip install 'servesim[engine,calibrate]'`).
"""
import _path  # noqa: F401
import json
import tempfile
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from records.display import percent
from ui import charts
from calibrate.validation_page import diagnostics as phrases

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

st.title("Validate")
st.caption("How close was the prediction? The simulator with a measured profile against the real engine.")


def metrics_table(report: dict) -> pd.DataFrame:
    rows = []
    for metric, block in report.get("metrics", {}).items():
        for stat, row in block.items():
            rows.append({"metric": metric, "stat": stat, "predicted": row.get("predicted"),
                         "measured": row.get("measured"), "abs % error": row.get("abs_pct_error")})
    return pd.DataFrame(rows)


def check_report(report: object) -> str | None:
    """None if `report` has the validation.json shape, else what is wrong (naming the key)."""
    if not isinstance(report, dict):
        return "validation.json: expected a JSON object"
    for key in ("step_time_abs_pct_error", "metrics"):
        if not isinstance(report.get(key), dict):
            return f"validation.json: missing the `{key}` object (is this a servesim validate report?)"
    return None


def diagnostics(folder: Path | None) -> str | None:
    """One line from the report's details.json: how much of the per-step error is the machine's."""
    if folder is None or not (folder / "details.json").is_file():
        return None
    try:
        details = json.loads((folder / "details.json").read_text())
    except (json.JSONDecodeError, OSError):
        return None
    return "; ".join(phrases(details)) or None


def _pct(v) -> str:
    """A percentage figure of a report (already in %) for a card."""
    return percent(None if v is None else v / 100)


def show(report: dict, folder: Path | None) -> None:
    st_err = report["step_time_abs_pct_error"]
    c = st.columns(3)
    c[0].metric("Per-step error, median", _pct(st_err.get("median")))
    c[1].metric("Per-step error, p90", _pct(st_err.get("p90")))
    e2e = report["metrics"].get("e2e_s", {}).get("mean", {})
    c[2].metric("Mean E2E error", _pct(e2e.get("abs_pct_error")))
    st.dataframe(metrics_table(report), use_container_width=True, hide_index=True)
    note = diagnostics(folder)
    if note:
        st.caption(note)
    st.plotly_chart(charts.predicted_vs_measured(report["metrics"]), use_container_width=True)
    if folder is not None and (folder / "steps.csv").is_file():
        steps = pd.read_csv(folder / "steps.csv")
        fig = go.Figure([go.Scatter(x=steps["step_id"], y=steps["measured_s"] * 1000, name="measured", mode="lines"),
                         go.Scatter(x=steps["step_id"], y=steps["predicted_s"] * 1000, name="predicted", mode="lines")])
        fig.update_layout(title="step time over the run", xaxis_title="step", yaxis_title="ms", height=340)
        st.plotly_chart(fig, use_container_width=True)
    for png in ("cdfs.png", "steps.png"):
        if folder is not None and (folder / png).is_file():
            st.image(str(folder / png))


mode = st.radio("Source", ("Load a report", "Run on CPU"), horizontal=True, key="val.mode")
if mode == "Load a report":
    folder_text = st.text_input("Report folder (holds validation.json)", value="", key="val.folder")
    uploaded = st.file_uploader("...or upload a validation.json", type=["json"], key="val.upload")
    slot = st.empty()
    report, folder = None, None
    if uploaded is not None:
        try:
            report = json.loads(uploaded.getvalue())
        except json.JSONDecodeError as exc:
            slot.error(f"validation.json: not valid JSON ({exc})")
    elif folder_text:
        folder = Path(folder_text).expanduser()
        if not (folder / "validation.json").is_file():
            slot.error(f"report folder: no validation.json in {folder}")
            folder = None
        else:
            try:
                report = json.loads((folder / "validation.json").read_text())
            except json.JSONDecodeError as exc:
                slot.error(f"validation.json: not valid JSON ({exc})")
    if report is not None:
        problem = check_report(report)
        if problem:
            slot.error(problem)
        else:
            show(report, folder)
else:
    configs = sorted(p.name for p in EXAMPLES.glob("validate-*.toml"))
    name = st.selectbox("Validation workload", configs, key="val.config")
    requests = st.number_input("Requests (fewer = faster)", value=20, step=5, key="val.n")
    slot = st.empty()
    if st.button("Run on CPU", type="primary", key="val.run"):
        if requests < 1:
            slot.error("workload.num_requests: must be >= 1")
        else:
            try:
                from calibrate.validate import validate
            except ImportError as exc:
                slot.error(f"needs the engine extra (torch): {exc}")
            else:
                out = Path(tempfile.mkdtemp(prefix="servesim-validate-"))
                profile = EXAMPLES / "profiles" / "tiny-llama-cpu.json"
                with st.spinner("Calibrating, simulating and running the real engine..."):
                    report = validate(EXAMPLES / name, "cpu", profile if profile.is_file() else None, out,
                                      overrides=[f"workload.num_requests={int(requests)}"], progress=False)
                st.session_state["val.last"] = str(out)
    if st.session_state.get("val.last"):
        folder = Path(st.session_state["val.last"])
        show(json.loads((folder / "validation.json").read_text()), folder)

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
from ui.state import kept, kept_upload
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


def _is_figure(value: object) -> bool:
    """A report's figure: a number (NaN included: it shows as "-") or null."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def check_report(report: object) -> str | None:
    """None if `report` has the validation.json shape, else what is wrong (naming the key)."""
    if not isinstance(report, dict):
        return "validation.json: expected a JSON object"
    for key in ("step_time_abs_pct_error", "metrics"):
        if not isinstance(report.get(key), dict):
            return f"validation.json: missing the `{key}` object (is this a servesim validate report?)"
    for stat in ("median", "p90"):
        value = report["step_time_abs_pct_error"].get(stat)
        if not _is_figure(value):
            return f"validation.json: step_time_abs_pct_error.{stat} must be a number, got {_short(value)}"
    for metric, block in report["metrics"].items():
        if not isinstance(block, dict):
            return f"validation.json: metrics.{metric} must be an object of statistics, got {_short(block)}"
        for stat, row in block.items():
            if not isinstance(row, dict):
                return (f"validation.json: metrics.{metric}.{stat} must be an object of predicted and measured "
                        f"figures, got {_short(row)}")
            for key in ("predicted", "measured", "abs_pct_error"):
                if not _is_figure(row.get(key)):
                    return f"validation.json: metrics.{metric}.{stat}.{key} must be a number, got {_short(row[key])}"
    return None


def read_json(path_or_bytes, name: str) -> tuple[object, str | None]:
    """(the parsed JSON, None) or (None, what is wrong with it, naming the file)."""
    try:
        data = path_or_bytes.read_bytes() if isinstance(path_or_bytes, Path) else path_or_bytes
        return json.loads(data.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, f"{name}: not UTF-8 text ({exc})"
    except json.JSONDecodeError as exc:
        return None, f"{name}: not valid JSON ({exc})"
    except OSError as exc:
        return None, f"{name}: cannot be read ({exc})"


def diagnostics(folder: Path | None) -> tuple[str | None, list[str], str | None]:
    """(one line from the report's details.json: how much of the per-step error is the machine's,
    how the profile's machine differs from the run's (`profile_mismatches`), what is wrong with
    details.json); (None, [], None) without one."""
    if folder is None or not (folder / "details.json").is_file():
        return None, [], None
    details, problem = read_json(folder / "details.json", "details.json")
    if problem:
        return None, [], problem
    if not isinstance(details, dict):
        return None, [], "details.json: expected a JSON object"
    mismatches = details.get("profile_mismatches") or []
    if not isinstance(mismatches, list):
        return None, [], f"details.json: profile_mismatches must be a list of lines, got {_short(mismatches)}"
    try:
        return "; ".join(phrases(details)) or None, [str(line) for line in mismatches], None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        return None, [], f"details.json: a figure has an unexpected shape ({type(exc).__name__}: {exc})"


def read_steps(path: Path) -> tuple[pd.DataFrame | None, str | None]:
    """(steps.csv's step_id, measured_s and predicted_s as numbers, None) or (None, what is wrong)."""
    try:
        steps = pd.read_csv(path)
    except UnicodeDecodeError as exc:
        return None, f"steps.csv: not UTF-8 text ({exc})"
    except pd.errors.EmptyDataError:
        return None, "steps.csv: empty"
    except (ValueError, OSError) as exc:  # pandas' parser errors are ValueErrors
        return None, f"steps.csv: cannot be read ({exc})"
    missing = [c for c in ("step_id", "measured_s", "predicted_s") if c not in steps]
    if missing:
        return None, f"steps.csv: lacks the column(s) {', '.join(missing)}"
    try:
        return steps[["step_id", "measured_s", "predicted_s"]].apply(pd.to_numeric), None
    except (ValueError, TypeError) as exc:
        return None, f"steps.csv: a value is not a number ({exc})"


def shipped_profile_device(path: Path) -> str | None:
    """The device the shipped profile at `path` was measured on; None without a readable one."""
    data, problem = read_json(path, path.name) if path.is_file() else (None, "absent")
    meta = data.get("meta") if isinstance(data, dict) and not problem else None
    return str(meta["device"]) if isinstance(meta, dict) and meta.get("device") else None


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
    note, mismatches, problem = diagnostics(folder)
    for line in mismatches:  # the errors then measure the other machine as well
        st.warning(f"Profile: {line}.")
    if note:
        st.caption(note)
    if problem:
        st.error(problem)
    st.plotly_chart(charts.predicted_vs_measured(report["metrics"]), use_container_width=True)
    if folder is not None and (folder / "steps.csv").is_file():
        steps, problem = read_steps(folder / "steps.csv")
        if problem:
            st.error(problem)
        else:
            fig = go.Figure([
                go.Scatter(x=steps["step_id"], y=steps["measured_s"] * 1000, name="measured", mode="lines"),
                go.Scatter(x=steps["step_id"], y=steps["predicted_s"] * 1000, name="predicted", mode="lines")])
            fig.update_layout(title="step time over the run", xaxis_title="step", yaxis_title="ms", height=340)
            st.plotly_chart(fig, use_container_width=True)
    for png in ("cdfs.png", "steps.png"):
        if folder is not None and (folder / png).is_file():
            try:
                st.image(str(folder / png))
            except (OSError, ValueError) as exc:  # PIL's UnidentifiedImageError is an OSError
                st.error(f"{png}: not an image ({type(exc).__name__})")


mode = st.radio("Source", ("Load a report", "Run on CPU"), horizontal=True, key=kept("val.mode"))
if mode == "Load a report":
    folder_text = st.text_input("Report folder (holds validation.json)", value="", key=kept("val.folder"))
    uploaded = kept_upload("...or upload a validation.json", "val.upload", type=["json"])  # kept on a page switch
    slot = st.empty()
    report, folder = None, None
    problem = None
    if uploaded is not None:
        report, problem = read_json(uploaded[1], "validation.json")
    elif folder_text:
        folder = Path(folder_text).expanduser()
        if not (folder / "validation.json").is_file():
            problem = f"report folder: no validation.json in {folder}"
            folder = None
        else:
            report, problem = read_json(folder / "validation.json", "validation.json")
    if problem:
        slot.error(problem)
    if report is not None:
        problem = check_report(report)
        if problem:
            slot.error(problem)
        else:
            show(report, folder)
else:
    configs = sorted(p.name for p in EXAMPLES.glob("validate-*.toml"))
    name = st.selectbox("Validation workload", configs, key=kept("val.config"))
    requests = st.number_input("Requests (fewer = faster)", value=20, step=5, key=kept("val.n"))
    profile = EXAMPLES / "profiles" / "tiny-llama-cpu.json"
    shipped_on = shipped_profile_device(profile)
    # the shipped profile was measured on one machine: on another its op times are that machine's
    here = st.checkbox("Calibrate on this machine first (a few minutes)", value=shipped_on is None,
                       key=kept("val.calibrate"), disabled=shipped_on is None,
                       help="profile the engine's ops here (calibrate's quick grid) before the run")
    if shipped_on is not None and not here:
        st.caption(f"The run uses the shipped profile, measured on {shipped_on}. On another machine its op times "
                   "are that machine's, and the errors measure the difference as well.")
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
                work = ("Calibrating, simulating" if here else f"Simulating with the profile measured on {shipped_on}")
                try:
                    with st.spinner(f"{work} and running the real engine..."):
                        validate(EXAMPLES / name, "cpu", None if here else profile, out,
                                 overrides=[f"workload.num_requests={int(requests)}"], progress=False)
                except (ValueError, FileNotFoundError, RuntimeError, OSError) as exc:
                    slot.error(f"the run failed: {exc}")
                    st.session_state.pop("val.last", None)
                else:
                    st.session_state["val.last"] = {"folder": str(out), "config": name, "requests": int(requests),
                                                    "calibrated": bool(here)}
    last = st.session_state.get("val.last")
    # the report of the last run, shown while the inputs are still the ones it was made from
    if isinstance(last, dict) and (last.get("config"), last.get("requests"), last.get("calibrated", False)) == (
            name, int(requests), bool(here)):
        folder = Path(last["folder"])
        report, problem = read_json(folder / "validation.json", "validation.json")
        problem = problem or check_report(report)
        if problem:
            slot.error(problem)
        else:
            st.caption(f"Report of {last['config']} with {last['requests']} requests ({folder})")
            show(report, folder)

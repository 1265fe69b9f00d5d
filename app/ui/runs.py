"""Running simulations for the app: validated configs, cached results, progress.

Results are cached by the config's canonical JSON, so re-rendering a page (every widget change)
never re-runs a simulation that was already done.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from sim.config import apply_override, config_to_toml, load_config
from sim.notes import outcome_notes, setting_notes, with_notes
from sim.runner import simulate
from sim.workload import build_workload
from ui.state import with_upload_names


@dataclass(frozen=True)
class RunOutput:
    """What a page shows of a finished simulation."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    config_toml: str
    notes: tuple[str, ...] = ()  # what one setting did to another (sim.notes), shown above the results


def validate(config_dict: dict, overrides: list[str] = ()) -> tuple[dict | None, str | None, str | None]:
    """Return (resolved dict, None, None) or (None, field, message) for the first bad field.

    `field` is the `section.key` that the error names (its message starts with it), so the page can
    show the message next to that input.
    """
    data = json.loads(json.dumps(config_dict))  # a deep, JSON-clean copy
    try:
        for line in overrides:
            apply_override(data, line)
        load_config(data)
    except (ValueError, FileNotFoundError) as exc:
        message = str(exc)
        field = message.split(":", 1)[0].strip() if ":" in message else ""
        return None, field, message
    return data, None, None


def canonical(config_dict: dict) -> str:
    return json.dumps(config_dict, sort_keys=True, default=str)


class StatusBar:
    """tqdm's interface (`total`, `update`, `close`) over a status box's label: how many of the run's
    requests have ended, said at most every `every_s` seconds (`sim.build.progress_bar`)."""

    def __init__(self, status, label: str, total: int, every_s: float = 0.5) -> None:
        self.status, self.label, self.total, self.every_s = status, label, total, every_s
        self.n, self._said = 0, 0.0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._said >= self.every_s:
            self._said = now
            self.status.update(label=f"{self.label}... {self.n:,} of {self.total:,} requests ended")

    def close(self) -> None:
        self.status.update(label=f"{self.label}...")


@st.cache_data(show_spinner=False, max_entries=64)
def run_simulation(config_json: str, _progress=None) -> RunOutput:
    """Simulate a config given as canonical JSON (the cache key; `_progress`, a bar factory for
    `simulate`, is not part of it). Raises on bad input."""
    config = load_config(json.loads(config_json))
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    config = with_notes(config, setting_notes(config, workload))
    result = simulate(config, progress=_progress or False, workload=workload)
    config = with_notes(config, outcome_notes(workload))
    return RunOutput(result.requests, result.steps, result.summary, config_to_toml(config), config.notes)


def run_with_status(config_dict: dict, label: str = "Simulating") -> RunOutput | None:
    """Run (or fetch from cache) with a status box; errors are shown, not raised."""
    with st.status(f"{label}...", expanded=False) as status:
        try:
            out = run_simulation(canonical(config_dict), _progress=lambda total: StatusBar(status, label, total))
        except (ValueError, FileNotFoundError) as exc:
            status.update(label=f"{label}: failed", state="error")
            st.error(with_upload_names(str(exc)))  # an uploaded trace by the name it was uploaded as
            return None
        finished, rejected = out.summary.get("num_finished", 0), out.summary.get("num_rejected", 0)
        status.update(label=f"{label}: done ({finished} finished" + (f", {rejected} rejected)" if rejected else ")"),
                      state="complete")
    return out

"""app.ui.runs: a long simulation counts its ended requests in the page's status box."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
from ui.runs import StatusBar  # noqa: E402

from sim.config import load_config  # noqa: E402
from sim.runner import simulate  # noqa: E402


class Status:
    """What `st.status` gives, as far as the bar uses it: the labels it was given."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def update(self, label: str) -> None:
        self.labels.append(label)


def test_the_status_box_counts_the_requests_of_a_run_as_they_end(monkeypatch):
    monkeypatch.setattr("sim.build.PROGRESS_MIN_REQUESTS", 1)
    status = Status()
    config = load_config({"model": {"name": "Llama-3-8B"}, "workload": {"num_requests": 40, "rate": 20.0}})
    simulate(config, progress=lambda total: StatusBar(status, "Simulating", total, every_s=0.0))
    counts = [label for label in status.labels if label.endswith("requests ended")]
    assert counts[0] == "Simulating... 1 of 40 requests ended" and counts[-1] == "Simulating... 40 of 40 requests ended"
    assert len(counts) == 40 and status.labels[-1] == "Simulating..."  # closed: the label as it was

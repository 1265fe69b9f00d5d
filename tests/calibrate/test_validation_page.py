"""calibrate.validation_page: what a validation's details say of the machine, and its page."""
from __future__ import annotations

import pytest

from calibrate.validate import LATENCY_METRICS, STATS, THROUGHPUT
from calibrate.validation_page import diagnostics, write_html
from sim.latency.profile import Profile


def details(**fields) -> dict:
    """A details.json with only `fields` set (every diagnostic's field absent otherwise)."""
    return dict(fields)


def report(error: float = 3.0) -> dict:
    cell = {"predicted": 0.011, "measured": 0.010, "abs_pct_error": 10.0}
    return {"step_time_abs_pct_error": {"median": error, "p90": 2 * error},
            "metrics": {**{m: {s: dict(cell) for s in STATS} for m in LATENCY_METRICS},
                        "throughput": {t: dict(cell) for t in THROUGHPUT}}}


def test_no_field_no_phrase():
    assert diagnostics(details()) == []


@pytest.mark.parametrize("fields, phrase", [
    ({"step_time_abs_pct_error_detrended": {"median": 2.5}}, "drift over the run taken out: 2.5%"),
    ({"bracket_drift_pct": 4.0}, "after the run than before it"),
    ({"speed_probe": {"run_median": 1.03}}, "by the speed probe the machine ran the engine"),
    ({"last_level_cache": {"weights_fit": True}}, "weights fit in the CPU's last-level cache"),
    ({"load_avg_1m": [0.3, 0.9]}, "load average 0.3-0.9"),
    ({"engine_step_fit": {"holdout_median_abs_pct": 4.2}}, "engine-step fit held out: 4.2%"),
])
def test_each_field_gives_its_phrase(fields, phrase):
    notes = diagnostics(details(**fields))
    assert len(notes) == 1 and phrase in notes[0]


def test_weights_beyond_the_cache_say_nothing():
    assert diagnostics(details(last_level_cache={"weights_fit": False, "note": None})) == []


def test_the_page_carries_the_table_the_diagnostics_and_escaped_warnings(tmp_path):
    prof = Profile(meta={"device": "cpu", "source": "test", "date": "2026-12-06"}, model={}, ops={})
    d = details(last_level_cache={"weights_fit": True}, calibration_warnings=["scale <at> its bound"])
    write_html(tmp_path, report(), "w.toml", prof, d, plots=False)
    page = (tmp_path / "index.html").read_text()
    assert "weights fit in the CPU&#x27;s last-level cache" in page
    assert "scale &lt;at&gt; its bound" in page and "<at>" not in page
    assert "median abs error 3" in page and "(no plot: matplotlib is not installed)" in page
    assert page.count("<tr><td>") == len(LATENCY_METRICS) * len(STATS) + len(THROUGHPUT)

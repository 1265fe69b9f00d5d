"""`calibrate.fit_checks`: a clamped or ungeneralising engine-step fit is said, in the profile, the
warnings, the CLIs and validate's report; a sound one says nothing."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from calibrate.engine_steps import SCALE_BOUNDS
from calibrate.fit_checks import HELD_OUT_LIMIT_PCT, CalibrationWarning, check_profile, held_out_line

REPO = Path(__file__).resolve().parents[2]


def meta(scales=(1.1, 1.0, 0.9), held=4.0, in_sample=3.5) -> dict:
    return {"in_step_scale": dict(zip(("dense", "attn_prefill", "attn_decode"), scales)),
            "engine_step_fit": {"median_abs_pct": in_sample, "holdout_median_abs_pct": held,
                                "configurations": ["chunked-64", "chunked-256", "continuous-2048"]},
            "load_avg_1m_at_start": 0.4, "load_avg_1m_at_end": 0.5}


def test_a_sound_fit_passes_every_check():
    assert check_profile(meta()) == []
    assert check_profile({}) == []  # an imported profile has no engine-step fit to check


@pytest.mark.parametrize("index, bound", [(0, SCALE_BOUNDS[0]), (1, SCALE_BOUNDS[1]), (2, SCALE_BOUNDS[0] * 1.004)])
def test_a_scale_at_its_clamp_bound_is_named(index, bound):
    scales = [1.0, 1.0, 1.0]
    scales[index] = bound
    msgs = check_profile(meta(tuple(scales)))
    name = ("dense", "attn_prefill", "attn_decode")[index]
    assert len(msgs) == 1 and f"in-step scale {name}" in msgs[0] and "bound" in msgs[0]


def test_a_scale_near_but_off_its_bound_is_not_a_clamp():
    assert check_profile(meta((SCALE_BOUNDS[0] * 1.02, 1.0, SCALE_BOUNDS[1] * 0.98))) == []


def test_a_held_out_error_above_the_limit_is_a_missed_check():
    assert check_profile(meta(held=HELD_OUT_LIMIT_PCT)) == []
    msgs = check_profile(meta(held=HELD_OUT_LIMIT_PCT + 0.1, in_sample=6.0))
    assert len(msgs) == 1 and "held-out check" in msgs[0] and f"{HELD_OUT_LIMIT_PCT + 0.1:.1f}%" in msgs[0]
    assert "held out 4.0%" in held_out_line(meta()) and held_out_line({}) is None


def degenerate_profile(tmp_path: Path) -> Path:
    """The shipped CPU profile with its dense scale pushed onto the upper clamp and no stored checks."""
    data = json.loads((REPO / "examples/profiles/tiny-llama-cpu.json").read_text())
    data["meta"]["in_step_scale"]["dense"] = SCALE_BOUNDS[1]
    data["meta"].pop("warnings", None)
    path = tmp_path / "degenerate.json"
    path.write_text(json.dumps(data))
    return path


def test_calibrate_stores_its_checks_and_issues_them(tmp_path):
    torch = pytest.importorskip("torch")
    from calibrate.bench import calibrate
    from calibrate_helpers import MICRO, micro_grid

    path = tmp_path / "config.json"
    path.write_text(json.dumps(MICRO))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            profile = calibrate(path, "cpu", progress=False, grid=micro_grid())
    finally:
        torch.set_num_threads(threads)
    assert profile.meta["warnings"] == check_profile(profile.meta)
    issued = [str(w.message) for w in caught if issubclass(w.category, CalibrationWarning)]
    assert issued == profile.meta["warnings"]


def test_validate_reports_a_loaded_profiles_failed_checks_loudly(tmp_path, capsys):
    pytest.importorskip("torch")
    from servesim.cli import main
    from test_validate import tiny_toml

    out = tmp_path / "report"
    rc = main(["validate", str(tiny_toml(tmp_path, num_requests=4)), "--profile", str(degenerate_profile(tmp_path)),
               "--out", str(out), "--no-progress"])
    assert rc in (0, None)
    captured = capsys.readouterr()
    assert "WARNING: calibration: in-step scale dense = 1.500 sits at its upper bound" in captured.err
    assert "calibration: engine-step fit in-sample" in captured.out
    details = json.loads((out / "details.json").read_text())
    assert len(details["calibration_warnings"]) == 1 and "dense" in details["calibration_warnings"][0]
    assert details["engine_step_fit"]["holdout_median_abs_pct"] is not None
    assert "calibration warning" in (out / "index.html").read_text()


@pytest.mark.parametrize("load, advice", [(0.3, "machine_floor.py"), (7.5, "rerun on a quieter machine")])
def test_the_load_line_says_what_to_do_at_that_load(monkeypatch, load, advice):
    import io

    from calibrate.fit_checks import print_warnings

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    out = io.StringIO()
    print_warnings({"warnings": ["a scale at its bound"], "load_avg_1m_at_start": load, "load_avg_1m_at_end": load},
                   file=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "WARNING: calibration: a scale at its bound"
    assert lines[1].startswith(f"WARNING: calibration: load average {load}-{load} while it ran; ") and advice in lines[1]
    out = io.StringIO()
    print_warnings({"warnings": [], "load_avg_1m_at_start": load, "load_avg_1m_at_end": load}, file=out)
    assert out.getvalue() == ""  # nothing to qualify, no load line

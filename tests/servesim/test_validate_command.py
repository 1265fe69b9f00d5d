"""`servesim validate`'s printed table and diagnostics (`servesim.commands.validate.report_lines`)."""
from __future__ import annotations

from calibrate.validate import LATENCY_METRICS, STATS, THROUGHPUT
from servesim.commands.validate import report_lines


def report() -> dict:
    cell = {"predicted": 0.011, "measured": 0.010, "abs_pct_error": 10.0}
    return {"step_time_abs_pct_error": {"median": 3.0, "p90": 6.0},
            "metrics": {**{m: {s: dict(cell) for s in STATS} for m in LATENCY_METRICS},
                        "throughput": {t: dict(cell) for t in THROUGHPUT}}}


def test_the_table_has_a_row_per_measured_statistic():
    lines = report_lines(report(), {})
    assert lines[0].startswith("per-step time abs error: median 3")
    rows = lines[2:]
    assert len(rows) == len(LATENCY_METRICS) * len(STATS) + len(THROUGHPUT)
    assert not any(line.startswith("diagnostic") for line in rows)


def test_a_cache_that_holds_the_weights_is_a_diagnostic_line():
    note = "the model's weights (15 MiB) fit in this CPU's 32 MiB L3 cache: ..."
    lines = report_lines(report(), {"last_level_cache": {"weights_fit": True, "note": note}})
    assert f"diagnostic: {note}" in lines
    lines = report_lines(report(), {"last_level_cache": {"weights_fit": False, "note": None}})
    assert not any("last-level" in line or "L3" in line for line in lines)


def test_the_speed_probe_says_how_the_run_compares_with_its_calibration():
    d = {"speed_probe": {"reference_s": 0.004, "run_median": 1.05, "run_num_readings": 12, "run_p10": 1.01,
                         "run_p90": 1.08},
         "at_run_speed": {"step_time_abs_pct_error": {"median": 2.0},
                          "mean_abs_pct_error": {"ttft_s": 4.0, "tpot_s": 1.0, "e2e_s": None}}}
    lines = report_lines(report(), d)
    probe = [line for line in lines if "speed probe (12 readings)" in line]
    assert len(probe) == 1 and "slower" in probe[0]
    scaled = [line for line in lines if "at the run's speed instead" in line]
    assert len(scaled) == 1 and "TTFT 4" in scaled[0] and "E2E" not in scaled[0]


def test_without_a_reference_speed_the_probe_compares_no_speeds():
    # a profile made without the speed probe: its run readings have nothing to be compared with
    d = {"speed_probe": {"reference_s": None, "run_median": 1.0, "run_num_readings": 56, "run_p10": 1.0,
                         "run_p90": 1.0, "run_scatter_pct": 2.0},
         "speed_basis": {"basis": "calibration", "why": "no speed probe read the run and its calibration"}}
    lines = report_lines(report(), d)
    assert not any("by the speed probe" in line for line in lines)
    assert any("scattered 2.0%" in line for line in lines)
    assert "the figures above are at the calibration's speed: no speed probe read the run and its calibration" in lines


def test_the_probes_own_scatter_is_given_as_the_machines_per_step_floor():
    d = {"speed_probe": {"reference_s": 0.004, "run_median": 1.0, "run_num_readings": 40, "run_p10": 0.9, "run_p90": 1.1,
                         "run_scatter_pct": 4.0, "calibration_scatter_pct": 1.5},
         "speed_basis": {"basis": "run", "why": "..."},
         "at_run_speed": {"step_time_abs_pct_error": {"median": 7.0}, "mean_abs_pct_error": {}}}
    floor = [line for line in report_lines(report(), d) if "scattered" in line]
    assert len(floor) == 1 and "4.0%" in floor[0] and "(1.5% during the calibration)" in floor[0]
    assert "much of that figure is the machine's" in floor[0]  # 4.0 >= half of 7.0
    d["at_run_speed"]["step_time_abs_pct_error"]["median"] = 9.0
    floor = [line for line in report_lines(report(), d) if "scattered" in line]
    assert len(floor) == 1 and "much of that figure" not in floor[0]
    del d["speed_probe"]["run_scatter_pct"]
    assert not any("scattered" in line for line in report_lines(report(), d))


def test_figures_at_the_runs_speed_say_so_and_give_the_calibrations():
    d = {"speed_probe": {"reference_s": 0.004, "run_median": 0.97, "run_num_readings": 30, "run_p10": 0.95,
                         "run_p90": 0.99},
         "speed_basis": {"basis": "run", "why": "the model's weights (118 MiB) exceed the 32 MiB L3 cache; ..."},
         "at_run_speed": {"step_time_abs_pct_error": {"median": 3.0},
                          "mean_abs_pct_error": {"ttft_s": 10.0, "tpot_s": 10.0, "e2e_s": 10.0}},
         "at_calibration_speed": {"step_time_abs_pct_error": {"median": 6.5},
                                  "mean_abs_pct_error": {"ttft_s": 8.0, "tpot_s": 2.0, "e2e_s": 1.5}}}
    lines = report_lines(report(), d)
    assert any(line.startswith("the figures above are at the run's speed: the model's weights") for line in lines)
    other = [line for line in lines if "at the calibration's speed instead" in line]
    assert len(other) == 1 and "median 6.5" in other[0] and "TPOT 2" in other[0]
    assert not any("at the run's speed instead" in line for line in lines)

"""Each app page driven with streamlit's AppTest: inputs set, run, outputs present, bad input shown."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

PAGES = Path(__file__).resolve().parents[2] / "app" / "views"


def page(name: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def plotly_charts(at: AppTest) -> list:
    return [el for el in at.main if getattr(el, "type", "") == "plotly_chart"] or at.get("plotly_chart")


def test_simulate_page_runs_and_shows_results():
    at = page("simulate")
    at.number_input(key="sim.n").set_value(60)
    at.number_input(key="sim.rate").set_value(3.0)
    at.button(key="sim.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    labels = {m.label for m in at.metric}
    assert {"TTFT p50 / p99 (ms)", "TPOT p50 / p99 (ms)", "Output tokens/s", "Preemptions"} <= labels
    finished = next(m.value for m in at.metric if m.label == "Finished / rejected")
    done, rejected = (int(x) for x in finished.split("/"))
    assert done + rejected == 60  # nothing lost
    assert len(plotly_charts(at)) >= 4  # three CDFs + the step timeline (+ the request timeline)


def test_simulate_page_takes_the_weights_precision():
    """4-bit weights read a quarter of the bytes: a light load's decode steps (memory-bound) get faster."""
    at = page("simulate")
    at.number_input(key="sim.n").set_value(40)
    at.number_input(key="sim.rate").set_value(2.0)

    def tpot_p50() -> float:
        at.button(key="sim.run").click().run()
        assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
        return float(next(m.value for m in at.metric if m.label == "TPOT p50 / p99 (ms)").split("/")[0])

    full = tpot_p50()
    at.selectbox(key="sim.dtype").set_value("w4a16")
    assert tpot_p50() < 0.6 * full


def test_simulate_page_spreads_requests_over_replicas():
    at = page("simulate")
    at.number_input(key="sim.n").set_value(40)
    at.number_input(key="sim.replicas").set_value(2).run()  # the router choice opens up
    at.selectbox(key="sim.router").set_value("round_robin")
    at.button(key="sim.run").click().run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    requests = next(df.value for df in at.dataframe if "replica" in df.value.columns and "ttft_s" in df.value.columns)
    counts = requests["replica"].astype(str).value_counts()
    assert len(counts) == 2 and counts.min() == 20  # round robin: 20 each


def test_simulate_page_shows_bad_input_next_to_its_field():
    at = page("simulate")
    at.number_input(key="sim.rate").set_value(-1.0)
    at.run()
    messages = [e.value for e in at.error]
    assert any(m.startswith("workload.rate") for m in messages), messages
    at.number_input(key="sim.rate").set_value(2.0)
    at.text_area(key="sim.extra").input("scheduler.policy=fifo").run()
    messages = [e.value for e in at.error]
    assert any("scheduler.policy" in m and "chunked" in m for m in messages), messages


def test_compare_page_runs_three_configs():
    at = page("compare")
    at.number_input(key="cmp.n").set_value(60)
    at.button(key="cmp.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    tables = at.dataframe
    assert tables, "no comparison table"
    df = tables[0].value
    assert len(df) == 3 and df["output tok/s"].gt(0).all()


def test_compare_page_shows_a_bad_column_under_that_column():
    at = page("compare")
    at.number_input(key="cmp.1.budget").set_value(0)
    at.button(key="cmp.run").click().run()
    messages = [e.value for e in at.error]
    assert any(m.startswith("scheduler.max_num_batched_tokens") for m in messages), messages
    assert not at.dataframe  # nothing ran


def test_capacity_page_finds_a_layout_and_draws_the_load_curve():
    at = page("capacity")
    at.number_input(key="cap.n").set_value(60)
    at.number_input(key="cap.target").set_value(2.0)
    at.multiselect(key="cap.gpus").set_value(["H100-SXM"])
    at.multiselect(key="cap.tps").set_value([1])
    at.multiselect(key="cap.reps").set_value([1, 2])
    at.button(key="cap.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    titles = [m.label for m in at.metric]
    assert "Fewest GPUs" in titles and "Lowest cost" in titles
    table = at.dataframe[-1].value
    assert set(table["replicas"]) == {1, 2} and table["slo_met"].any()
    assert len(plotly_charts(at)) == 2


def test_capacity_page_rejects_an_empty_candidate_list():
    at = page("capacity")
    at.multiselect(key="cap.tps").set_value([])
    at.run()
    assert any("plan.tps" in e.value for e in at.error), [e.value for e in at.error]
    assert not at.exception, [e.value for e in at.exception]  # no grid was built: nothing may use one


def make_report(tmp_path):
    """A real validation.json: two simulations of one workload, one playing 'measured'."""
    from calibrate.validate import compare
    from sim.config import load_config
    from sim.runner import simulate

    base = {"workload": {"num_requests": 40, "rate": 2.0}}
    predicted = simulate(load_config(base))
    measured = simulate(load_config(base, ["hardware.gpu=A100-80G"]))
    report = compare(predicted.summary, measured.summary, [3.0, 4.0, 5.0])
    (tmp_path / "validation.json").write_text(__import__("json").dumps(report))
    return report


def test_validate_page_loads_a_report(tmp_path):
    report = make_report(tmp_path)
    at = page("validate")
    at.text_input(key="val.folder").input(str(tmp_path)).run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    table = at.dataframe[0].value
    ttft = table[(table.metric == "ttft_s") & (table["stat"] == "mean")].iloc[0]
    assert ttft["measured"] == pytest.approx(report["metrics"]["ttft_s"]["mean"]["measured"])
    assert any(m.label == "Per-step error, median" and m.value == "4.0%" for m in at.metric)


def test_validate_page_shows_how_much_of_the_step_error_is_the_machine(tmp_path):
    import json

    make_report(tmp_path)
    (tmp_path / "details.json").write_text(json.dumps({
        "step_time_abs_pct_error_detrended": {"median": 2.9, "p90": 8.0, "window": 51},
        "bracket_drift_pct": -4.2, "load_avg_1m": [0.6, 0.7]}))
    at = page("validate")
    at.text_input(key="val.folder").input(str(tmp_path)).run()
    assert not at.exception and not at.error
    line = " ".join(c.value for c in at.caption)
    assert "taken out: 2.9%" in line and "4.2% faster" in line and "0.6-0.7" in line


def test_validate_page_names_a_missing_report(tmp_path):
    at = page("validate")
    at.text_input(key="val.folder").input(str(tmp_path / "nowhere")).run()
    assert any("no validation.json" in e.value for e in at.error)
    (tmp_path / "validation.json").write_text('{"metrics": {}}')
    at.text_input(key="val.folder").input(str(tmp_path)).run()
    assert any("step_time_abs_pct_error" in e.value for e in at.error)


def test_capacity_page_simulates_an_autoscaled_fleet_under_a_stepped_load():
    at = page("capacity")
    at.number_input(key="auto.low").set_value(1.0)
    at.number_input(key="auto.high").set_value(30.0)
    at.number_input(key="auto.stage").set_value(40.0)
    at.number_input(key="auto.target").set_value(2.0)
    at.number_input(key="auto.delay").set_value(10.0)
    at.button(key="auto.run").click().run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    up = next(m.value for m in at.metric if m.label == "Replicas up (max / mean)")
    assert int(up.split("/")[0]) > 1  # the peak made it scale up
    labels = {m.label for m in at.metric}
    assert {"Cost per 1M output tokens", "Energy per output token", "GPU-hours"} <= labels
    assert len(plotly_charts(at)) >= 1


def test_simulate_page_says_when_the_run_is_saturated():
    at = page("simulate")
    at.number_input(key="sim.n").set_value(300)
    at.number_input(key="sim.rate").set_value(200.0)
    at.button(key="sim.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Saturated" in w.value for w in at.warning), [w.value for w in at.warning]


def test_the_summary_cards_say_why_requests_were_rejected():
    def script():
        from app.ui import summary

        summary.cards({"num_finished": 3, "num_rejected": 7, "rejected_reasons": [
            {"kind": "prompt (N tokens) + max_tokens (N) = N exceeds max_model_len (N)", "count": 6,
             "example": "prompt (9000 tokens) + max_tokens (64) = 9064 exceeds max_model_len (8192)"},
            {"kind": "needs N KV blocks", "count": 1, "example": "needs 900 KV blocks"}]})

    at = AppTest.from_function(script, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [w.value for w in at.warning] == [
        "6 rejected: prompt (9000 tokens) + max_tokens (64) = 9064 exceeds max_model_len (8192) (and the like)",
        "1 rejected: needs 900 KV blocks"]


def test_simulate_page_runs_a_benchmark_sweep_benchmark_by_benchmark():
    at = page("simulate")
    at.selectbox(key="sim.wkind").set_value("benchmark sweep").run()
    at.text_input(key="sim.sw.rate").set_value("4")
    at.number_input(key="sim.sw.n").set_value(20)
    at.button(key="sim.run").click().run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    finished = next(m.value for m in at.metric if m.label == "Finished / rejected")
    assert sum(int(x) for x in finished.split("/")) == 4 * 20  # every benchmark's requests
    table = at.dataframe[0].value
    assert list(table["strategy"]) == ["synchronous", "throughput", "constant", "constant"]
    assert (table["requests"] == 20).all()
    assert table["requests_per_s"].iloc[0] < table["requests_per_s"].iloc[2] < table["requests_per_s"].iloc[3]
    at.text_input(key="sim.sw.rate").set_value("1").run()  # a sweep of one benchmark: its field's error
    at.button(key="sim.run").click().run()
    assert any("profile.rate: a sweep needs at least 2" in e.value for e in at.error)

"""Each app page driven with streamlit's AppTest: inputs set, run, outputs present, bad input shown."""
from __future__ import annotations

import json
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


def plan_on_h100(at: AppTest, n: int, target: float, replicas: list[int]) -> AppTest:
    """Capacity page `at` planning `n` requests at `target` req/s over H100 TP1 x `replicas`."""
    at.number_input(key="cap.n").set_value(n)
    at.number_input(key="cap.target").set_value(target)
    at.multiselect(key="cap.gpus").set_value(["H100-SXM"])
    at.multiselect(key="cap.tps").set_value([1])
    at.multiselect(key="cap.reps").set_value(replicas)
    return at.button(key="cap.run").click().run()


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
    plan_on_h100(at, 60, 2.0, [1, 2])
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


# --- faults found by driving the pages headlessly (one test each) ---------------------------------


def errors_of(at: AppTest) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]
    return [e.value for e in at.error]


def test_compare_column_labels_follow_policy_and_budget_until_edited():
    at = page("compare")
    at.selectbox(key="cmp.0.policy").set_value("chunked")
    at.number_input(key="cmp.0.budget").set_value(128).run()
    assert at.text_input(key="cmp.0.label").value == "chunked 128"
    at.text_input(key="cmp.0.label").input("mine").run()
    at.number_input(key="cmp.0.budget").set_value(64).run()
    assert at.text_input(key="cmp.0.label").value == "mine"  # the user's label stays
    assert at.text_input(key="cmp.1.label").value == "chunked 512"


def test_compare_shows_finished_and_rejected_per_column():
    at = page("compare")
    at.number_input(key="cmp.n").set_value(60)
    at.radio(key="cmp.count").set_value(2).run()
    at.text_area(key="cmp.extra").input("hardware.num_gpu_blocks=20").run()
    at.button(key="cmp.run").click().run()
    assert not errors_of(at)
    table = at.dataframe[0].value
    assert {"finished", "rejected", "saturated"} <= set(table.columns)
    assert (table["finished"] + table["rejected"] == 60).all() and table["rejected"].gt(0).all()
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("continuous 2048: ") and "rejected" in w for w in warnings), warnings
    assert all("finished" in s.label for s in at.get("status")), [s.label for s in at.get("status")]


def test_compare_flags_a_saturated_column():
    at = page("compare")
    at.number_input(key="cmp.n").set_value(150)
    at.number_input(key="cmp.rate").set_value(200.0)
    at.radio(key="cmp.count").set_value(2).run()
    at.button(key="cmp.run").click().run()
    assert not errors_of(at)
    table = at.dataframe[0].value
    assert table["saturated"].any()
    assert any(": Saturated" in w.value for w in at.warning), [w.value for w in at.warning]


def test_compare_form_leaves_policy_budget_and_preemption_to_the_columns():
    at = page("compare")
    assert not [w for w in at.selectbox if w.key in ("cmp.policy", "cmp.preemption")]
    assert not [w for w in at.number_input if w.key == "cmp.budget"]


def test_compare_shows_each_columns_notes():
    """Two columns that differ only in a budget a whole-prompt policy ignores say why they agree."""
    at = page("compare")
    at.number_input(key="cmp.n").set_value(40)
    at.radio(key="cmp.count").set_value(2).run()
    at.selectbox(key="cmp.1.policy").set_value("continuous")
    at.number_input(key="cmp.1.budget").set_value(256).run()
    at.button(key="cmp.run").click().run()
    assert not errors_of(at)
    notes = [i.value for i in at.info]
    assert any(n.startswith("continuous 256: ") and "max_model_len" in n for n in notes), notes


def test_compare_shows_a_shared_field_error_once_under_the_form():
    at = page("compare")
    at.number_input(key="cmp.seqs").set_value(0).run()
    messages = [m for m in errors_of(at) if "max_num_seqs" in m]
    assert len(messages) == 1, messages


def test_a_negative_e2e_target_or_provisioning_delay_cannot_be_entered():
    """The inputs' minimum is 0 (the browser refuses less; streamlit puts a lower value back to it)."""
    at = page("simulate")
    assert at.number_input(key="sim.se2e").min == 0
    at.number_input(key="sim.se2e").set_value(-3.0).run()
    assert at.number_input(key="sim.se2e").value == 0 and not errors_of(at)
    at = page("compare")
    assert at.number_input(key="cmp.se2e").min == 0
    at = page("capacity")
    assert at.number_input(key="auto.delay").min == 0
    at.number_input(key="auto.delay").set_value(-5.0).run()
    assert at.number_input(key="auto.delay").value >= 0


def test_capacity_autoscaling_shows_a_run_error_in_the_page():
    at = page("capacity")
    at.selectbox(key="cap.model").set_value("Llama-3-70B").run()  # TP 1: its weights do not fit
    at.button(key="auto.run").click().run()
    assert any(m.startswith("hardware.tp") for m in errors_of(at))
    at = page("capacity")
    at.text_area(key="cap.extra").input("disaggregation.enabled=true").run()
    at.button(key="auto.run").click().run()
    assert any("autoscaling" in m and "disaggregation" in m for m in errors_of(at))


def test_capacity_autoscaling_result_survives_reruns():
    at = page("capacity")
    at.number_input(key="auto.high").set_value(6.0)
    at.number_input(key="auto.stage").set_value(20.0)
    at.button(key="auto.run").click().run()
    assert not errors_of(at)
    assert any(m.label == "Replicas up (max / mean)" for m in at.metric)
    at.number_input(key="cap.target").set_value(3.0).run()  # another section's input: the result stays
    assert any(m.label == "Replicas up (max / mean)" for m in at.metric)
    at.number_input(key="auto.high").set_value(7.0).run()  # its own input changed: the result is gone
    assert not any(m.label == "Replicas up (max / mean)" for m in at.metric)


def test_capacity_small_target_rate_still_draws_the_curve():
    at = page("capacity")
    plan_on_h100(at, 30, 0.001, [1])
    assert not errors_of(at)
    assert len(plotly_charts(at)) == 2


def test_capacity_cards_and_curves_say_what_they_show():
    at = page("capacity")
    plan_on_h100(at, 40, 2.0, [1, 2])
    assert not errors_of(at)
    cards = {m.label: m.value for m in at.metric}
    assert cards["Fewest GPUs"] == "1 GPU"
    assert cards["Lowest cost"].startswith("$") and cards["Lowest cost"].endswith("/h")
    assert cards["Lowest cost per 1M tokens"].startswith("$") and "GPU" not in cards["Lowest cost per 1M tokens"]
    assert cards["Least energy per token"].endswith(" J")
    for chart in plotly_charts(at):
        layout = json.loads(chart.proto.spec)["layout"]
        assert layout["xaxis"]["title"]["text"] == "offered rate (requests/s)"
        assert layout["yaxis"]["title"]["text"]



def test_capacity_load_curve_offers_every_rate_the_same_requests_unless_unticked():
    at = page("capacity")
    plan_on_h100(at, 40, 2.0, [1])
    assert not errors_of(at)

    def shared() -> str:
        return next(c.value for c in at.caption if c.value.startswith("Common across rates: "))

    assert shared().startswith("Common across rates: request i's prompt and output lengths")
    ttft = json.loads(plotly_charts(at)[0].proto.spec)["data"][0]["y"]
    at.checkbox(key="cap.common").uncheck().run()
    assert not errors_of(at) and shared().startswith("Common across rates: nothing")
    assert json.loads(plotly_charts(at)[0].proto.spec)["data"][0]["y"] != ttft  # another sample

BAD_REPORTS = {
    "metric not an object": {"metrics": {"ttft_s": 5}},
    "stat not an object": {"metrics": {"ttft_s": {"mean": 5}}},
    "metric a list": {"metrics": {"e2e_s": [1, 2]}},
    "figure a string": {"step_time_abs_pct_error": {"median": "4%"}},
}


@pytest.mark.parametrize("case", sorted(BAD_REPORTS))
def test_validate_page_names_a_report_of_the_wrong_shape(case):
    good = {"step_time_abs_pct_error": {"median": 4.0},
            "metrics": {"e2e_s": {"mean": {"predicted": 1, "measured": 1.1}}}}
    at = page("validate")
    body = json.dumps({**good, **BAD_REPORTS[case]}).encode()
    at.file_uploader(key="val.upload").set_value(("validation.json", body, "application/json")).run()
    messages = errors_of(at)
    assert len(messages) == 1 and messages[0].startswith("validation.json: "), messages


def test_validate_page_names_a_file_that_is_not_utf8():
    at = page("validate")
    at.file_uploader(key="val.upload").set_value(("validation.json", b'{"a": "\xff"}', "application/json")).run()
    assert errors_of(at) == [errors_of(at)[0]] and "UTF-8" in errors_of(at)[0]


@pytest.mark.parametrize("name, body, expect", [
    ("steps.csv", "a,b\n1,2\n", "steps.csv: lacks the column(s) step_id, measured_s, predicted_s"),
    ("steps.csv", "", "steps.csv: empty"),
    ("steps.csv", b"step_id,measured_s,predicted_s\n1,\xff,2\n", "steps.csv: not UTF-8"),
    ("cdfs.png", "not a picture", "cdfs.png: not an image"),
    ("details.json", "[1, 2]", "details.json: expected a JSON object"),
    ("details.json", '{"step_time_abs_pct_error_detrended": "x"}', "details.json: "),
])
def test_validate_page_names_a_bad_file_of_the_report_folder(tmp_path, name, body, expect):
    make_report(tmp_path)
    path = tmp_path / name
    path.write_bytes(body) if isinstance(body, bytes) else path.write_text(body)
    at = page("validate")
    at.text_input(key="val.folder").input(str(tmp_path)).run()
    messages = errors_of(at)
    assert len(messages) == 1 and messages[0].startswith(expect), messages
    assert at.dataframe  # the report itself is still shown


def test_validate_run_on_cpu_shows_its_report_only_for_its_inputs(tmp_path):
    make_report(tmp_path)
    at = page("validate")
    at.radio(key="val.mode").set_value("Run on CPU").run()
    config = at.selectbox(key="val.config").value
    at.session_state["val.last"] = {"folder": str(tmp_path), "config": config, "requests": 20}
    at.run()
    assert not errors_of(at) and at.dataframe
    assert any(config in c.value and "20 requests" in c.value for c in at.caption)
    at.number_input(key="val.n").set_value(5).run()
    assert not at.dataframe  # another request count: that report is not this one's


def test_validate_run_on_cpu_shows_an_error_of_the_run(monkeypatch):
    import calibrate.validate

    def fail(*args, **kwargs):
        raise ValueError("workload.num_requests: too few for a check")

    monkeypatch.setattr(calibrate.validate, "validate", fail)
    at = page("validate")
    at.radio(key="val.mode").set_value("Run on CPU").run()
    at.button(key="val.run").click().run()
    assert any("too few for a check" in m for m in errors_of(at))


APP = PAGES.parent / "streamlit_app.py"


def test_switching_pages_keeps_each_pages_inputs_and_results():
    """Streamlit drops the state of widgets a run does not render: a page left and come back to kept
    its inputs (edited prices and an uploaded file included) and showed its last results again."""
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.run()
    at.number_input(key="sim.n").set_value(60)
    at.number_input(key="sim.rate").set_value(3.0)
    at.button(key="sim.run").click().run()
    assert len(at.metric) > 0
    at.switch_page("views/compare.py").run()
    at.radio(key="cmp.count").set_value(2)
    at.text_input(key="cmp.0.label").input("mine").run()
    at.switch_page("views/capacity.py").run()
    at.multiselect(key="cap.gpus").set_value(["H100-SXM"])
    at.number_input(key="cap.target").set_value(2.5).run()
    at.switch_page("views/validate.py").run()
    body = json.dumps({"step_time_abs_pct_error": {"median": 1.0, "p90": 2.0}, "metrics": {}}).encode()
    at.file_uploader(key="val.upload").set_value(("validation.json", body, "application/json")).run()
    assert [m.value for m in at.metric][:2] == ["1.0%", "2.0%"]

    at.switch_page("views/simulate.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert (at.number_input(key="sim.n").value, at.number_input(key="sim.rate").value) == (60, 3.0)
    assert any(m.label == "Finished / rejected" for m in at.metric)  # the results are back
    at.switch_page("views/compare.py").run()
    assert at.radio(key="cmp.count").value == 2 and at.text_input(key="cmp.0.label").value == "mine"
    at.switch_page("views/capacity.py").run()
    assert at.multiselect(key="cap.gpus").value == ["H100-SXM"] and at.number_input(key="cap.target").value == 2.5
    at.switch_page("views/validate.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [m.value for m in at.metric][:2] == ["1.0%", "2.0%"]  # the uploaded report, still shown


def test_capacity_page_offers_the_typed_requests_at_the_target_rate():
    """The form has no Rate input of its own (the target rate sets the load, and the plan's window is
    the requests typed), and says that the candidates replace its GPU, TP and replicas."""
    at = page("capacity")
    assert "cap.rate" not in [w.key for w in at.number_input]
    assert any("in place of this GPU, TP and Replicas" in c.value for c in at.caption)
    plan_on_h100(at, 40, 2.0, [1])
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    planned = json.loads(at.session_state["cap.last"][0])["workload"]
    assert (planned["rate"], planned["num_requests"]) == (2.0, 40)  # 40 requests offered at 2 req/s
    assert "Lowest cost" in [m.label for m in at.metric]


def test_trace_upload_errors_name_the_uploaded_file():
    at = page("simulate")
    at.selectbox(key="sim.wkind").set_value("trace").run()
    at.file_uploader(key="sim.trace").set_value(("my-trace.csv", b"arrival_time,prompt_tokens\n0,10\n",
                                                 "text/csv")).run()
    at.button(key="sim.run").click().run()
    messages = [e.value for e in at.error]
    assert any("my-trace.csv" in m and "output_tokens" in m for m in messages), messages
    assert not any("servesim-trace-" in m for m in messages), messages


def test_simulate_page_bounds_the_requests_and_says_how_long_a_big_run_takes():
    at = page("simulate")
    assert at.number_input(key="sim.n").max <= 1_000_000
    at.number_input(key="sim.n").set_value(500_000).run()
    assert any("500,000 requests" in w.value and "minutes" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    at.number_input(key="sim.n").set_value(2000).run()
    assert not at.warning, [w.value for w in at.warning]


def test_validate_page_warns_of_a_profile_measured_on_another_machine(tmp_path):
    """details.json names how the profile's machine differs from the run's: said above the figures."""
    make_report(tmp_path)
    line = "the profile was measured on cpu: AMD EPYC (1 threads), this run is on cpu: Intel Xeon (1 threads)"
    (tmp_path / "details.json").write_text(json.dumps({"profile_mismatches": [line]}))
    at = page("validate")
    at.text_input(key="val.folder").input(str(tmp_path)).run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    assert [w.value for w in at.warning] == [f"Profile: {line}."]


@pytest.mark.parametrize("calibrate_here", [False, True])
def test_validate_run_on_cpu_says_whose_profile_it_uses_and_can_calibrate_here(monkeypatch, calibrate_here):
    """The shipped profile was measured on one machine; the page names it, and calibrates here on request."""
    import calibrate.validate

    given = {}

    def record(config, device, profile, out, **kwargs):
        given["profile"] = profile
        raise ValueError("stopped: the profile was recorded")

    monkeypatch.setattr(calibrate.validate, "validate", record)
    shipped = json.loads((PAGES.parents[1] / "examples/profiles/tiny-llama-cpu.json").read_text())["meta"]["device"]
    at = page("validate")
    at.radio(key="val.mode").set_value("Run on CPU").run()
    assert any(shipped in c.value for c in at.caption)
    at.checkbox(key="val.calibrate").set_value(calibrate_here).run()
    assert any(shipped in c.value for c in at.caption) is not calibrate_here
    at.button(key="val.run").click().run()
    assert (given["profile"] is None) is calibrate_here
    if not calibrate_here:
        assert Path(given["profile"]).name == "tiny-llama-cpu.json"


def test_capacity_names_the_target_rate_when_a_closed_loop_cannot_take_it():
    """The page has no Rate input: a closed loop's refusal names the target rate, under its input."""
    at = page("capacity")
    at.selectbox(key="cap.wkind").set_value("closed_loop").run()
    at = plan_on_h100(at, 40, 4.0, [1])
    (message,) = [e.value for e in at.error]
    assert message.startswith("target rate: does not set this workload's pace"), message
    assert "workload.rate" not in message

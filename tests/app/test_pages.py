"""Each app page driven with streamlit's AppTest: inputs set, run, outputs present, bad input shown."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

PAGES = Path(__file__).resolve().parents[2] / "app" / "pages"


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
    assert {"TTFT p50 / p99", "TPOT p50 / p99", "Output tokens/s", "Preemptions"} <= labels
    finished = next(m.value for m in at.metric if m.label == "Finished / rejected")
    done, rejected = (int(x) for x in finished.split("/"))
    assert done + rejected == 60  # nothing lost
    assert len(plotly_charts(at)) >= 4  # three CDFs + the step timeline (+ the request timeline)


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

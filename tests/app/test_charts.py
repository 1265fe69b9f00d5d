"""app.ui.charts: the per-request timeline draws each preemption interval of the requests it shows."""
from __future__ import annotations

import pytest

pytest.importorskip("plotly")

from app.ui.charts import request_timeline  # noqa: E402
from sim.config import load_config  # noqa: E402
from records.results import preemption_table  # noqa: E402
from sim.runner import simulate  # noqa: E402


@pytest.fixture(scope="module")
def pressured_requests():
    """A short simulation whose KV cache (120 blocks for 40 requests of 350 tokens) forces preemptions."""
    config = load_config({
        "model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 120},
        "workload": {"kind": "poisson", "rate": 50, "num_requests": 40, "seed": 3,
                     "prompt_len": {"kind": "constant", "value": 200},
                     "output_len": {"kind": "constant", "value": 150}}})
    return simulate(config).requests


def bars(fig, name):
    return [t for t in fig.data if t.name == name]


def test_timeline_draws_every_preemption_interval_of_its_window_as_a_bar(pressured_requests):
    requests = pressured_requests
    assert requests["num_preemptions"].sum() > 0, "the scenario no longer preempts"
    window = requests.sort_values("arrival_time").iloc[5:25]
    fig = request_timeline(requests, start=5, count=20)
    (off,) = bars(fig, "preempted")
    expected = preemption_table(window)
    assert len(off.base) == len(expected) == window["num_preemptions"].sum()
    assert set(off.y) <= set(window["req_id"].astype(str))
    drawn = sorted(zip(off.y, off.base, off.base + off.x))
    want = sorted(zip(expected["req_id"].astype(str), expected["preempted_at"], expected["resumed_at"]))
    assert [d[0] for d in drawn] == [w[0] for w in want]
    assert [d[1:] for d in drawn] == [pytest.approx(w[1:]) for w in want]
    # each interval lies on its request's bar: between arrival and finish
    life = window.set_index(window["req_id"].astype(str))
    for y, a, b in drawn:
        assert life.loc[y, "arrival_time"] <= a <= b <= life.loc[y, "finish_time"]


def test_timeline_without_preemptions_or_without_the_column_has_no_preempted_bars(pressured_requests):
    requests = pressured_requests
    calm = requests[requests["num_preemptions"] == 0]
    assert len(calm) and not bars(request_timeline(calm), "preempted")
    old = requests.drop(columns="preemption_intervals")  # a requests.csv written before the column existed
    fig = request_timeline(old)
    assert not bars(fig, "preempted") and len(bars(fig, "decode")) == 1


def test_step_timeline_draws_each_replicas_own_lines():
    """Two replicas' steps interleave in time: one KV-usage line through both jumped between them."""
    from app.ui.charts import step_timeline

    steps = simulate(load_config({"workload": {"num_requests": 80, "rate": 8.0, "seed": 2},
                                  "cluster": {"num_replicas": 2, "router": "round_robin"}})).steps
    assert steps["replica"].nunique() == 2 and (steps["replica"] != steps["replica"].shift()).sum() > 2
    fig = step_timeline(steps)
    kv = [t for t in fig.data if t.name.startswith("KV usage")]
    assert len(kv) == 2
    for trace in kv:  # each line is one replica's steps, in time order
        replica = trace.name.removeprefix("KV usage (").removesuffix(")")
        own = steps[steps["replica"].astype(str) == replica]
        assert list(trace.x) == own["start"].tolist() and list(trace.y) == own["kv_usage"].tolist()


def test_step_timeline_of_one_replica_keeps_plain_names():
    from app.ui.charts import step_timeline

    steps = simulate(load_config({"workload": {"num_requests": 20, "rate": 4.0}})).steps
    assert [t.name for t in step_timeline(steps).data if t.name.startswith("KV")] == ["KV usage"]

"""Capacity plots (sim.capacity.plots): the plan's figure draws what a planner decides by."""
import pandas as pd
import pytest

from sim.capacity import plots

pytest.importorskip("matplotlib")


def plan_table():
    """Three candidates at one load: two priced (one misses its SLO), one that failed (no price)."""
    return pd.DataFrame({
        "layout": ["colocated", "disaggregated", "colocated"], "gpu": ["H100-SXM"] * 3,
        "shape": ["1 x H100-SXM tp1", "P 1x tp1 + D 1x tp1 on H100-SXM", "2 x H100-SXM tp1"],
        "cost_per_hour": [3.0, 6.0, None], "slo_met": [True, False, False],
        "slo_attainment": [0.95, 0.5, None], "ttft_s_p90": [0.12, 0.9, None], "tpot_s_p90": [0.02, 0.01, None],
        "slo_ttft_s": [0.5, 0.5, 0.5], "slo_tpot_s": [0.05, 0.05, 0.05]})


def drawn(monkeypatch, table, **kw):
    """The figure plot_plan would write, kept open to be read."""
    kept = {}
    monkeypatch.setattr(plots, "_save", lambda plt, fig, path: kept.setdefault("fig", fig) and path)
    assert plots.plot_plan(table, "unused.png", **kw) == "unused.png"
    return kept["fig"]


def test_each_panel_draws_its_target_and_the_chosen_candidate(monkeypatch):
    table = plan_table()
    fig = drawn(monkeypatch, table, min_attainment=0.9, chosen=table.iloc[0].to_dict())
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ["% of requests meeting every SLO", "p90 TTFT (ms)", "p90 TPOT (ms)"]
    targets = [[line.get_ydata()[0] for line in ax.get_lines()] for ax in axes]
    assert targets == [[pytest.approx(90.0)], [pytest.approx(500.0)], [pytest.approx(50.0)]]
    for ax, y in zip(axes, (95.0, 120.0, 20.0)):  # the star: the chosen one's cost and value, in the panel's unit
        star = ax.collections[-1]
        assert star.get_offsets().tolist() == [[3.0, pytest.approx(y)]]
    # every priced candidate appears in every panel (met filled, missed hollow); the failed one nowhere
    points = [sum(len(c.get_offsets()) for c in ax.collections[:-1]) for ax in axes]
    assert points == [2, 2, 2]


def test_no_figure_without_a_priced_candidate(monkeypatch):
    table = plan_table().iloc[2:]
    monkeypatch.setattr(plots, "_save", lambda *a: pytest.fail("an empty figure was written"))
    assert plots.plot_plan(table, "unused.png") is None

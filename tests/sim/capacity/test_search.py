"""SLO search: the reported rate sustains the SLO, 10% more does not, within the stated tolerance."""
from pathlib import Path

import pytest

from policies import ConfigError
from sim.capacity.executor import LocalExecutor, SerialExecutor
from sim.capacity.search import find_max_rate
from sim.capacity.slo import SLO
from sim.capacity.sweep import evaluate_point, make_specs
from capacity_helpers import small_config

REPO = Path(__file__).resolve().parents[3]

SLO_STRICT = SLO(ttft_s=0.3, tpot_s=0.015)


@pytest.mark.parametrize("executor", [SerialExecutor(), LocalExecutor(2)], ids=["bisection", "k-section"])
def test_search_finds_the_knee(executor):
    base = small_config(num_requests=150)
    res = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.05, executor=executor, progress=False)
    assert 0 < res.rate < res.upper <= res.rate * 1.05 + 1e-9  # the stated tolerance
    # checked independently of the search's own bookkeeping, on the same arrival window (150 requests at 8/s)
    # and the same requests (the search's common random numbers: each quantity its own stream)
    points = [{"workload.rate": repr(r), "workload.num_requests": str(round(150 * r / 8.0))}
              for r in (res.rate, res.rate * 1.1)]
    at, above = (evaluate_point(s) for s in make_specs(base, points, SLO_STRICT, streams="per_quantity"))
    assert at["slo_attainment"] >= 0.9
    assert above["slo_attainment"] < 0.9
    table = res.table()
    assert table["rate"].is_monotonic_increasing and len(table) == len(set(table["rate"]))


def test_search_is_the_same_on_any_executor():
    base = small_config(num_requests=60)
    a = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.1, executor=SerialExecutor(), progress=False)
    b = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.1, executor=LocalExecutor(2), progress=False)
    # different probe rates, same knee (both within 10% of each other's bracket)
    assert b.rate <= a.upper and a.rate <= b.upper


def test_more_gpus_sustain_more():
    base = small_config(num_requests=120)
    one = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.1, executor=SerialExecutor(), progress=False)
    two = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.1, executor=SerialExecutor(),
                        base_overrides=["cluster.num_replicas=2", "cluster.router=least_tokens"], progress=False)
    assert two.num_gpus == 2 and two.rate > 1.5 * one.rate


def test_each_probe_spans_the_same_arrival_window():
    base = small_config(num_requests=40, rate=4.0)
    res = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.2, executor=SerialExecutor(), progress=False)
    t = res.table()
    assert (t["workload.num_requests"] == (40 * t["rate"] / 4.0).round()).all()
    fixed = find_max_rate(base, SLO_STRICT, start_rate=4.0, rel_tol=0.2, executor=SerialExecutor(), progress=False,
                          hold_window=False)
    assert "workload.num_requests" not in fixed.table() and (fixed.table()["num_requests"] == 40).all()


@pytest.mark.parametrize("start, said", [
    (float("inf"), r"^start_rate: expected a finite number, got inf$"),  # an OverflowError traceback
    (float("nan"), r"^start_rate: expected a number, got nan$"),
    (1e300, r"^start_rate: 1e\+300 requests/s is above the search's ceiling max_rate = 100000"),  # numpy's
    # "Maximum allowed dimension exceeded", from the held window's request count
])
def test_a_start_rate_the_search_cannot_start_from_is_refused(start, said):
    with pytest.raises(ConfigError, match=said):
        find_max_rate(small_config(), SLO_STRICT, start_rate=start, progress=False)


def test_search_needs_an_slo():
    with pytest.raises(ConfigError, match="slo"):
        find_max_rate(small_config(), SLO(), progress=False)


def test_capacity_cli_compares_layouts_of_the_same_gpu_count(tmp_path, capsys):
    from servesim.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text("""
[model]
name = "Llama-3-8B"
[workload]
rate = 4.0
num_requests = 60
prompt_len = { kind = "uniform", low = 1500, high = 2500 }
output_len = { kind = "uniform", low = 50, high = 150 }
[disaggregation]
prefill = { count = 1 }
decode = { count = 1 }
""")
    rc = main(["capacity", str(cfg), "--slo-ttft", "2", "--slo-tpot", "0.012", "--tol", "0.2", "--layout", "colocated",
               "--layout", "disaggregated", "--executor", "serial", "--no-progress", "--out", str(tmp_path),
               "--set", "cluster.num_replicas=3"])
    captured = capsys.readouterr()
    out = captured.out
    assert rc == 0
    assert "every layout gets 2 GPUs, the disaggregation pools' (1 prefill + 1 decode), not the config's 3" in captured.err
    lines = [ln for ln in out.splitlines() if "sustained" in ln]
    assert len(lines) == 2 and all("2 GPUs" in ln for ln in lines)
    assert (tmp_path / "search.csv").exists()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "search.png").stat().st_size > 10_000


@pytest.mark.parametrize("workload", [
    {"kind": "closed_loop", "num_users": 4},
    {"kind": "staged", "stages": [[2.0, 10], [4.0, 10]]},
    {"classes": [{"name": "hi", "priority": 0, "rate": 5.0}, {"name": "lo", "priority": 1, "rate": 10.0}]},
])
def test_a_search_of_a_rate_the_workload_does_not_use_is_refused_up_front(workload):
    """Every probe would offer the same load and pass: without the check the search doubles its rate
    towards max_rate, each probe longer than the last."""
    base = small_config(**{"workload": workload})
    with pytest.raises(ConfigError, match=r"^workload.rate: does not set this workload's pace \("):
        find_max_rate(base, SLO(ttft_s=0.5), max_rate=1e5)


def test_a_target_the_window_cannot_miss_stops_where_the_backlog_starts_to_grow():
    """A TTFT target longer than the run is met at any rate; a rate whose queue grows through the
    run is still not sustained, so the search ends at the saturation knee instead of max_rate."""
    res = find_max_rate(small_config(num_requests=80), SLO(ttft_s=1000.0), rel_tol=0.2, progress=False)
    table = res.table()
    assert (table["slo_attainment"] == 1.0).all()  # every probe met the SLO itself
    assert 0 < res.rate < res.upper < 1e3
    assert not table.loc[table["rate"] == res.rate, "saturated"].iloc[0]
    assert table.loc[table["rate"] == res.upper, "saturated"].iloc[0]


@pytest.mark.parametrize("flag, value", [("--start-rate", "inf"), ("--start-rate", "nan"), ("--tol", "0")])
def test_capacity_flags_are_checked_under_their_own_names(flag, value, capsys):
    from servesim.cli import main

    assert main(["capacity", str(REPO / "examples" / "default.toml"), flag, value, "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"servesim capacity: error: {flag}: ")


class WideRecorder:
    """An executor as wide as a 16-core machine's default pool; it records the rates probed and
    answers from a known knee instead of simulating (a probe at 16,000x the start would not end)."""

    max_workers = 16

    def __init__(self, knee: float) -> None:
        self.knee, self.rounds = knee, []

    def map(self, fn, specs, desc="points", progress=True):
        rates = [float(dict(s.values)["workload.rate"]) for s in specs]
        self.rounds.append(rates)
        return [{"slo_met": r <= self.knee, "slo_attainment": 1.0 if r <= self.knee else 0.0} for r in rates]


@pytest.mark.parametrize("knee", [0.5, 30.0, 900.0, 2e5])
def test_a_wide_executor_probes_no_more_than_eight_times_a_rounds_lowest_rate(knee):
    recorder = WideRecorder(knee)
    res = find_max_rate(small_config(), SLO_STRICT, start_rate=10.0, rel_tol=0.05, executor=recorder,
                        progress=False, max_rate=1e5)
    # a probe's request count grows with its rate (the held window): one 2^15 times the start's
    # would hold millions of requests; a round spans at most 3 doublings
    for rates in recorder.rounds:
        assert max(rates) <= 8 * min(rates) + 1e-9, rates
    assert max(max(r) for r in recorder.rounds) <= 1e5  # never above max_rate
    if knee < 1e5:
        assert res.rate <= knee < res.upper <= res.rate * 1.05 + 1e-9
    else:
        assert res.rate == 1e5 and res.upper == float("inf")

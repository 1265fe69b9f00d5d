"""Common random numbers in the SLO search and in rate sweeps: every rate sees the same requests, so
attainment falls with the rate instead of wiggling with a fresh sample; `capacity` and `sweep` say
what the rates share."""
import json

import pytest

from capacity_helpers import small_config
from servesim.cli import main
from sim.capacity.executor import SerialExecutor
from sim.capacity.search import find_max_rate, held_common, probe_specs
from sim.capacity.slo import SLO
from sim.capacity.sweep import evaluate_point, hold_window, rate_streams, run_sweep
from sim.config import load_config
from sim.runner import simulate

# around the knee of small_config at seed 3, where one generator's fresh draws rise once
RATES = [25.0, 26.0, 27.0, 28.0, 29.0]


def attainments(common: bool, seed: int = 3) -> list[float]:
    base = small_config(workload={"seed": seed})
    config = load_config(base)
    specs = probe_specs(base, config.workload, RATES, SLO.from_config(config), common_random_numbers=common)
    return [evaluate_point(s)["slo_attainment"] for s in specs]


def test_attainment_never_rises_with_the_rate_when_the_rates_share_their_requests():
    fresh = attainments(common=False)
    # on this config fresh draws do rise (else the test below would prove nothing)
    assert any(b > a for a, b in zip(fresh, fresh[1:])), fresh
    common = attainments(common=True)
    assert all(b <= a for a, b in zip(common, common[1:])), common


def test_the_search_probes_with_common_random_numbers_unless_told_not_to():
    base = small_config(num_requests=40, rate=4.0, workload={"seed": 3})
    slo = SLO(ttft_s=0.3, tpot_s=0.015)
    config = load_config(base)
    for common in (True, False):
        res = find_max_rate(base, slo, start_rate=4.0, rel_tol=0.3, executor=SerialExecutor(), progress=False,
                            common_random_numbers=common)
        rows = res.table()
        specs = probe_specs(base, config.workload, rows["rate"], slo, common_random_numbers=common)
        assert [evaluate_point(s)["slo_attainment"] for s in specs] == rows["slo_attainment"].tolist()
        assert res.common == held_common(config.workload, common=common)


def test_what_the_rates_share_is_said_for_the_workload_searched():
    chat = load_config(small_config()).workload
    assert held_common(chat).startswith("request i's prompt and output lengths and its arrival time (a rate-1 draw")
    assert "the count grows with the rate" in held_common(chat)
    assert "the same request count" in held_common(chat, hold_window=False)
    grouped = load_config(small_config(workload={"num_prefix_groups": 2, "prefix_len": 64})).workload
    assert "prefix group and user" in held_common(grouped)
    assert held_common(chat, common=False).startswith("nothing")
    # a trace replayed as recorded, rescaled to each rate: no base rate, so no held window either
    trace = load_config(small_config(workload={"kind": "trace", "rate": None,
                                               "trace": "examples/traces/azure_conv_2023_slice.csv"})).workload
    assert held_common(trace) == ("request i's trace row and its arrival time (the recorded one rescaled to each "
                                  "rate); the same request count at every rate")


@pytest.mark.parametrize("flags, said", [([], "a rate-1 draw scaled by 1/rate"), (["--fresh-draws"], "nothing")])
def test_capacity_says_what_the_rates_share(tmp_path, capsys, flags, said):
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "Llama-3-8B"\n[hardware]\ngpu = "H100-SXM"\n'
                      '[workload]\nrate = 4.0\nnum_requests = 30\nseed = 3\n'
                      'prompt_len = { kind = "lognormal", median = 600, sigma = 0.7, max = 4000 }\n')
    assert main(["capacity", str(config), "--slo-ttft", "0.3", "--slo-tpot", "0.015", "--tol", "0.5",
                 "--executor", "serial", "--no-progress", "--json", *flags]) == 0
    captured = capsys.readouterr()
    line = next(x for x in captured.err.splitlines() if x.startswith("common across rates: "))
    assert said in line
    rows = json.loads(captured.out)
    assert {r["common_across_rates"] for r in rows} == {line.removeprefix("common across rates: ")}


def sweep_attainments(**kwargs) -> list[float]:
    base = small_config(workload={"seed": 3})
    points = hold_window(base, [{"workload.rate": str(r)} for r in RATES])
    table = run_sweep(base, points, SLO.from_config(load_config(base)), SerialExecutor(), progress=False, **kwargs)
    return table["slo_attainment"].tolist()


def test_a_rate_sweep_offers_every_rate_the_same_requests_unless_told_not_to():
    # one generator's draws rise by two points here (26 -> 27 req/s): the curve's wiggle
    fresh = sweep_attainments(common_random_numbers=False)
    assert any(b > a for a, b in zip(fresh, fresh[1:])), fresh
    # the search's own probes: the same requests at every rate, so the curve falls
    common = sweep_attainments()
    assert all(b <= a for a, b in zip(common, common[1:])), common
    assert common == attainments(common=True)


def test_a_sweep_that_leaves_the_rate_alone_runs_the_workload_simulate_runs():
    base = small_config(num_requests=30)
    row = run_sweep(base, [{"scheduler.max_num_seqs": "32"}], SLO(0.5, 0.02), SerialExecutor(), progress=False)
    direct = simulate(load_config(base, ["scheduler.max_num_seqs=32"]))
    assert row["ttft_s_p90"].iloc[0] == direct.summary["ttft_s"]["p90"]
    assert [rate_streams(p) for p in ([{"scheduler.max_num_seqs": 8}], [{"workload.rate": 2}], [])] == [
        "one", "per_quantity", "one"]
    assert rate_streams([{"workload.rate": 2}], common_random_numbers=False) == "one"


@pytest.mark.parametrize("flags, said", [([], "a rate-1 draw scaled by 1/rate"), (["--fresh-draws"], "nothing")])
def test_sweep_of_the_rate_says_what_the_rates_share(tmp_path, capsys, flags, said):
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "Llama-3-8B"\n[hardware]\ngpu = "H100-SXM"\n'
                      '[workload]\nrate = 4.0\nnum_requests = 20\nseed = 3\n')
    assert main(["sweep", str(config), "--grid", "workload.rate=4,8", "--executor", "serial", "--no-progress",
                 "--no-plot", "--json", "--out", str(tmp_path / "out"), *flags]) == 0
    captured = capsys.readouterr()
    line = next(x for x in captured.err.splitlines() if x.startswith("common across rates: "))
    assert said in line
    assert {r["common_across_rates"] for r in json.loads(captured.out)} == {line.removeprefix("common across rates: ")}


def test_a_sweep_that_also_sets_the_count_does_not_say_the_count_is_shared(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "Llama-3-8B"\n[hardware]\ngpu = "H100-SXM"\n'
                      '[workload]\nrate = 4.0\nnum_requests = 20\nseed = 3\n')
    assert main(["sweep", str(config), "--list", "workload.rate=4,8", "--list", "workload.num_requests=10,20",
                 "--executor", "serial", "--no-progress", "--no-plot", "--json", "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    line = next(x for x in captured.err.splitlines() if x.startswith("common across rates: "))
    assert "same request count" not in line and "own workload.num_requests" in line
    assert sorted(r["num_requests"] for r in json.loads(captured.out)) == [10, 20]

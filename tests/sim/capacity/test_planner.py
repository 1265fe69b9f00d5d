"""The planner: the fitting layout with the fewest GPUs, and the cheapest one under given prices."""
import json

import pytest

from policies import ConfigError
from sim.capacity.executor import SerialExecutor
from sim.capacity.planner import CandidateGrid, Plan, check_prices, plan
from sim.capacity.slo import SLO
from sim.capacity.sweep import PointSpec, evaluate_point
from sim.config import load_config
from capacity_helpers import small_config

SLO_PLAN = SLO(ttft_s=0.3, tpot_s=0.015)


def test_candidates_respect_the_gpu_cap_and_layouts():
    grid = CandidateGrid(gpus=("H100-SXM", "A100-80GB"), tps=(1, 2), replicas=(1, 2, 4), pool_counts=(1, 2),
                         max_gpus=4)
    cands = grid.candidates()
    assert {c["layout"] for c in cands} == {"colocated", "disaggregated"}
    for c in cands:
        if c["layout"] == "colocated":
            assert c["tp"] * c["replicas"] <= 4
    with pytest.raises(ConfigError, match="plan.layouts: 'mixed'"):
        CandidateGrid(layouts=("mixed",))


@pytest.mark.parametrize("kw, said", [
    (dict(gpus=("H100-SXM", "XYZ")), r"^plan.gpus: unknown GPU 'XYZ'; choose one of .*A100-80G"),
    (dict(tps=(0, 1)), r"^plan.tps: must be >= 1, got 0"),
    (dict(tps=(1, 3)), r"^plan.tps: 3 is not allowed; choose one of 1, 2, 4, 8$"),  # each candidate said it alone
    (dict(replicas=(-2,)), r"^plan.replicas: must be >= 1"),
    (dict(pool_counts=(0,)), r"^plan.pool_counts: must be >= 1"),
    (dict(budgets=(None, 0)), r"^plan.budgets: must be >= 1"),
])
def test_a_grid_no_candidate_of_which_could_run_is_refused_up_front(kw, said):
    """Said once, naming the flag's field, before any candidate is simulated (each used to fail alone
    and the plan ended 'no candidate serves the rate')."""
    with pytest.raises(ConfigError, match=said):
        CandidateGrid(**kw)


class FailingExecutor:
    """An executor that must not be used: the plan was to be refused before simulating."""

    def map(self, *args, **kwargs):
        raise AssertionError("a candidate was simulated")


def twelve_head_model(tmp_path) -> str:
    """A HF config.json of a model with 12 attention heads: TP 1, 2 and 4 split it, TP 8 does not."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(model_type="llama", hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                                    num_hidden_layers=4, num_key_value_heads=4, vocab_size=32000,
                                    max_position_embeddings=4096, torch_dtype="float16")))
    return str(path)


def test_a_tp_the_model_cannot_be_split_into_is_refused_up_front_naming_plan_tps(tmp_path):
    config = load_config(small_config(model={"name": twelve_head_model(tmp_path)}))
    CandidateGrid(tps=(1, 2, 4)).check_model(config)  # a TP fine for the model is fine
    with pytest.raises(ConfigError, match=r"^plan\.tps: 8 cannot serve .* on any GPU \(hardware\.tp: 8 does not "
                                          r"divide .*num_attention_heads=12"):
        CandidateGrid(tps=(1, 8)).check_model(config)
    with pytest.raises(ConfigError, match=r"^plan\.tps: 8 cannot serve"):  # before any candidate is simulated
        plan(small_config(model={"name": twelve_head_model(tmp_path)}), 8.0, SLO_PLAN, CandidateGrid(tps=(1, 8)),
             executor=FailingExecutor(), progress=False)


def test_prices_match_the_planned_gpus_by_alias_and_are_checked():
    gpus = ("H100-SXM", "A100-80GB")
    assert check_prices({"h100": 1.0, "A100-80G": 2}, gpus) == {"H100-SXM": 1.0, "A100-80GB": 2.0}
    assert check_prices(None, gpus) == {}


@pytest.mark.parametrize("prices, said", [
    ({"H100-SXM": -2.0}, r"^plan\.prices: H100-SXM: must be >= 0"),  # hardware.price_per_hour = -1 was refused
    ({"H100-SXM": float("nan")}, r"^plan\.prices: H100-SXM: expected a number, got nan"),
    ({"H100-SXM": float("inf")}, r"^plan\.prices: H100-SXM: expected a finite number"),
    ({"FOO": 2.0}, r"^plan\.prices: FOO is not a GPU this plan tries; priced: FOO; planned \(plan\.gpus\): H100-SXM$"),
    ({"A100-80GB": 2.0}, r"^plan\.prices: A100-80GB is not a GPU this plan tries; .*planned \(plan\.gpus\): H100-SXM"),
    ({"H100-SXM": 1.0, "h100": 2.0}, r"^plan\.prices: h100 prices H100-SXM a second time"),
])
def test_a_price_that_would_be_ignored_or_is_no_price_is_refused(prices, said):
    with pytest.raises(ConfigError, match=said):
        check_prices(prices, ("H100-SXM",))


def test_a_price_given_by_alias_is_the_one_the_plan_charges():
    grid = CandidateGrid(gpus=("H100-SXM",), tps=(1,), replicas=(1,), layouts=("colocated",), max_gpus=1)
    result = plan(small_config(num_requests=10), 4.0, SLO(ttft_s=5.0), grid, prices={"h100": 1.25},
                  executor=SerialExecutor(), progress=False)
    assert result.rows[0]["cost_per_hour"] == pytest.approx(1.25)


@pytest.mark.parametrize("rate", [float("inf"), float("nan"), 0.0])
def test_a_target_rate_that_is_no_rate_is_refused(rate):
    """inf ended in an OverflowError traceback (the held window's request count)."""
    with pytest.raises(ConfigError, match=r"^target_rate: "):
        plan(small_config(), rate, SLO_PLAN, executor=FailingExecutor(), progress=False)


def test_plan_picks_the_smallest_fitting_layout_and_it_really_is_smallest():
    base = small_config(num_requests=60)  # 60 at 8 req/s: a 7.5 s window, so 300 requests at 40 req/s
    grid = CandidateGrid(gpus=("H100-SXM",), tps=(1,), replicas=(1, 2, 3, 4), layouts=("colocated",), max_gpus=4)
    result = plan(base, 40.0, SLO_PLAN, grid, executor=SerialExecutor(), progress=False)
    best = result.by_gpus
    assert best is not None and best["slo_met"]
    n = best["replicas"]
    assert n > 1  # 40 req/s needs more than one H100 under this SLO

    def attain(replicas):
        overrides = ('hardware.gpu="H100-SXM"', f"cluster.num_replicas={replicas}", "workload.rate=40.0",
                     "workload.num_requests=300")
        return evaluate_point(PointSpec(base, (), overrides, SLO_PLAN))["slo_attainment"]

    assert attain(n) >= 0.9 and attain(n - 1) < 0.9  # re-simulated outside the planner
    assert result.by_cost["num_gpus"] == n  # one GPU type: cheapest = fewest


def test_prices_change_the_cheapest_choice():
    base = small_config(num_requests=30)
    grid = CandidateGrid(gpus=("H100-SXM", "A100-80GB"), tps=(1,), replicas=(1, 2, 3, 4), layouts=("colocated",),
                         max_gpus=4)
    slo = SLO(ttft_s=0.5, tpot_s=0.04)  # within reach of both GPU types
    cheap_a100 = plan(base, 30.0, slo, grid, prices={"H100-SXM": 10.0, "A100-80GB": 0.5},
                      executor=SerialExecutor(), progress=False)
    cheap_h100 = plan(base, 30.0, slo, grid, prices={"H100-SXM": 0.5, "A100-80GB": 10.0},
                      executor=SerialExecutor(), progress=False)
    assert cheap_a100.by_cost["gpu"] == "A100-80GB" and cheap_h100.by_cost["gpu"] == "H100-SXM"
    # fewest GPUs does not depend on prices, and an A100 layout needs at least as many GPUs as an H100 one
    assert cheap_a100.by_gpus["num_gpus"] == cheap_h100.by_gpus["num_gpus"]
    assert cheap_a100.by_cost["num_gpus"] >= cheap_h100.by_cost["num_gpus"]
    for row in cheap_a100.rows:
        per_gpu = 10.0 if row["gpu"] == "H100-SXM" else 0.5
        assert row["cost_per_hour"] == pytest.approx(per_gpu * row["num_gpus"])


def test_a_layout_the_model_does_not_fit_is_reported_not_fatal():
    base = small_config(num_requests=20, model={"name": "Llama-2-70B"})
    grid = CandidateGrid(gpus=("H100-SXM",), tps=(1, 4), replicas=(1,), layouts=("colocated",), max_gpus=4)
    result = plan(base, 1.0, SLO(ttft_s=5.0), grid, executor=SerialExecutor(), progress=False)
    by_tp = {r["tp"]: r for r in result.rows}
    assert "error" in by_tp[1] and not by_tp[1]["slo_met"]
    assert result.by_gpus is not None and result.by_gpus["tp"] == 4


def test_a_base_with_cluster_replicas_still_plans_its_disaggregated_layouts():
    """The pools are a disaggregated layout's replicas: a base config's `[cluster]` (two replicas,
    as examples/capacity.toml has) is reset for those candidates as for the colocated ones, not
    carried into every disaggregated row as an error."""
    base = small_config(num_requests=20, cluster={"num_replicas": 2})
    grid = CandidateGrid(gpus=("H100-SXM",), tps=(1,), replicas=(1, 2), layouts=("colocated", "disaggregated"),
                         max_gpus=2, pool_counts=(1,))
    result = plan(base, 4.0, SLO(ttft_s=5.0), grid, executor=SerialExecutor(), progress=False)
    disagg = [r for r in result.rows if r["layout"] == "disaggregated"]
    assert disagg and all("error" not in r or not r["error"] for r in disagg), disagg
    assert all(r["num_gpus"] == 2 and r["slo_attainment"] > 0 for r in disagg)
    assert {r["replicas"] for r in result.rows if r["layout"] == "colocated"} == {1, 2}


@pytest.mark.parametrize("workload", [
    {"kind": "closed_loop", "num_users": 8, "think_time": 0.5},
    {"kind": "staged", "stages": [[2.0, 5.0], [8.0, 5.0]]},
], ids=["closed-loop", "staged"])
def test_a_workload_whose_pace_the_target_rate_does_not_set_is_refused(workload):
    """Every candidate would be offered the base's own load, whatever the target: 2 and 20 req/s
    gave the same table and the same "fits" before."""
    base = small_config(num_requests=20, workload=workload)
    grid = CandidateGrid(gpus=("H100-SXM",), tps=(1,), replicas=(1,), layouts=("colocated",), max_gpus=1)
    with pytest.raises(ConfigError, match=r"^workload.rate: does not set this workload's pace \("):
        plan(base, 20.0, SLO_PLAN, grid, executor=SerialExecutor(), progress=False)


def test_plan_cli_prints_both_winners(tmp_path, capsys):
    from servesim.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('[model]\nname = "Llama-3-8B"\n[workload]\nnum_requests = 40\n'
                   'prompt_len = { kind = "uniform", low = 100, high = 900 }\n'
                   'output_len = { kind = "uniform", low = 20, high = 200 }\n')
    rc = main(["plan", str(cfg), "--target-rate", "10", "--slo-ttft", "0.5", "--slo-tpot", "0.03", "--tp", "1",
               "--replicas", "1,2", "--pool-counts", "1", "--executor", "serial", "--no-progress",
               "--price", "H100-SXM=2.5", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "fewest GPUs" in out and "cheapest" in out
    assert "judged on one workload draw (workload.seed = 0)" in out  # the answer's sampling is said
    assert (tmp_path / "plan.csv").exists()
    try:
        import matplotlib  # noqa: F401

        assert (tmp_path / "plan.png").stat().st_size > 10_000
    except ImportError:
        pass
    rc = main(["plan", str(cfg), "--target-rate", "10", "--slo-ttft", "0.5", "--price", "H100", "--no-progress"])
    assert rc == 2 and "--price" in capsys.readouterr().err


@pytest.mark.parametrize("flags, said", [
    (["--target-rate", "inf"], "--target-rate: expected a finite number, got inf"),
    (["--target-rate", "10", "--tp", "3"], "plan.tps: 3 is not allowed; choose one of 1, 2, 4, 8"),
    (["--target-rate", "10", "--price", "H100-SXM=-2"], "plan.prices: H100-SXM: must be >= 0"),
    (["--target-rate", "10", "--price", "FOO=2"], "plan.prices: FOO is not a GPU this plan tries"),
    (["--target-rate", "10", "--price", "H100=1", "--price", "H100=2"], "--price: H100 is given twice"),
    (["--target-rate", "10", "--slo-ttft", "nan"], "--slo-ttft: expected a number, got nan"),
])
def test_plan_cli_refuses_bad_flags_in_one_line_before_simulating(tmp_path, capsys, flags, said):
    from servesim.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('[model]\nname = "Llama-3-8B"\n[slo]\nttft_s = 0.5\n')
    rc = main(["plan", str(cfg), *flags, "--gpus", "H100-SXM", "--executor", "serial", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"servesim plan: error: {said}"), err


def test_plan_ranks_layouts_by_cost_per_token_and_energy_per_token_across_vendors():
    base = small_config(num_requests=30)
    grid = CandidateGrid(gpus=("H100-SXM", "A100-80GB", "MI300X"), tps=(1,), replicas=(1, 2), layouts=("colocated",),
                         max_gpus=2)
    result = plan(base, 8.0, SLO(ttft_s=1.0, tpot_s=0.05), grid, executor=SerialExecutor(), progress=False)
    fitting = [r for r in result.rows if r.get("slo_met")]
    assert fitting and result.by_energy is not None and result.by_token_cost is not None
    assert result.by_energy["energy_j_per_output_token"] == min(r["energy_j_per_output_token"] for r in fitting)
    assert result.by_token_cost["cost_per_million_output_tokens"] == min(
        r["cost_per_million_output_tokens"] for r in fitting)
    for row in fitting:  # at the planner's prices: $/h over the tokens of an hour
        tokens_per_hour = row["throughput_output_tokens_per_s"] * 3600
        assert row["cost_per_million_output_tokens"] == pytest.approx(row["cost_per_hour"] / tokens_per_hour * 1e6)


def test_a_layout_whose_backlog_grows_does_not_fit_even_when_its_requests_meet_the_slo():
    """The planner fits as the search sustains: a TTFT target longer than the run is met by every
    request of a 1-replica layout whose queue grows through the run; it must not be picked."""
    slo = SLO(ttft_s=1000.0)
    grid = CandidateGrid(gpus=("H100-SXM",), tps=(1,), replicas=(1, 2, 4), layouts=("colocated",))
    result = plan(small_config(num_requests=80), 60.0, slo, grid, executor=SerialExecutor(), progress=False)
    table = result.table()
    one = table[table["replicas"] == 1].iloc[0]
    assert one["slo_met"] and one["saturated"] and not one["fits"]
    assert result.by_gpus is not None and result.by_gpus["replicas"] > 1 and not result.by_gpus["saturated"]


def test_counts_only_colocated_rows_have_stay_integers_in_the_table():
    """Beside a disaggregated row (no tp, no replicas) the colocated rows' counts read 1, not 1.0,
    in the CLI's table, plan.csv and the app."""
    rows = [{"layout": "colocated", "tp": 1, "replicas": 2, "num_gpus": 2, "slo_attainment": 1.0},
            {"layout": "disaggregated", "prefill": "1x tp1", "decode": "1x tp1", "num_gpus": 2,
             "slo_attainment": 0.5}]
    table = Plan(rows=rows).table()
    assert table.to_csv(index=False).splitlines()[1].startswith("colocated,1,2,2,1.0,")
    assert str(table["slo_attainment"].dtype) == "float64"

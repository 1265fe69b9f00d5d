"""servesim reproduce: leave-one-run-out really leaves the scored run out; the report is complete."""
from __future__ import annotations

import pandas as pd
import pytest
from fidelity_helpers import make_measured_run

from servesim.cli import main
from fidelity import reproduce as reproduce_module
from fidelity.host_overhead import HostOverhead
from fidelity.reproduce import reproduce
from fidelity.run_folders import find_runs

TRUTH = HostOverhead(compute_scale=1.1, schedule_s=2e-3, sample_per_seq_s=5e-5, frontend_s=0.01)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gt") / "hand-made"
    for i, rate in enumerate((3.0, 6.0, 12.0)):
        make_measured_run(root / f"run{i}", TRUTH, n=24, rate=rate, seed=i)
    return root


def scaled(runs, name, factor):
    """The same runs, with run `name`'s measurements multiplied by `factor`."""
    out = []
    for r in runs:
        if r.name == name:
            r = type(r)(**{**r.__dict__, "requests": r.requests.assign(
                ttft_s=r.requests["ttft_s"] * factor, e2e_s=r.requests["e2e_s"] * factor,
                tpot_s=r.requests["tpot_s"] * factor)})
        out.append(r)
    return out


def test_no_run_is_predicted_with_a_fit_that_saw_it(three_runs, monkeypatch):
    seen = []
    real_fit = reproduce_module.fit_overhead

    def spy(systems):
        seen.append({s.name for s in systems})
        return real_fit(systems)

    monkeypatch.setattr(reproduce_module, "fit_overhead", spy)
    rep = reproduce(find_runs(three_runs), fit="loo", gpu_model="roofline", progress=False)
    for name, fit in rep.fits.items():
        assert name not in fit["fitted_on"] and len(fit["fitted_on"]) == 2
    assert all(set(row.fitted_on.split(";")) == set(rep.fits[row.run]["fitted_on"])
               for row in rep.table.itertuples())
    # per-run fits used 2 systems each, never the run they scored (the group fit uses all 3 and scores
    # nothing); the nested model-selection fits use 1 of a run's 2 others
    assert sorted(len(s) for s in seen if len(s) > 1) == [2, 2, 2, 3]
    assert sum(1 for s in seen if len(s) == 1) == 3 * 2
    assert all(fit["used"] for fit in rep.fits.values())  # the measurements have real overhead: the fit helps


def test_a_runs_own_measurements_cannot_move_its_prediction(three_runs):
    # if leave-one-out leaked, tripling run0's measured latencies would change run0's prediction
    runs = find_runs(three_runs)
    def predicted(rs):
        return reproduce(rs, fit="loo", gpu_model="roofline", progress=False).table.set_index(["run", "metric"])["predicted"]

    base, moved = predicted(runs), predicted(scaled(runs, "run0", 3.0))
    pd.testing.assert_series_equal(base.loc["run0"], moved.loc["run0"])
    # ...while the other runs, whose fits did see run0, do move
    assert not base.loc["run1"].equals(moved.loc["run1"])


def test_cli_writes_markdown_csv_and_fits(three_runs, tmp_path):
    out = tmp_path / "report"
    assert main(["reproduce", str(three_runs.parent), "--out", str(out), "--quiet", "--gpu-model", "roofline"]) == 0
    table = pd.read_csv(out / "report.csv")
    assert len(table) == 3 * 3 and set(table["metric"]) == {"ttft_s", "tpot_s", "e2e_s"}
    assert (table["error"] == (table["predicted"] - table["measured"]) / table["measured"]).all()
    md = (out / "report.md").read_text()
    assert "Medians of |error|" in md and "run0" in md and "mean TPOT" in md
    medians = pd.read_csv(out / "medians.csv", index_col=0)
    assert medians.loc["all runs", "ttft_s"] == pytest.approx(table[table.metric == "ttft_s"]["error"].abs().median())


def test_cli_with_a_given_layer_leaves_its_training_runs_out(three_runs, tmp_path):
    import json

    layer = tmp_path / "layer.json"
    layer.write_text(json.dumps({"format": "servesim-overhead", "version": 1, "overhead": TRUTH.to_dict(),
                                 "fitted_on": ["run0", "run1"]}))
    out = tmp_path / "given"
    assert main(["reproduce", str(three_runs), "--overhead", str(layer), "--out", str(out), "--quiet",
                 "--gpu-model", "roofline"]) == 0
    table = pd.read_csv(out / "report.csv")
    assert set(table["run"]) == {"run2"}
    # report.csv names the runs the given layer saw (it left `fitted_on` empty)
    assert set(table["fit"]) == {"given"} and set(table["fitted_on"]) == {"run0;run1"}
    # the measurements were made with TRUTH: the given terms predict them
    assert table["error"].abs().max() < 0.02


@pytest.mark.parametrize("layer, message", [
    ({"format": "servesim-overhead", "version": 1}, "has no 'overhead' table of terms"),
    ({"format": "servesim-overhead", "overhead": {"schedule_s": "fast"}}, "overhead.schedule_s: expected a number, got 'fast'"),
    # a string would be read letter by letter: the run it was fitted on scored with it
    ({"format": "servesim-overhead", "overhead": {}, "fitted_on": "run0"}, "fitted_on must be a list of run names"),
])
def test_a_malformed_given_layer_is_refused_in_one_line(three_runs, tmp_path, capsys, layer, message):
    import json

    path = tmp_path / "layer.json"
    path.write_text(json.dumps(layer))
    assert main(["reproduce", str(three_runs), "--overhead", str(path), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("servesim reproduce: error:") and message in err and "\n" not in err


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["reproduce", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "no runs found" in capsys.readouterr().err


def test_an_only_that_matches_nothing_says_so_not_that_there_are_no_runs(three_runs, tmp_path, capsys):
    assert main(["reproduce", str(three_runs), "--only", "zzz", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--only: no run's name or source contains 'zzz' (3 runs found" in err


def test_a_run_described_only_by_its_profile_and_summary_is_simulated(tmp_path):
    import copy
    import json

    import yaml
    from fidelity_helpers import ISSUE_PROFILE, write_exp_config

    folder = write_exp_config(tmp_path / "gt" / "ip" / "h100-run", gpu="H100")
    profile = copy.deepcopy(ISSUE_PROFILE)
    profile["load"]["stages"] = [{"rate": 2, "duration": 6}, {"rate": 4, "duration": 4}]
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({"successes": {"latency": {
        "time_to_first_token": {"mean": 0.05}, "time_per_output_token": {"mean": 0.01},
        "request_latency": {"mean": 2.0}}}}))
    rep = reproduce(find_runs(tmp_path / "gt"), fit="none", gpu_model="roofline", progress=False)
    assert list(rep.table["workload"].unique()) == ["profile"]
    pred = rep.predictions["h100-run"]
    assert len(pred.requests) == 12 + 16  # every request of both stages, multi-turn follow-ups included
    assert rep.table.set_index("metric").loc["ttft_s", "measured"] == 0.05


def test_the_gate_judges_a_fit_by_re_simulating_each_held_in_run():
    import numpy as np

    from fidelity.overhead_fit import TERMS, RunSystem
    from fidelity.reproduce import fit_helps
    from fidelity.runs import METRICS

    names = ("a", "b", "c")
    systems = [RunSystem(n, {m: np.zeros((0, len(TERMS))) for m in METRICS}, {m: np.zeros(0) for m in METRICS})
               for n in names]
    measured = {n: {"ttft_s": 1.0, "tpot_s": 0.1, "e2e_s": 2.0} for n in names}
    none = {n: {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": 1.0} for n in names}  # 50% low without overhead
    calls = []

    def closer(name, overhead):
        calls.append(name)
        return {"ttft_s": 0.9, "tpot_s": 0.09, "e2e_s": 1.8}

    assert fit_helps(systems, closer, measured, none)
    assert sorted(calls) == list(names)  # each held-in run once, with the fit on the other two
    assert not fit_helps(systems, lambda name, overhead: {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 0.4},
                         measured, none)


def test_a_run_whose_model_is_unknown_is_listed_with_its_reason_and_the_others_scored(tmp_path, capsys):
    root = tmp_path / "gt" / "hand-made"
    make_measured_run(root / "known", n=12, seed=0)
    unknown = make_measured_run(root / "unknown", n=12, seed=1)
    exp = unknown / "exp-config.yaml"
    exp.write_text(exp.read_text().replace("meta-llama/Llama-2-7b-hf", "acme/Widget-9B"))
    out = tmp_path / "rep"
    assert main(["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet", "--fit", "none",
                 "--gpu-model", "roofline"]) == 0
    assert set(pd.read_csv(out / "report.csv")["run"]) == {"known"}
    skipped = pd.read_csv(out / "not_predicted.csv")
    assert list(skipped["run"]) == ["unknown"] and "acme/Widget-9B" in skipped["reason"][0]
    assert "## Runs not predicted" in (out / "report.md").read_text()
    assert "unknown: not predicted: model.name:" in capsys.readouterr().err
    (root / "known" / "exp-config.yaml").write_text(exp.read_text())  # now no run can be predicted
    assert main(["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet"]) == 2
    *warnings, error = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: ") for w in warnings)
    assert error.startswith("servesim reproduce: error:") and "no run can be predicted (2 found" in error


def test_a_run_that_cannot_be_loaded_is_listed_and_the_others_scored(tmp_path, capsys):
    """One damaged folder (a server argument of the wrong type) must not stop the runs beside it, nor
    `--only` from reaching another run."""
    root = tmp_path / "gt" / "hand-made"
    make_measured_run(root / "good", n=12, seed=0)
    bad = make_measured_run(root / "bad", n=12, seed=1)
    exp = bad / "exp-config.yaml"
    exp.write_text(exp.read_text().replace("tensor_parallelism: 1", "tensor_parallelism: one"))
    out = tmp_path / "rep"
    args = ["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet", "--fit", "none", "--gpu-model", "roofline"]
    assert main(args) == 0
    assert set(pd.read_csv(out / "report.csv")["run"]) == {"good"}
    skipped = pd.read_csv(out / "not_predicted.csv")
    assert list(skipped["run"]) == ["bad"] and skipped["reason"][0].startswith("exp-config.tensor_parallelism")
    assert "warning: bad: not predicted: exp-config.tensor_parallelism" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^only: expected a list of texts, got one string 'good'"):
        find_runs(tmp_path / "gt", "good")  # its letters would pick nearly every run
    assert main([*args, "--only", "good"]) == 0  # the damaged run is not loaded at all
    assert set(pd.read_csv(out / "report.csv")["run"]) == {"good"}
    assert pd.read_csv(out / "not_predicted.csv").empty and "bad" not in capsys.readouterr().err
    assert main(["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet", "--only", "bad"]) == 2
    assert "no run can be predicted (1 found; bad: exp-config.tensor_parallelism" in capsys.readouterr().err


def test_measurements_beside_the_runs_are_listed_as_not_predicted(tmp_path, capsys):
    """A groundtruth folder also holds DistServe's own system runs and Splitwise's step times: the
    report accounts for them (not_predicted.csv, one warning a kind), the runs are scored as before."""
    make_measured_run(tmp_path / "gt" / "hand-made" / "known", n=12, seed=0)
    runs = tmp_path / "gt" / "distserve" / "data-ground-truth" / "opt-13b-sharegpt"
    for name in ("distserve-6-1.exp", "distserve-c21d11-6-2.exp"):
        (runs / name).parent.mkdir(parents=True, exist_ok=True)
        (runs / name).write_text("[]\n")
    (runs.parent / "opt-13b-sharegpt-workload").mkdir()
    (runs.parent / "opt-13b-sharegpt-workload" / "distserve-6-1.exp").write_text("[]\n")  # an input
    (tmp_path / "gt" / "splitwise" / "data").mkdir(parents=True)
    (tmp_path / "gt" / "splitwise" / "data" / "perf_model.csv").write_text("model,hardware\n")
    out = tmp_path / "rep"
    assert main(["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet", "--fit", "none",
                 "--gpu-model", "roofline"]) == 0
    assert set(pd.read_csv(out / "report.csv")["run"]) == {"known"}
    skipped = pd.read_csv(out / "not_predicted.csv")
    assert sorted(skipped["run"]) == ["distserve-6-1", "distserve-c21d11-6-2", "splitwise"]
    assert skipped.set_index("run").loc["distserve-6-1", "reason"].startswith("DistServe's own disaggregated")
    err = capsys.readouterr().err.splitlines()
    assert "warning: distserve-6-1 and 1 more: not predicted: DistServe's own disaggregated system" in err[0]
    assert err[1].startswith("warning: splitwise: not predicted: static batches' step times")
    assert main(["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet", "--fit", "none",
                 "--gpu-model", "roofline", "--only", "known"]) == 0
    assert pd.read_csv(out / "not_predicted.csv").empty  # --only narrows the list as it does the runs


def test_a_run_the_named_step_time_source_has_no_data_for_is_listed_not_fatal(tmp_path, capsys):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    root = tmp_path / "gt" / "hand-made"
    make_measured_run(root / "h100", n=12, seed=0)
    make_measured_run(root / "rtx4090", n=12, seed=1, gpu="RTX-4090")  # no aiconfigurator tables for it
    out = tmp_path / "rep"
    assert main(["reproduce", str(tmp_path / "gt"), "--out", str(out), "--quiet", "--fit", "none",
                 "--gpu-model", "aiconfigurator"]) == 0
    table = pd.read_csv(out / "report.csv")
    assert set(table["run"]) == {"h100"} and set(table["gpu_model"]) == {"aiconfigurator"}
    skipped = pd.read_csv(out / "not_predicted.csv")
    assert list(skipped["run"]) == ["rtx4090"] and "aiconfigurator has no data" in skipped["reason"][0]
    assert "rtx4090: not predicted: gpu_model:" in capsys.readouterr().err

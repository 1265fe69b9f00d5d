"""servesim reproduce --fit source: a run's own source (campaign) never reaches its prediction."""
from __future__ import annotations

import pandas as pd
import pytest
from fidelity_helpers import make_measured_run

from fidelity.host_overhead import HostOverhead
from fidelity.predict import source_out_prior
from fidelity.reproduce import reproduce
from fidelity.run_folders import find_runs
from fidelity.runs import RealRun, ServerArgs
from servesim.cli import main

TRUTH = HostOverhead(schedule_s=2e-3, sample_per_seq_s=5e-5, frontend_s=0.01)


@pytest.fixture(scope="module")
def three_sources(tmp_path_factory):
    """Three campaign folders of two runs each, all measured with the same (known) host terms."""
    root = tmp_path_factory.mktemp("gt")
    for s, source in enumerate(("camp-a", "camp-b", "camp-c")):
        for i, rate in enumerate((3.0, 8.0)):
            make_measured_run(root / source / f"{source}-run{i}", TRUTH, n=20, rate=rate, seed=10 * s + i)
    return root


def scaled_source(runs, source, factor):
    return [type(r)(**{**r.__dict__, "requests": r.requests.assign(
        ttft_s=r.requests["ttft_s"] * factor, e2e_s=r.requests["e2e_s"] * factor,
        tpot_s=r.requests["tpot_s"] * factor)}) if r.source == source else r for r in runs]


def predicted(runs):
    return reproduce(runs, fit="source", gpu_model="roofline", progress=False).table.set_index(["run", "metric"])


def test_a_sources_own_measurements_cannot_move_its_predictions(three_sources):
    runs = find_runs(three_sources)
    base, moved = predicted(runs), predicted(scaled_source(runs, "camp-a", 3.0))
    a = [r.name for r in runs if r.source == "camp-a"]
    pd.testing.assert_series_equal(base.loc[a, "predicted"], moved.loc[a, "predicted"])
    # the table names what each prediction used, never a run of its own source
    for row in base.reset_index().itertuples():
        own = {r.name for r in runs if r.source == row.source}
        assert not own & set(str(row.fitted_on).split(";"))


def test_fits_on_the_other_sources_recover_the_shared_host_terms(three_sources):
    rep = reproduce(find_runs(three_sources), fit="source", gpu_model="roofline", progress=False)
    assert set(rep.table["fit"]) == {"source-out fit"}  # two other sources each: the gate can check
    for source, fit in rep.group_fits.items():
        assert fit["used"] and all(not n.startswith(source) for n in fit["fitted_on"]) and len(fit["fitted_on"]) == 4
    assert rep.medians().loc["all runs", ["ttft_s", "tpot_s", "e2e_s"]].max() < 0.05


def test_one_source_alone_is_predicted_from_its_priors(three_sources):
    runs = [r for r in find_runs(three_sources) if r.source == "camp-b"]
    rep = reproduce(runs, fit="source", gpu_model="roofline", progress=False)
    assert rep.table["fit"].str.contains("no other source").all()
    assert not rep.group_fits


def test_cli_fit_source(three_sources, tmp_path):
    out = tmp_path / "r"
    assert main(["reproduce", str(three_sources), "--fit", "source", "--out", str(out), "--quiet",
                 "--gpu-model", "roofline"]) == 0
    table = pd.read_csv(out / "report.csv")
    assert {"run", "source", "metric", "measured", "predicted", "error", "fit", "fitted_on"} <= set(table)
    assert "fit: source" in (out / "report.md").read_text()


def _run(source: str, **server) -> RealRun:
    args = ServerArgs(model="codellama/CodeLlama-34b-Instruct-hf", gpu="H100", **server)
    return RealRun(name="x", source=source, path=__import__("pathlib").Path("/nonexistent"), server=args,
                   requests=pd.DataFrame())


def test_the_idle_host_layer_is_never_used_on_its_own_source():
    from fidelity.idle_host import shipped_layer

    layer = shipped_layer()
    if layer is None:
        pytest.skip("no shipped idle-host layer")
    own, other = source_out_prior("aiconfigurator", _run(layer.source)), source_out_prior("aiconfigurator", _run("new"))
    assert "our engine" in own[1][0] and own[0].schedule_s != pytest.approx(layer.host_s_for(None))
    assert other[0].schedule_s == pytest.approx(layer.host_s_for(None)) and layer.source in other[1][0]
    # one of the layer's own runs loaded from its own folder (source "vllm-server") is still its source's
    alone = _run("vllm-server")
    alone = type(alone)(**{**alone.__dict__, "name": sorted(layer.per_run)[0]})
    assert "our engine" in source_out_prior("aiconfigurator", alone)[1][0]


def test_a_v0_engine_pays_our_serve_stacks_per_output_cost():
    from fidelity.predict import serve_stack_frontend

    stack = serve_stack_frontend()
    if stack is None:
        pytest.skip("no serve-stack front-end profile")
    v0, _ = source_out_prior("distserve", _run("new", enable_chunked_prefill=False))
    v1, _ = source_out_prior("aiconfigurator", _run("new"))
    assert v0.sample_per_seq_s == pytest.approx(stack["engine_s_per_output"]) and v1.sample_per_seq_s == 0
    assert v0.frontend_s > v1.frontend_s > 0  # the client-side TTFT also holds the first chunk's egress


def test_distserve_settings_are_the_launch_scripts_and_listed(shared_data):
    """DistServe's files record no setting: the loader takes its vLLM baseline's launch command from
    DistServe's source history (nothing inferred from the runs' timings, so source-out keeps them),
    and every one of the script's arguments is listed, modelled or not, with where it came from."""
    from fidelity.client_workload import version_assumption
    from fidelity.engine_settings import NOT_MODELLED, settings_table
    from fidelity.run_config import config_dict_for_run
    from fidelity.sources.distserve import DISTSERVE_VLLM_LAUNCH, DISTSERVE_VLLM_LAUNCH_ORIGIN

    runs = find_runs(shared_data / "groundtruth" / "distserve-a100-opt13b")
    assert runs and all(not r.inferred_args for r in runs)
    run = runs[0]
    assert run.without_inferred_args().server == run.server
    assert run.server.max_num_batched_tokens == DISTSERVE_VLLM_LAUNCH["max_num_batched_tokens"] == 16384
    assert run.server.max_num_seqs == DISTSERVE_VLLM_LAUNCH["max_num_seqs"]
    rows = {r["setting"]: r for r in settings_table(run)}
    assert set(DISTSERVE_VLLM_LAUNCH) <= set(rows)
    assert all(rows[k]["recorded_in"] == DISTSERVE_VLLM_LAUNCH_ORIGIN for k in DISTSERVE_VLLM_LAUNCH)
    # vLLM 0.2.3's padding cap, as the script sets it (and 0.2.3's default): simulated
    assert rows["max_paddings"]["status"] != NOT_MODELLED
    assert config_dict_for_run(run)["scheduler"]["max_paddings"] == 256
    # the script's 0.95, sized by vLLM 0.2.3's profiling rule (torch's peak), the release named with its origin
    assert rows["gpu_memory_utilization"]["status"] != NOT_MODELLED and run.server.gpu_memory_utilization == 0.95
    assert rows["engine_version"]["value"] == "0.2.3" and "INSTRUCTIONS.md" in rows["engine_version"]["recorded_in"]
    assert config_dict_for_run(run)["hardware"]["memory_profiling"] == "v0-peak"
    line = version_assumption(run)  # the client's release is not recorded: said, in one line
    assert "\n" not in line and "engine version not recorded" not in line and "client version not recorded" in line


def test_distserve_source_out_uses_no_curve_of_its_own_campaign_and_says_so(shared_data):
    """Under source-out a DistServe run (vLLM 0.2.3, before CUDA graphs) is an eager engine of
    aiconfigurator's A100 kernels with host work fitted on Splitwise's A100 step times: DistServe's
    curves time its own campaign's engine steps. Asked for by name, DistServe's curve comes with its
    alignment to these runs divided out, and says so; under `none` the aligned file stays and the
    report discloses that it holds DistServe's alignment to these runs."""
    from fidelity.predict import gpu_latency_model
    from fidelity.run_config import config_dict_for_run
    from sim.config import load_config
    from sim.latency.eager import EagerLatencyModel

    runs = [r for r in find_runs(shared_data / "groundtruth" / "distserve-a100-opt13b") if r.name == "vllm-100-1"]
    if not runs:
        pytest.skip("no DistServe run vllm-100-1")
    run = runs[0]
    config = load_config(config_dict_for_run(run))
    model, kind = gpu_latency_model(run, config, "distserve", source_out=True)
    assert kind == "distserve"
    assert model.prefill == pytest.approx([15.751574849507277, 0.10036374192949256, 5.76898915900792e-06], rel=1e-9)
    assert model.decode_small == pytest.approx([19.562534173678987, 0.0004941120550644942, 0.05060571771697455],
                                               rel=1e-9)
    aligned, kind = gpu_latency_model(run, config, "auto")
    assert kind == "distserve" and aligned.decode_small[0] == pytest.approx(1.2 * model.decode_small[0])
    eager, kind = gpu_latency_model(run, config, "auto", source_out=True)
    if kind != "aiconfigurator-eager":
        pytest.skip(f"no eager engine model here ({kind}): aiconfigurator-core or the shipped terms missing")
    assert isinstance(eager, EagerLatencyModel)
    out = reproduce(runs, fit="source", progress=False).table
    assert (out["gpu_model"] == "aiconfigurator-eager").all()
    assert out["fitted_on"].str.contains("predates CUDA graphs").all()
    assert out["fitted_on"].str.contains("fitted on Splitwise a100-80gb").all()
    assert not out["fitted_on"].str.contains("DistServe coefficients").any()
    named = reproduce(runs, fit="source", gpu_model="distserve", progress=False).table
    assert named["fitted_on"].str.contains("alignment to these runs divided out").all()
    assert named["gpu_model_note"].str.contains("divided out").all()
    none = reproduce(runs, fit="none", progress=False).table
    assert none["gpu_model_note"].str.contains("INCLUDE DistServe's alignment").all()


def test_our_engines_host_time_never_reads_the_in_step_offset_as_host_time(tmp_path, monkeypatch):
    """A calibration whose per-step constant went below 0 (`meta.in_step_offset_s`) has no host time
    per step; its per-sequence time still counts."""
    import json

    import fidelity.predict as predict

    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"meta": {"engine_step_fit": {"params": {"step_s": -2.5e-4, "per_seq_s": 1e-4}}}}))
    monkeypatch.setattr(predict, "OUR_ENGINE_HOST", path)
    assert predict.our_engine_host() == {"step_s": 0.0, "per_seq_s": 1e-4}
    path.write_text(json.dumps({"meta": {"engine_step_fit": {"params": {"step_s": 3e-4, "per_seq_s": 1e-4}}}}))
    assert predict.our_engine_host() == {"step_s": 3e-4, "per_seq_s": 1e-4}


def test_v1_source_out_host_time_is_our_engines_step_fit():
    """Without an idle-host layer of another source, a vLLM v1 run's host time per step and per
    sequence is our own engine's CPU step fit, and the evidence names that file."""
    from fidelity.predict import OUR_ENGINE_HOST, our_engine_host

    ours = our_engine_host()
    if ours is None:
        pytest.skip("no engine profile")
    o, evidence = source_out_prior("aiconfigurator", _run("new"), "A100")  # no H100 idle layer applies
    assert o.schedule_s == pytest.approx(ours["step_s"])
    assert o.schedule_per_seq_s == pytest.approx(ours["per_seq_s"])
    assert OUR_ENGINE_HOST.name in evidence[0]
    v0, _ = source_out_prior("aiconfigurator", _run("old", enable_chunked_prefill=False), "A100")
    assert v0.schedule_per_seq_s != pytest.approx(ours["per_seq_s"])  # a v0 engine: not ours


def test_a_span_measured_run_says_the_guidellm_release_it_assumes(shared_data):
    """A run measured by vLLM's spans whose guidellm profile came without a report records no guidellm
    release: the assumption is said like any other run's, not skipped for lack of a report."""
    from fidelity.client_workload import version_assumption

    run = next(r for r in find_runs(shared_data / "groundtruth" / "vllm-0.11-jan2026")
               if r.name == "jan20-codellama-train-1")
    assert "client version not recorded: assumed guidellm" in (version_assumption(run) or "")

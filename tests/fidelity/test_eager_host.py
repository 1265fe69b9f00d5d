"""A vLLM release without CUDA graphs: an eager engine with host work fitted elsewhere (`fidelity.eager_host`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fidelity_helpers import make_requests

from fidelity.eager_host import COMPUTE_FACTORS, EAGER_HOST, eager_host, machine_of, runs_eager, write_terms
from fidelity.predict import gpu_latency_model, predict_run, source_out_prior
from fidelity.run_config import config_dict_for_run
from fidelity.runs import RealRun, ServerArgs
from policies import BatchPlan, Request, ScheduledSeq
from sim.config import load_config
from sim.latency.eager import EagerLatencyModel


def old_run(version: str | None = "0.2.3", gpu: str = "A100", n: int = 4, **recorded) -> RealRun:
    """A vLLM v0 run of `version` serving OPT-13B on `gpu` (`n` requests, no timings)."""
    server = ServerArgs(model="facebook/opt-13b", gpu=gpu, enable_chunked_prefill=False, enable_prefix_caching=False,
                        max_model_len=2048, max_num_batched_tokens=2048, max_num_seqs=256, engine_version=version)
    requests = make_requests(n, rate=2.0, prompt=(100, 800), output=(20, 60))
    return RealRun(name="old", source="new", path=Path("/nonexistent"), server=server,
                   requests=requests.assign(prefix_group=-1, num_prefix_tokens=0),
                   recorded_args={k: (v, "launch script") for k, v in recorded.items()})


def model_for(run: RealRun, kind: str = "auto", source_out: bool = True):
    return gpu_latency_model(run, load_config(config_dict_for_run(run)), kind, source_out=source_out)


def decodes(n: int, context: int = 600) -> BatchPlan:
    return BatchPlan(0, tuple(ScheduledSeq(Request(i, 0.0, context, 8), 1, context, True) for i in range(n)))


def prefill(tokens: int) -> BatchPlan:
    return BatchPlan(0, (ScheduledSeq(Request(0, 0.0, tokens, 8), tokens, 0, True),))


@pytest.fixture(scope="module")
def shipped():
    host = eager_host("A100")
    if host is None:
        pytest.skip(f"no shipped eager host terms ({EAGER_HOST.name})")
    return host


@pytest.fixture(scope="module")
def eager_model(shipped):
    pytest.importorskip("aiconfigurator_core")
    model, kind = model_for(old_run())
    assert kind == "aiconfigurator-eager" and isinstance(model, EagerLatencyModel)
    return model


def test_releases_before_cuda_graphs_run_eager():
    assert runs_eager(old_run("0.2.3")) and runs_eager(old_run("0.2.5")) and runs_eager(old_run("0.1.7"))
    assert not runs_eager(old_run("0.2.6")) and not runs_eager(old_run("0.11")) and not runs_eager(old_run(None))


def test_machines_are_read_as_runs_spell_their_gpus():
    assert machine_of("A100-80GB") == machine_of("a100_sxm") == machine_of("A100") == "A100"
    assert machine_of("H100-SXM") == "H100"
    assert machine_of("L40S") is None and machine_of(None) is None


def test_the_shipped_terms_are_host_time_and_name_their_data(shipped):
    for gpu in ("A100", "H100"):
        host = eager_host(gpu)
        terms = host.host_terms()
        assert all(0 <= terms[k] < 0.05 for k in terms) and terms["step_s"] > 0 and terms["per_seq_s"] > 0, terms
        assert host.compute_factor in COMPUTE_FACTORS
        assert f"Splitwise {gpu.lower()}-80gb" in host.origin and EAGER_HOST.name in host.origin
    assert eager_host("L40S") is None


def test_a_missing_or_broken_file_gives_no_terms(tmp_path):
    assert eager_host("A100", tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text(json.dumps({"machines": {"A100": {"step_s": 1e-3}}}))
    assert eager_host("A100", tmp_path / "bad.json") is None


@pytest.fixture(scope="module")
def fresh(shared_data, tmp_path_factory):
    """`write_terms` run again on Splitwise's step times."""
    pytest.importorskip("aiconfigurator_core")
    path = tmp_path_factory.mktemp("eager") / "terms.json"
    return path, write_terms(shared_data, path)


def test_the_shipped_terms_are_what_the_splitwise_data_fits(fresh, shipped):
    """Nothing in the shipped file is edited by hand: fitting again gives the same terms and factors."""
    path, data = fresh
    for gpu in ("A100", "H100"):
        again, kept = eager_host(gpu, path), eager_host(gpu)
        assert again.compute_factor == kept.compute_factor, gpu
        assert list(again.host_terms().values()) == pytest.approx(list(kept.host_terms().values()), rel=1e-6), gpu
    assert data["machines"]["A100"]["fitted_on"].endswith("(114 points)")


def test_the_compute_factor_is_the_one_that_predicts_held_out_tps_best(fresh):
    """Each machine's factor has the least leave-one-TP-out error of those tried, and it beats the
    kernels as timed (x1) or ties them."""
    _, data = fresh
    for gpu, entry in data["machines"].items():
        errors = {float(f): e for f, e in entry["held_out_median_abs_pct_by_compute_factor"].items()}
        assert sorted(errors) == list(COMPUTE_FACTORS)
        assert errors[entry["compute_factor"]] == min(errors.values()) <= errors[1.0], gpu


def test_a_step_is_the_kernels_or_the_launches_plus_the_host_work(eager_model, shipped):
    """max(kernels, launch path) + host work outside the forward: one decode waits for the host's
    launches or the GPU, whichever is longer; a prompt step pays the prompt constant too."""
    terms = shipped.host_terms()
    one = eager_model.breakdown(decodes(1))
    device = sum(v for k, v in one.items() if k not in ("overhead", "launch_wait"))
    assert one["overhead"] == pytest.approx(terms["step_s"] + terms["per_seq_s"])
    assert device + one["launch_wait"] == pytest.approx(max(device, eager_model.launch_s))
    assert eager_model.breakdown(prefill(512))["overhead"] == pytest.approx(
        terms["step_s"] + terms["per_seq_s"] + terms["prefill_s"])
    # more sequences: more host work, by the per-sequence term
    assert eager_model.breakdown(decodes(32))["overhead"] - one["overhead"] == pytest.approx(31 * terms["per_seq_s"])


def test_only_a_release_without_cuda_graphs_gets_the_eager_model(eager_model):
    _, kind = model_for(old_run("0.4.0"))
    assert kind == "aiconfigurator"
    _, kind = model_for(old_run(None))
    assert kind == "aiconfigurator"


def test_an_eager_model_asked_for_where_nothing_fits_it_says_why():
    with pytest.raises(ValueError, match="gpu_model: no eager engine host terms for L40S"):
        model_for(old_run(gpu="L40S"), "aiconfigurator-eager")


def test_the_eager_engines_host_work_is_not_charged_twice(shipped):
    """The model holds the engine's host work: source-out adds only the serving path (front end, the
    API process's streaming, the Ray hops) and no documented per-sequence constant."""
    plain, evidence = source_out_prior("aiconfigurator-eager", old_run())
    assert plain.schedule_per_seq_s == 0.0
    assert any("in the GPU model" in e for e in evidence)
    ray, _ = source_out_prior("aiconfigurator-eager", old_run(engine_use_ray=True, worker_use_ray=True))
    assert ray.schedule_s > plain.schedule_s and ray.schedule_per_seq_s > 0


def test_a_predicted_eager_run_serves_every_request_and_names_its_parts(eager_model):
    run = old_run(n=40)
    pred = predict_run(run, host="source-out")
    assert pred.gpu_model == "aiconfigurator-eager"
    assert len(pred.requests) == 40 and (pred.requests["finish_reason"].astype(str) != "rejected").all()
    assert "predates CUDA graphs" in pred.gpu_model_note and "Splitwise a100-80gb" in pred.gpu_model_note
    assert any(e.startswith("GPU step times: an eager engine") for e in pred.evidence)


def test_simulate_from_a_run_of_an_eager_release_uses_the_eager_engine(shared_data, shipped, tmp_path):
    """`simulate --from-run` of a DistServe vLLM 0.2.3 file gets the same eager engine as `reproduce`
    (its profile: aiconfigurator's kernels, the launch path, the shipped host work), and says so."""
    pytest.importorskip("aiconfigurator_core")
    from fidelity.from_run import config_from_run
    from sim.latency import build_latency_model

    exp = shared_data / "groundtruth" / "distserve-a100-opt13b" / "data-ground-truth" / "opt-13b-sharegpt" / "vllm-100-1.exp"
    if not exp.is_file():
        pytest.skip("no DistServe run vllm-100-1")
    config = config_from_run(exp)
    assert any("predates CUDA graphs" in n and "Splitwise a100-80gb" in n for n in config.notes)
    model = build_latency_model(config.model, config.hardware, config.cache.block_size)
    assert isinstance(model, EagerLatencyModel)
    terms = shipped.host_terms()
    assert model.breakdown(decodes(4))["overhead"] == pytest.approx(terms["step_s"] + 4 * terms["per_seq_s"])


def test_an_eager_runs_kernels_run_at_its_machines_sustained_compute_factor(eager_model, shipped):
    """The factor chosen with the host terms slows the compute-bound prefill, not a memory-bound decode."""
    from fidelity.predict import compute_prior

    assert compute_prior(old_run(), "A100") == shipped.compute_factor
    assert compute_prior(old_run("0.4.0"), "A100") == 1.0
    if shipped.compute_factor == 1.0:
        pytest.skip("the shipped A100 factor is 1: nothing to compare")
    as_timed, _ = gpu_latency_model(old_run(), load_config(config_dict_for_run(old_run())), "aiconfigurator-eager",
                                    compute_factor=1.0, source_out=True)
    slow, fast = eager_model.breakdown(prefill(1024)), as_timed.breakdown(prefill(1024))
    assert slow["linear"] > 1.1 * fast["linear"]
    assert eager_model.breakdown(decodes(1))["linear"] == pytest.approx(as_timed.breakdown(decodes(1))["linear"], rel=0.02)

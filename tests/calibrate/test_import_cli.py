"""`servesim calibrate import` end to end: the eager launch path and Vidur kernels from the CLI.

The profiles are imported from the h100-microbench data (skipped without ../shared/data) with an
explicit `--call-us`, so these tests need neither a GPU nor the aiconfigurator extra.
"""
from __future__ import annotations

import csv
import json

import pytest

from fidelity.sources.splitwise import decode_plan, prefill_plan
from servesim.cli import main
from sim.latency import build_latency_model
from sim.latency.eager import EagerLatencyModel
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel
from sim.latency.roofline import RooflineConstants
from specs import HardwareConfig, ModelConfig

LAYERS = 80  # Llama-2-70B


def import_cli(shared_data, out, *extra, tp: int = 8) -> int:
    """Run `servesim calibrate import` for Llama-2-70B on H100 from h100-microbench; returns the exit code."""
    return main(["calibrate", "import", "--source", "h100-microbench", "--gpu", "H100", "--model", "llama-2-70b",
                 "--tp", str(tp), "--data-dir", str(shared_data / "profiles" / "h100-kernel-microbench"),
                 "--out", str(out), *extra])


def eager_model(path, tp: int = 8):
    return build_latency_model(ModelConfig(name="llama-2-70b"), HardwareConfig(latency="profiled", profile=str(path),
                                                                                tp=tp), 16)


@pytest.fixture(scope="module")
def eager_file(shared_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("import") / "eager.json"
    assert import_cli(shared_data, path, "--host", "eager-launch", "--call-us", "50", "--calls-per-layer", "14") == 0
    return path


def test_eager_launch_profile_loads_and_builds_the_eager_model(eager_file):
    p = Profile.load(eager_file)
    assert p.meta["host"] == "eager-launch"
    assert p.meta["eager_launch"]["launch_s"] == pytest.approx(LAYERS * 14 * 50e-6)
    lm = eager_model(eager_file)
    assert isinstance(lm, EagerLatencyModel)
    assert lm.launch_s == pytest.approx(LAYERS * 14 * 50e-6)


def test_a_host_bound_decode_step_costs_the_launch_path(eager_file):
    """Decode at one sequence: the kernels finish before 80 x 14 launches of 50 us; the step is the
    launch path plus the host work outside the forward (default: the CUDA-graph engine's constants)."""
    lm = eager_model(eager_file)
    kernels = ProfiledLatencyModel(Profile.load(eager_file))
    one = decode_plan(1, 576)
    c = RooflineConstants()
    host = c.step_overhead_s + c.per_seq_overhead_s
    assert kernels.step_time(one) - host < LAYERS * 14 * 50e-6  # host-bound
    assert lm.step_time(one) == pytest.approx(LAYERS * 14 * 50e-6 + host, rel=1e-6)
    # a large prefill is GPU-bound: the launches hide behind the kernels, no term is added
    big = prefill_plan(16, 1024)
    assert kernels.step_time(big) - host > LAYERS * 14 * 50e-6
    assert lm.step_time(big) == pytest.approx(kernels.step_time(big), rel=1e-9)


def test_simulate_with_the_imported_profile_waits_for_the_launch_path(eager_file, tmp_path):
    """`servesim simulate` with `hardware.latency = "profiled"` and the imported file: no step is
    shorter than the launch path."""
    cfg = tmp_path / "eager.toml"
    cfg.write_text(f"""
[model]
name = "Llama-2-70B"
[hardware]
gpu = "H100-SXM"
tp = 8
latency = "profiled"
profile = {json.dumps(str(eager_file))}
[scheduler]
policy = "continuous"
max_num_seqs = 8
[workload]
kind = "poisson"
rate = 4.0
num_requests = 12
prompt_len = {{ kind = "uniform", low = 32, high = 256 }}
output_len = {{ kind = "uniform", low = 4, high = 16 }}
seed = 1
""")
    assert main(["simulate", str(cfg), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    with open(tmp_path / "out" / "steps.csv", newline="") as f:
        durations = [float(r["duration"]) for r in csv.DictReader(f)]
    assert durations and min(durations) >= LAYERS * 14 * 50e-6


def test_host_terms_replace_the_default_host_work(shared_data, tmp_path):
    path = tmp_path / "terms.json"
    assert import_cli(shared_data, path, "--host", "eager-launch", "--call-us", "50", "--host-terms", "9", "0.3",
                      "13") == 0
    lm = eager_model(path)
    for n in (1, 8):
        assert lm.breakdown(decode_plan(n, 576))["overhead"] == pytest.approx(9e-3 + n * 0.3e-3, rel=1e-6)
    assert lm.breakdown(prefill_plan(2, 256))["overhead"] == pytest.approx(9e-3 + 2 * 0.3e-3 + 13e-3, rel=1e-6)


def test_vidur_kernels_from_the_cli_continue_beyond_their_grid(shared_data, tmp_path):
    """`--kernels vidur` extends Vidur's grids in proportion; `--raw-grid` keeps the last-segment slope."""
    ext, raw = tmp_path / "ext.json", tmp_path / "raw.json"
    assert import_cli(shared_data, ext, "--kernels", "vidur") == 0
    assert import_cli(shared_data, raw, "--kernels", "vidur", "--raw-grid") == 0
    e, r = Profile.load(ext), Profile.load(raw)
    assert "qkv_proj" in e.meta["extended_in_proportion"] and "extended_in_proportion" not in r.meta
    assert e.ops["qkv_proj"].curve(8192) == pytest.approx(2 * e.ops["qkv_proj"].curve(4096), rel=1e-9)


@pytest.mark.parametrize("extra, field", [
    (["--host", "graphs", "--call-us", "20"], "--call-us"),
    (["--host", "eager", "--calls-per-layer", "12"], "--calls-per-layer"),
    (["--host", "none", "--host-terms", "1", "0", "1"], "--host-terms"),
    (["--host", "eager-launch", "--call-us", "-3"], "--call-us"),
    (["--host", "eager-launch", "--call-us", "20", "--calls-per-layer", "0"], "--calls-per-layer"),
    (["--host", "eager-launch", "--call-us", "20", "--host-terms", "1", "-1", "1"], "--host-terms"),
    (["--host", "turbo"], "host"),
])
def test_bad_options_exit_2_naming_the_field(shared_data, tmp_path, capsys, extra, field):
    assert import_cli(shared_data, tmp_path / "x.json", *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"servesim calibrate: error: {field}:"), err
    assert not (tmp_path / "x.json").exists()


def test_aiconfigurators_kernels_take_the_shipped_2023_terms_by_default(tmp_path, capsys):
    """`--host eager-launch` with aiconfigurator's own kernels on an A100: the host work and the
    compute factor fitted together over those kernels on Splitwise's A100 (`fidelity.eager_host`),
    said in one line; `--host-terms` replaces both (the kernels as timed)."""
    pytest.importorskip("aiconfigurator_core")
    from fidelity.eager_host import eager_host

    shipped = eager_host("A100")
    if shipped is None:
        pytest.skip("no shipped eager host terms")
    base = ["calibrate", "import", "--source", "aiconfigurator", "--gpu", "A100", "--model", "llama-2-13b",
            "--host", "eager-launch"]
    assert main([*base, "--out", str(tmp_path / "default.json")]) == 0
    assert "Splitwise a100-80gb" in capsys.readouterr().out
    given = [str(v * 1e3) for v in shipped.host_terms().values()]
    assert main([*base, "--host-terms", *given, "--out", str(tmp_path / "given.json")]) == 0
    model = ModelConfig(name="llama-2-13b")
    default, as_timed = (build_latency_model(model, HardwareConfig(gpu="A100", latency="profiled",
                                                                   profile=str(tmp_path / name)), 16)
                         for name in ("default.json", "given.json"))
    for plan in (decode_plan(1, 576), decode_plan(8, 576)):
        assert default.breakdown(plan)["overhead"] == pytest.approx(as_timed.breakdown(plan)["overhead"], rel=1e-9)
        assert default.breakdown(plan)["overhead"] == pytest.approx(
            shipped.step_s + plan.num_seqs * shipped.per_seq_s, rel=1e-6)
    big = prefill_plan(4, 1024)  # compute-bound: slowed by the shipped factor
    assert default.breakdown(big)["linear"] == pytest.approx(
        as_timed.breakdown(big)["linear"] * shipped.compute_factor, rel=0.05)

"""The imported H100 profile against measured Splitwise static-batch step times (Llama-2-70B, DGX-H100).

The issue's target is a 15% median error, with nothing fitted to the scored step times.

- `host="eager"` (additive host constants from `sim.latency.RooflineConstants.eager()`) on
  aiconfigurator kernels: 16.8% median (TP2 8.5%, TP4 14.7%, TP8 30.2%, all under-predicted); with
  Vidur's eager GEMMs/elementwise/all-reduce (`kernels="vidur"`): 16.3%. Both stay asserted as
  expected failures of the 15% target; the native figure is held to a 20% bound so that it cannot
  silently get worse.
- The eager engine model (`sim.latency.eager.EagerLatencyModel`: max(kernels, launch path) + host
  work outside the forward), on Vidur kernels continued in proportion beyond their 4096-token grid:
  the launch path is not fitted (14 op calls a layer x the host time of one eager op call measured
  by aiconfigurator on H100, 16.9 us: 18.9 ms a step); the host work outside the forward (per
  step, per sequence, per prompt step) is fitted **leave one TP out**, so every scored point is
  predicted by terms fitted on the other two TPs. Measured: 10.4% median over all 114 points (TP2
  8.8%, TP4 9.3%, TP8 12.9%); `benchmarks/splitwise_check.py` prints every point. The kernels and
  launch path come from the import path users run (`import_profile(host="eager-launch",
  kernels="vidur")`, i.e. `servesim calibrate import --host eager-launch --kernels vidur`).

Since `calibrate.fit` counts rows per knot once, the Vidur imports take ~1-3 s each: nothing here
is marked slow (the whole module: 15 s at load 2.5 on the 2-core machine, 8 s of it importing).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")

from calibrate.importers import import_profile  # noqa: E402
from calibrate.importers.beyond_grid import extend_dense_grids  # noqa: E402
from calibrate.importers.derived import host_overhead_op  # noqa: E402
from calibrate.importers.eager_launch import add_eager_launch  # noqa: E402
from fidelity.sources.splitwise import check, eager_profile, held_out_check, prefill_plan, summary  # noqa: E402
from sim.latency.eager import EagerLatencyModel  # noqa: E402
from sim.latency.profile import Profile  # noqa: E402
from sim.latency.profiled import ProfiledLatencyModel  # noqa: E402

TPS = (2, 4, 8)


def with_additive_eager_host(p: Profile) -> Profile:
    """A copy of kernel-only profile `p` with import_profile's host="eager" constants added."""
    out = Profile(meta=dict(p.meta), model=dict(p.model), ops=dict(p.ops))
    out.ops["step_overhead"] = host_overhead_op(p.model, "eager")
    return out


@pytest.fixture(scope="module")
def rows(shared_data):
    models = {tp: ProfiledLatencyModel(import_profile("aiconfigurator", "H100", "llama-2-70b", tp, host="eager"))
              for tp in TPS}
    return check(shared_data, models, hardware="h100-80gb")


@pytest.fixture(scope="module")
def vidur_kernels(shared_data):  # Vidur's kernels: ../shared/data/profiles/vidur-per-op, the importer's default
    """TP -> kernel-only profile with Vidur's eager kernels on their raw grids (last-segment slope beyond)."""
    return {tp: import_profile("aiconfigurator", "H100", "llama-2-70b", tp, host="none", kernels="vidur",
                               extend_grids=False) for tp in TPS}


@pytest.fixture(scope="module")
def vidur_rows(shared_data, vidur_kernels):
    models = {tp: ProfiledLatencyModel(with_additive_eager_host(p)) for tp, p in vidur_kernels.items()}
    return check(shared_data, models, hardware="h100-80gb")


@pytest.fixture(scope="module")
def launch_kernels(shared_data):
    """Vidur kernels continued in proportion beyond their grid, with the eager launch path, as the CLI's
    `--host eager-launch --kernels vidur` imports them (held_out_check drops its default host work)."""
    return {tp: import_profile("aiconfigurator", "H100", "llama-2-70b", tp, host="eager-launch", kernels="vidur")
            for tp in TPS}


def test_import_path_is_the_raw_grids_extended_plus_the_launch_path(launch_kernels, vidur_kernels):
    """The import path gives the same step times as composing the parts by hand (raw grids ->
    extend_dense_grids -> add_eager_launch), at every TP, inside and beyond Vidur's grid."""
    from fidelity.sources.splitwise import decode_plan

    for tp in TPS:
        manual = eager_profile(vidur_kernels[tp])
        extend_dense_grids(manual)
        add_eager_launch(manual, "H100")
        a, b = EagerLatencyModel(eager_profile(launch_kernels[tp])), EagerLatencyModel(manual)
        for pl in (prefill_plan(1, 512), prefill_plan(16, 512), decode_plan(1, 576), decode_plan(32, 1500)):
            assert a.step_time(pl) == pytest.approx(b.step_time(pl), rel=1e-9), (tp, pl)


@pytest.fixture(scope="module")
def held_out(shared_data, launch_kernels):
    return held_out_check(shared_data, launch_kernels, hardware="h100-80gb")


# --- the eager engine model, host terms fitted leave one TP out ------------------------------------
def test_eager_engine_predicts_splitwise_within_15_percent_held_out(held_out):
    rows, _ = held_out
    assert len(rows) == 2 * 3 * 19
    assert summary(rows)["all"]["median_abs_pct"] <= 15.0


def test_every_tp_and_phase_within_15_percent_held_out(held_out):
    rows, _ = held_out
    for tp in TPS:
        for phase, s in summary(rows[rows.tp == tp]).items():
            assert s["median_abs_pct"] <= 15.0, (tp, phase, s)


def test_held_out_host_terms_agree_between_folds(held_out):
    """Terms fitted without TP2, without TP4 and without TP8 describe one engine: within 2.5x of each other."""
    _, terms = held_out
    for name in ("step_s", "per_seq_s", "prefill_s"):
        vals = [terms[tp][name] for tp in TPS]
        assert min(vals) > 0 and max(vals) <= 2.5 * min(vals), (name, vals)


def test_decode_waits_for_the_host_at_tp8_not_at_tp2(launch_kernels):
    """Measured: decode at one sequence takes ~the same at TP4 and TP8 although the kernels shrink by a
    third; the model says why: TP8's kernels finish before the host has launched them."""
    from fidelity.sources.splitwise import decode_plan

    wait = {tp: EagerLatencyModel(p).breakdown(decode_plan(1, 576))["launch_wait"] for tp, p in launch_kernels.items()}
    assert wait[2] == 0.0 and wait[8] > 0.0


def test_prefill_time_doubles_with_tokens_beyond_the_vidur_grid(launch_kernels, vidur_kernels):
    """8192 tokens cost about twice 4096 (plus quadratic attention), not 4.4x (TP2) or 1.3x (TP8) as the
    raw grids' last 32-token slopes said."""
    raw_ratio = []
    for tp in TPS:
        ext = ProfiledLatencyModel(launch_kernels[tp])
        ratio = ext.step_time(prefill_plan(16, 512)) / ext.step_time(prefill_plan(8, 512))
        assert 1.9 <= ratio <= 2.3, (tp, ratio)
        raw = ProfiledLatencyModel(vidur_kernels[tp])
        raw_ratio.append(raw.step_time(prefill_plan(16, 512)) / raw.step_time(prefill_plan(8, 512)))
    assert max(abs(np.log(r / 2)) for r in raw_ratio) > np.log(1.3)


# --- the additive host constants (before) --------------------------------------------------------
def test_era_matched_kernels_are_no_worse_at_any_tp(rows, vidur_rows):
    for tp in TPS:
        native = summary(rows[rows.tp == tp])["all"]["median_abs_pct"]
        vidur = summary(vidur_rows[vidur_rows.tp == tp])["all"]["median_abs_pct"]
        assert vidur <= native, (tp, vidur, native)


@pytest.mark.xfail(reason="measured 16.3% median (TP8 24.8%, host-bound decode): the additive host constants "
                          "miss the eager launch path; see the eager engine tests above", strict=False)
def test_vidur_kernels_predict_splitwise_within_15_percent(vidur_rows):
    assert summary(vidur_rows)["all"]["median_abs_pct"] <= 15.0


def test_every_measured_point_is_predicted(rows):
    assert len(rows) == 2 * 3 * 19  # 19 distinct configs per TP, prefill and decode each
    assert (rows.predicted_ms > 0).all()


@pytest.mark.xfail(reason="measured 16.8% median (TP8 30%): see the module docstring", strict=False)
def test_h100_profile_predicts_splitwise_within_15_percent(rows):
    assert summary(rows)["all"]["median_abs_pct"] <= 15.0


def test_h100_profile_stays_within_what_it_reached(rows):
    assert summary(rows)["all"]["median_abs_pct"] <= 20.0


def test_prefill_times_are_ranked_like_the_measurements(rows):
    from scipy.stats import spearmanr

    for tp, part in rows[rows.phase == "prefill"].groupby("tp"):
        rho = spearmanr(part.measured_ms, part.predicted_ms)[0]
        assert rho >= 0.85, (tp, rho)


def test_the_cli_with_fitted_host_terms_reproduces_the_held_out_check(shared_data, held_out, tmp_path):
    """`servesim calibrate import --host eager-launch --kernels vidur --host-terms ...` with TP8's held-out
    terms writes a profile that `simulate`'s `build_latency_model` turns into the same predictions."""
    from servesim.cli import main
    from sim.latency import build_latency_model
    from specs import HardwareConfig, ModelConfig

    rows, terms = held_out
    t = terms[8]
    path = tmp_path / "tp8.json"
    assert main(["calibrate", "import", "--source", "aiconfigurator", "--gpu", "H100", "--model", "llama-2-70b",
                 "--tp", "8", "--host", "eager-launch", "--kernels", "vidur", "--host-terms",
                 *(repr(t[k] * 1e3) for k in ("step_s", "per_seq_s", "prefill_s")), "--out", str(path)]) == 0
    lm = build_latency_model(ModelConfig(name="llama-2-70b"), HardwareConfig(latency="profiled", profile=str(path),
                                                                              tp=8), 16)
    assert isinstance(lm, EagerLatencyModel)
    mine = check(shared_data, {8: lm})
    want = rows[rows.tp == 8].reset_index(drop=True)
    assert len(mine) == len(want) == 38
    np.testing.assert_allclose(mine.predicted_ms, want.predicted_ms, rtol=1e-6)

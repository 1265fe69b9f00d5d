"""The imported H100 profile against measured Splitwise static-batch step times (Llama-2-70B, DGX-H100).

The issue's target is a 15% median error. Measured with aiconfigurator-core 0.12.0 (vLLM 0.24 kernel
timings): 36% median over TP 2/4/8 (TP2 25%, TP4 44%, TP8 59%), every point under-predicted, the
decode steps most (TP8: 30 ms measured for a near-flat decode vs 12 ms of kernel time). The 2023
engine behind the Splitwise data spent ~10-20 ms per step outside the kernels that a per-op kernel
database cannot see, and nothing here may be fitted to this data (it is the test set). The target
stays asserted as an expected failure, and what the profile does get right (the order of the
prefill times) is asserted for real. `benchmarks/splitwise_check.py` prints every point.
"""
from __future__ import annotations

import pytest

pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")

from calibrate.importers import import_profile  # noqa: E402
from calibrate.splitwise import check, summary  # noqa: E402
from sim.latency.profiled import ProfiledLatencyModel  # noqa: E402


@pytest.fixture(scope="module")
def rows(shared_data):
    models = {tp: ProfiledLatencyModel(import_profile("aiconfigurator", "H100", "llama-2-70b", tp)) for tp in (2, 4, 8)}
    return check(shared_data, models, hardware="h100-80gb")


def test_every_measured_point_is_predicted(rows):
    assert len(rows) == 2 * 3 * 19  # 19 distinct configs per TP, prefill and decode each
    assert (rows.predicted_ms > 0).all()


@pytest.mark.xfail(reason="measured 36% median (see module docstring): host overhead of the 2023 engine "
                          "is not in kernel timings", strict=False)
def test_h100_profile_predicts_splitwise_within_15_percent(rows):
    assert summary(rows)["all"]["median_abs_pct"] <= 15.0


def test_prefill_times_are_ranked_like_the_measurements(rows):
    from scipy.stats import spearmanr

    for tp, part in rows[rows.phase == "prefill"].groupby("tp"):
        rho = spearmanr(part.measured_ms, part.predicted_ms)[0]
        assert rho >= 0.85, (tp, rho)

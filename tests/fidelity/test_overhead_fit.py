"""The linear overhead fit: its equations reproduce the simulator, and it recovers known terms."""
from __future__ import annotations

import numpy as np
import pytest
from fidelity_helpers import make_measured_run, make_requests

from fidelity.host_overhead import HostOverhead
from fidelity.overhead_fit import fit_overhead, run_system, theta_of
from fidelity.predict import predict_run
from fidelity.runs import RealRun, ServerArgs
from fidelity.sources.vllm_server import load_server_run

TRUTH = HostOverhead(compute_scale=1.15, schedule_s=3e-3, sample_per_seq_s=8e-5, frontend_s=0.02)


def make_run(n=30, rate=6.0, seed=0):
    server = ServerArgs(model="meta-llama/Llama-2-7b-hf", gpu="H100", max_model_len=4096,
                        max_num_batched_tokens=2048, max_num_seqs=64)
    req = make_requests(n, rate, seed).assign(prefix_group=-1, num_prefix_tokens=0)
    from pathlib import Path

    return RealRun(name=f"r{seed}", source="hand-made", path=Path("."), server=server, requests=req)


def test_equations_reproduce_the_simulated_latencies_exactly():
    run = make_run()
    pred = predict_run(run, TRUTH, gpu_model="roofline")
    sim = pred.requests.set_index(pred.requests["req_id"].astype(str))
    measured = run.requests.assign(ttft_s=sim.loc[run.requests["req_id"], "ttft_s"].to_numpy(),
                                   e2e_s=sim.loc[run.requests["req_id"], "e2e_s"].to_numpy())
    measured["tpot_s"] = (measured["e2e_s"] - measured["ttft_s"]) / (measured["num_output_tokens"] - 1)
    system = run_system(pred, measured)
    theta = theta_of(TRUTH)
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        # TTFT equations only for requests the simulation did not queue
        assert 0 < len(system.y[metric]) <= run.num_requests if metric == "ttft_s" else \
            len(system.y[metric]) == run.num_requests
        np.testing.assert_allclose(system.A[metric] @ theta, system.y[metric], rtol=1e-9, atol=1e-9)


def test_fit_on_two_runs_predicts_a_third_it_never_saw(tmp_path):
    # GPU time and a per-step constant are nearly collinear in small decode-bound runs, so the
    # terms themselves are not unique; what must hold is that the fitted step times predict a run
    # at another rate that the fit never saw, much better than no fit does
    train = [load_server_run(make_measured_run(tmp_path / f"run{i}", TRUTH, n=40, rate=r, seed=i))
             for i, r in enumerate((2.0, 16.0))]
    test = load_server_run(make_measured_run(tmp_path / "held-out", TRUTH, n=40, rate=8.0, seed=7))
    overhead = HostOverhead()
    for _ in range(3):  # simulate -> fit rounds
        systems = [run_system(predict_run(r, overhead, gpu_model="roofline"), r.requests) for r in train]
        overhead = fit_overhead(systems)
    want = test.measured()
    fitted = predict_run(test, overhead, gpu_model="roofline").means()
    plain = predict_run(test, HostOverhead(), gpu_model="roofline").means()
    for m in want:
        err_fit, err_plain = abs(fitted[m] / want[m] - 1), abs(plain[m] / want[m] - 1)
        assert err_fit < 0.05 and err_fit < err_plain / 2, (m, err_fit, err_plain)


def test_no_overhead_fits_no_overhead(tmp_path):
    run = load_server_run(make_measured_run(tmp_path / "plain", HostOverhead(), n=30, rate=5.0))
    fitted = fit_overhead([run_system(predict_run(run, gpu_model="roofline"), run.requests)])
    assert fitted.compute_scale == pytest.approx(1.0, abs=0.02)
    assert fitted.schedule_s < 2e-4 and fitted.frontend_s < 2e-3


def test_bad_term_names_the_field():
    from policies import ConfigError

    with pytest.raises(ConfigError, match="^overhead.schedule_s"):
        HostOverhead(schedule_s=-1.0)
    with pytest.raises(ConfigError, match="^overhead.warp"):
        HostOverhead.from_dict({"warp": 1.0})


def test_mean_only_equations_are_the_mean_of_the_request_equations():
    run = make_run(n=20, seed=3)
    pred = predict_run(run, TRUTH, gpu_model="roofline")
    means = pred.means()
    system = run_system(pred, means=means)
    theta = theta_of(TRUTH)
    for metric in ("tpot_s", "e2e_s"):
        assert system.A[metric].shape == (1, 6)
        assert float((system.A[metric] @ theta)[0]) == pytest.approx(means[metric], rel=1e-9)


def test_a_fit_limited_to_one_term_recovers_it_and_moves_nothing_else(tmp_path):
    # the DistServe source's rule: the engine's own iteration times, only per-sequence host work left
    truth = HostOverhead(sample_per_seq_s=3e-4)
    run = load_server_run(make_measured_run(tmp_path / "per-seq", truth, n=40, rate=8.0))
    overhead = HostOverhead()
    for _ in range(3):
        overhead = fit_overhead([run_system(predict_run(run, overhead, gpu_model="roofline"), run.requests)],
                                terms=("sample_per_seq_s",))
    assert overhead.sample_per_seq_s == pytest.approx(3e-4, rel=0.1)
    assert (overhead.compute_scale, overhead.schedule_s, overhead.frontend_s) == (1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="^terms"):
        fit_overhead([], terms=("warp",))

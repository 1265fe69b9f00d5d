"""Each client's TPOT is scored per token, like the prediction: never a per-chunk figure."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fidelity_helpers import make_requests, write_exp_config

from fidelity.metric_definitions import DEFINITIONS, definition
from fidelity.predict import Prediction
from fidelity.runs import METRICS, RealRun, ServerArgs
from fidelity.sources.vllm_server import MEASURED_BY, load_server_run


def write_inference_perf(folder, req, chunks_per_token=2, computed=True):
    """inference-perf per-request entries whose stream carried `chunks_per_token` chunks per token:
    the client's TPOT is per chunk, `chunks_per_token` times smaller than per token."""
    entries = []
    for r in req.itertuples():
        start, n = 100.0 + r.arrival_time, int(r.num_output_tokens)
        ttft, e2e = 0.05 + 1e-4 * r.num_prompt_tokens, 0.05 + 1e-4 * r.num_prompt_tokens + 0.02 * (n - 1)
        times = list(np.linspace(start + ttft, start + e2e, chunks_per_token * n))
        per_chunk = (times[-1] - times[0]) / (len(times) - 1)
        e = {"start_time": start, "end_time": start + e2e, "error": None,
             "info": {"request_metrics": {"text": {"input_tokens": int(r.num_prompt_tokens)}},
                      "response_metrics": {"output_tokens": n, "output_token_times": times}}}
        if computed:
            e["computed_metrics"] = {"input_tokens": int(r.num_prompt_tokens), "output_tokens": n,
                                     "time_to_first_token": ttft, "request_latency": e2e,
                                     "time_per_output_token": per_chunk, "inter_token_latency": per_chunk}
        entries.append(e)
    (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps(entries))


@pytest.mark.parametrize("computed", [True, False])
def test_inference_perf_tpot_is_per_token_whatever_the_chunks(tmp_path, computed):
    folder = write_exp_config(tmp_path / "ip")
    req = make_requests(8, seed=3)
    write_inference_perf(folder, req, chunks_per_token=2, computed=computed)
    run = load_server_run(folder)
    assert run.requests["tpot_s"].to_numpy() == pytest.approx(np.full(8, 0.02))  # not the 0.01 per chunk
    assert run.measured_by == "inference-perf" and "per streamed chunk" in definition("inference-perf", "tpot_s")


def test_guidellm_itl_is_scored_as_tpot(shared_data):
    folder = shared_data / "groundtruth" / "vllm-0.11-jan2026" / "jan20-codellama-prefill-1"
    df = pd.read_csv(folder / "guidellm_per_request.csv")
    ok = df[df["status"].astype(str).str.startswith("success") & (df["output_tokens"] > 1)]
    # guidellm's ITL is (last - first token) / (n - 1): (latency - TTFT) / (n - 1) but for the
    # response's tail after its last token; its TPOT is latency / n
    itl = (ok["request_latency_s"] - ok["ttft_ms"] / 1e3) / (ok["output_tokens"] - 1)
    assert ok["itl_ms"].to_numpy() / 1e3 == pytest.approx(itl.to_numpy(), rel=0.03)
    assert (ok["itl_ms"].to_numpy() / 1e3 <= itl.to_numpy() * (1 + 1e-6)).all()
    assert ok["tpot_ms"].to_numpy() / 1e3 == pytest.approx((ok["request_latency_s"] / ok["output_tokens"]).to_numpy(),
                                                            rel=5e-3)


def test_a_summary_runs_prediction_is_scored_as_tpot_of_means(tmp_path):
    run = RealRun("s", "x", tmp_path, ServerArgs(model="m"), pd.DataFrame(), tpot_of_means=True)
    req = pd.DataFrame({"ttft_s": [0.1, 0.3], "e2e_s": [1.1, 5.3], "tpot_s": [0.1, 0.05],
                        "num_output_tokens": [11, 101]})
    means = Prediction(run, req, pd.DataFrame(), "roofline", "profile", None).means()
    assert means["tpot_s"] == pytest.approx((3.2 - 0.2) / (56 - 1))  # not the mean of per-request TPOTs


def test_every_measurement_kind_has_its_definitions():
    kinds = set(MEASURED_BY.values()) | {"inference-perf-summary", "llmservingsim", "distserve"}
    assert kinds <= set(DEFINITIONS)
    assert all(set(DEFINITIONS[k]) == set(METRICS) for k in DEFINITIONS)

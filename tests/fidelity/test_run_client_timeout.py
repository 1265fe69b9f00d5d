"""The benchmark client's request timeout in a reproduced run (fidelity.client_timeout)."""
from __future__ import annotations

import copy

import pandas as pd
import pytest
from fidelity_helpers import ISSUE_PROFILE

from fidelity.client_timeout import AIOHTTP_DEFAULT_TOTAL_S, client_timeout, served_line, served_row
from fidelity.predict import predict_run
from fidelity.run_config import config_dict_for_run
from fidelity.runs import RealRun, ServerArgs

EMPTY = pd.DataFrame(columns=["req_id", "arrival_time", "num_prompt_tokens", "num_output_tokens"])


def make_run(tmp_path, request_timeout=None, rate: float = 4.0, duration: float = 10.0, profile=None,
             measured_by: str = "inference-perf-summary") -> RealRun:
    """An inference-perf shared_prefix run (single turn, one stage) on one small GPU, nothing measured."""
    if profile is None:
        profile = copy.deepcopy(ISSUE_PROFILE)
        profile["data"]["shared_prefix"].update(enable_multi_turn_chat=False, question_len=400, output_len=200)
        profile["load"]["stages"] = [{"rate": rate, "duration": duration}]
        profile["load"]["request_timeout"] = request_timeout
    args = ServerArgs(model="meta-llama/Llama-2-7b-hf", gpu="A10G", tensor_parallel_size=1, max_model_len=4096,
                      max_num_batched_tokens=2048, max_num_seqs=64)
    return RealRun("run", "made-up", tmp_path, args, EMPTY, profile, measured_by=measured_by)


def test_inference_perf_without_a_timeout_gets_aiohttps_default(tmp_path):
    seconds, origin = client_timeout(make_run(tmp_path))
    assert seconds == AIOHTTP_DEFAULT_TOTAL_S == 300.0 and "aiohttp" in origin
    seconds, origin = client_timeout(make_run(tmp_path, request_timeout=45))
    assert seconds == 45.0 and "load.request_timeout" in origin


@pytest.mark.parametrize("bad", [-1, 0, "soon", True])
def test_a_bad_recorded_timeout_names_the_field(tmp_path, bad):
    with pytest.raises(ValueError, match="load.request_timeout"):
        client_timeout(make_run(tmp_path, request_timeout=bad))


def test_other_clients_get_no_timeout_and_say_so(tmp_path):
    guidellm = {"rate-type": "sweep", "max-requests": 25, "data": {"prompt_tokens": 100, "output_tokens": 10}}
    seconds, origin = client_timeout(make_run(tmp_path, profile=guidellm, measured_by="vllm-spans"))
    assert seconds is None and "no client timeout" in origin


def test_the_runs_config_carries_the_clients_timeout(tmp_path):
    run = make_run(tmp_path, request_timeout=None)
    assert config_dict_for_run(run, workload="profile", cache_dir=tmp_path)["workload"]["request_timeout_s"] == 300.0


def test_an_overloaded_run_gives_up_where_its_client_did_and_loses_no_request(tmp_path):
    """Far above capacity with a short client timeout: requests time out, their latencies leave the
    means (as inference-perf's successes), and every sent request is in the table exactly once."""
    run = make_run(tmp_path, request_timeout=40.0, rate=40.0, duration=10.0)
    pred = predict_run(run, gpu_model="roofline", host="prior")
    row = served_row(pred)
    assert row["client_timeout_s"] == 40.0
    assert row["predicted_timed_out"] > 0 and row["predicted_finished"] > 0
    assert row["predicted_finished"] + row["predicted_timed_out"] + row["predicted_rejected"] == len(pred.requests)
    assert row["predicted_other"] == 0
    assert pred.requests["req_id"].is_unique
    done = pred.requests[pred.requests["finish_reason"].isin(["length", "stop"])]
    assert (done["e2e_s"] <= 40.0 + 1e-9).all()  # a success finished within the client's timeout
    assert pred.means()["e2e_s"] <= 40.0
    assert "timed out" in served_line(row)
    # the same run without the timeout serves everything, slower
    patient = predict_run(make_run(tmp_path, request_timeout=1e6, rate=40.0, duration=10.0),
                          gpu_model="roofline", host="prior")
    assert served_row(patient)["predicted_timed_out"] == 0
    assert patient.means()["e2e_s"] > pred.means()["e2e_s"]


def test_requests_the_simulated_engine_rejects_are_said_with_the_commonest_reason(tmp_path):
    """A run folder whose KV pool cannot hold a request (num_gpu_blocks too small) has its requests
    rejected in the simulation: served.csv counts them, and the CLI line says how many and why."""
    from fidelity_helpers import make_measured_run

    from fidelity.sources.vllm_server import load_server_run

    folder = make_measured_run(tmp_path / "run", n=12, seed=0)
    exp = folder / "exp-config.yaml"
    exp.write_text(exp.read_text() + "num_gpu_blocks: 4\n")
    row = served_row(predict_run(load_server_run(folder), gpu_model="roofline", host="prior"))
    assert row["predicted_rejected"] == 12 and "KV blocks" in row["predicted_reject_reason"]
    assert served_line(row).startswith("run: predicted 12 rejected of 12 (most: needs ")
    fine = served_row(predict_run(load_server_run(make_measured_run(tmp_path / "ok", n=12)), gpu_model="roofline",
                                  host="prior"))
    assert fine["predicted_rejected"] == 0 and fine["predicted_reject_reason"] == "" and served_line(fine) is None

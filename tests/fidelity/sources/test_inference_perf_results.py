"""What an inference-perf run leaves: per-request and summary metrics read with the client's own
definitions, and what its shared_prefix profile says of the measured requests."""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from fidelity_helpers import ISSUE_PROFILE

from fidelity.sources.inference_perf import SharedPrefixWorkload
from fidelity.sources.inference_perf_profile import SharedPrefixProfile
from fidelity.sources.inference_perf_results import (prefix_from_shared_prefix, read_inference_perf_requests,
                                                     read_summary_means, requested_output_mean)
from policies import ConfigError


def streamed(start: float, ttft: float, n_out: int, tpot: float, n_in: int = 100, chunks_per_token: int = 1) -> dict:
    """A per-request entry without computed_metrics: `info` stamps, `chunks_per_token` stamps per token."""
    times = [start + ttft + tpot * (i // chunks_per_token) for i in range(n_out * chunks_per_token)]
    return {"start_time": start, "end_time": times[-1] + 0.001, "error": None,
            "info": {"request_metrics": {"text": {"input_tokens": n_in}},
                     "response_metrics": {"output_tokens": n_out, "output_token_times": times}}}


def write(tmp_path, name: str, data) -> object:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_per_request_tpot_is_per_token_however_many_chunks_a_token_took(tmp_path):
    entries = [streamed(10.0, 0.2, 11, 0.05), streamed(11.0, 0.3, 21, 0.04, chunks_per_token=2),
               {"start_time": 12.0, "end_time": 12.5, "error": "timeout"}]  # a failure: not a success
    df = read_inference_perf_requests(write(tmp_path, "per_request_lifecycle_metrics.json", entries))
    assert len(df) == 2 and list(df.arrival_time) == [0.0, 1.0]
    assert df.ttft_s.tolist() == pytest.approx([0.2, 0.3])
    # first to last stamp over (tokens - 1): 10 gaps of 50 ms; 21 tokens in 42 stamps span 20 gaps of
    # 40 ms, divided by the 20 token gaps, not by the 41 chunk gaps
    assert df.tpot_s.tolist() == pytest.approx([0.05, 0.04])
    assert df.num_output_tokens.tolist() == [11, 21] and df.num_prompt_tokens.tolist() == [100, 100]


def test_computed_metrics_give_tpot_from_the_means_of_a_request(tmp_path):
    entry = {"start_time": 5.0, "end_time": 7.0, "error": None,
             "computed_metrics": {"input_tokens": 64, "output_tokens": 21, "time_to_first_token": 0.4,
                                  "request_latency": 2.0, "time_per_output_token": 0.5}}  # per chunk: ignored
    df = read_inference_perf_requests(write(tmp_path, "r.json", [entry]))
    assert df.tpot_s.iloc[0] == pytest.approx((2.0 - 0.4) / 20)


def test_a_file_without_successes_names_itself(tmp_path):
    path = write(tmp_path, "r.json", [{"start_time": 1.0, "end_time": 2.0, "error": "refused"}])
    with pytest.raises(ValueError, match="r.json"):
        read_inference_perf_requests(path)
    with pytest.raises(ValueError, match="JSON list"):
        read_inference_perf_requests(write(tmp_path, "d.json", {"a": 1}))


@pytest.mark.parametrize("text", ["", "[{\"start_time\": 1.0, \"end_"])
def test_an_empty_or_truncated_file_names_itself(tmp_path, text):
    for name, read in (("per_request_lifecycle_metrics.json", read_inference_perf_requests),
                       ("stage_0_lifecycle_metrics.json", read_summary_means)):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError, match=f": {path} is not valid JSON"):
            read(path)


def test_a_negative_latency_names_the_file_and_row(tmp_path):
    entries = [streamed(10.0, 0.2, 11, 0.05), streamed(11.0, -0.3, 11, 0.05)]  # a first token before the send
    path = write(tmp_path, "per_request_lifecycle_metrics.json", entries)
    with pytest.raises(ConfigError, match=f"^{path}: row 2: ttft_s: a latency cannot be negative"):
        read_inference_perf_requests(path)


def _damaged(entry: dict, fix) -> dict:
    fix(entry)
    return entry


@pytest.mark.parametrize("entry, says", [
    ({"end_time": 2.0, "error": None, "computed_metrics": {"input_tokens": 5, "output_tokens": 3,
                                                          "request_latency": 1.0}}, "entry 2 has no 'start_time'"),
    ({"start_time": 1.0, "end_time": 2.0, "error": None, "computed_metrics": {"input_tokens": 5}},
     "entry 2 has no 'output_tokens'"),
    (_damaged(streamed(11.0, 0.3, 11, 0.05), lambda e: e["info"]["response_metrics"].update(output_tokens="ten")),
     "entry 2: expected objects of numbers"),
    ({"start_time": 1.0, "end_time": 2.0, "error": None, "info": ["not", "an", "object"]},
     "entry 2: expected objects of numbers"),
], ids=["no-start-time", "computed-without-output", "text-count", "info-a-list"])
def test_a_damaged_entry_names_the_file_and_entry(tmp_path, entry, says):
    path = write(tmp_path, "per_request_lifecycle_metrics.json", [streamed(10.0, 0.2, 11, 0.05), entry])
    with pytest.raises(ConfigError, match=f"^{path}: {says}"):
        read_inference_perf_requests(path)


def summary(ttft: float, e2e: float, n_out: float, ok: int = 90, failed: int = 10) -> dict:
    lat = {"time_to_first_token": {"mean": ttft}, "request_latency": {"mean": e2e},
           "time_per_output_token": {"mean": 123.0}}  # per chunk: never read
    return {"successes": {"count": ok, "latency": lat, "output_len": {"mean": n_out}}, "failures": {"count": failed}}


def test_summary_tpot_is_per_requested_token_under_ignore_eos(tmp_path):
    path = write(tmp_path, "summary_lifecycle_metrics.json", summary(0.5, 10.5, 81.0))
    means = read_summary_means(path)
    assert means["tpot_s"] == pytest.approx(10.0 / 80)  # the client's own count of the output
    # under ignore_eos the server generated what was asked, whatever the re-tokenized count says
    assert read_summary_means(path, requested_output=101.0)["tpot_s"] == pytest.approx(10.0 / 100)
    assert (means["num_successes"], means["num_failures"]) == (90.0, 10.0)


def test_summary_without_a_ttft_has_no_tpot(tmp_path):
    data = summary(0.5, 10.5, 81.0)
    del data["successes"]["latency"]["time_to_first_token"]
    means = read_summary_means(write(tmp_path, "s.json", data))
    assert math.isnan(means["tpot_s"]) and "ttft_s" not in means and means["e2e_s"] == 10.5


def test_requested_output_is_the_generators_mean_only_under_ignore_eos():
    profile = copy.deepcopy(ISSUE_PROFILE)
    expected = np.mean([max(1, o) for *_, o in SharedPrefixWorkload(SharedPrefixProfile.from_dict(profile)).prompts])
    assert requested_output_mean(profile) == pytest.approx(expected)
    profile["server"]["ignore_eos"] = False
    assert requested_output_mean(profile) is None
    assert requested_output_mean({"data": {"type": "random"}}) is None


def test_single_turn_requests_are_dealt_their_groups_system_prompt():
    import pandas as pd

    profile = copy.deepcopy(ISSUE_PROFILE)
    profile["data"]["shared_prefix"]["enable_multi_turn_chat"] = False
    requests = pd.DataFrame({"num_prompt_tokens": [620, 50, 700, 630, 90, 610, 640, 660, 600, 615]})
    out = prefix_from_shared_prefix(requests, profile)
    groups = SharedPrefixProfile.from_dict(profile).num_groups
    assert out.prefix_group.tolist() == [i % groups for i in range(10)]
    # the system prompt (120 tokens) at most, and never the whole prompt
    assert out.num_prefix_tokens.tolist() == [min(120, n - 1) for n in requests.num_prompt_tokens]
    assert "prefix_group" not in requests  # the caller's table is left as it was
    profile["data"]["shared_prefix"]["enable_multi_turn_chat"] = True  # a chat: its turns carry more
    assert prefix_from_shared_prefix(requests, profile) is requests

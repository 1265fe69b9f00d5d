"""Vidur's length tables as `trace_format = "vidur"`: detection, lengths, and no arrivals to replay."""
from __future__ import annotations

import numpy as np
import pytest

from policies import ConfigError
from fidelity.sources import vidur  # noqa: F401  (registers the format)
from sim.workload import WorkloadConfig, build_workload
from sim.workload.traces import read_trace


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def make_workload(max_model_len=4096, **overrides):
    return build_workload(WorkloadConfig(**overrides), max_model_len)


def test_vidur_length_table(tmp_path):
    p = write(tmp_path, "lens.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n3772,54,3826,69.8\n"
                                    "2015,156,2171,12.9\n")
    tr = read_trace(p)
    assert tr.format == "vidur" and tr.prompt_tokens.tolist() == [3772, 2015] and tr.output_tokens.tolist() == [54, 156]


def test_real_arxiv_length_table(shared_data):
    tr = read_trace(shared_data / "traces/arxiv-summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
    assert tr.format == "vidur" and len(tr) == 28_257
    assert np.median(tr.prompt_tokens) > 1000  # "long-prompt length distribution"


def test_length_table_gives_lengths_not_arrivals(tmp_path):
    p = tmp_path / "lens.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n100,5\n200,6\n")
    reqs = make_workload(kind="constant", rate=2.0, num_requests=3, trace=str(p)).start()
    assert [(r.num_prompt_tokens, r.max_tokens) for r in reqs] == [(100, 5), (200, 6), (100, 5)]
    with pytest.raises(ConfigError, match=r"^workload\.kind: .*without arrival times"):
        make_workload(trace=str(p))

"""Trace readers: the three formats, detection, errors naming file and line, and the real traces."""
from __future__ import annotations

import json

import numpy as np
import pytest

from policies import ConfigError
from sim.workload.traces import detect_format, read_trace, write_trace_csv


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:48.0000000,10,1
"""


def test_azure_format_as_published(tmp_path):
    tr = read_trace(write(tmp_path, "azure.csv", AZURE))
    assert tr.format == "azure" and len(tr) == 3
    # sorted by time, first at 0; the out-of-order row lands in the middle
    assert tr.arrival_time == pytest.approx([0.0, 48.0 - 46.68059, 50.995169 - 46.68059])
    assert tr.prompt_tokens.tolist() == [374, 10, 396] and tr.output_tokens.tolist() == [44, 1, 109]


def test_our_csv_with_priority_round_trips(tmp_path):
    p = write_trace_csv(tmp_path / "ours.csv", [5.0, 5.5, 7.25], [100, 200, 300], [10, 20, 30], priority=[1, 0, 2])
    tr = read_trace(p)
    assert tr.format == "csv"
    assert tr.arrival_time.tolist() == [0.0, 0.5, 2.25]
    assert tr.priority.tolist() == [1, 0, 2] and tr.prompt_tokens.tolist() == [100, 200, 300]


def test_a_csv_saved_by_excel_with_a_byte_order_mark_reads_like_any_other(tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM, which glued itself to the first column's name."""
    p = tmp_path / "excel.csv"
    p.write_bytes(b"\xef\xbb\xbfarrival_time,prompt_tokens,output_tokens\r\n0.0,100,10\r\n0.5,200,20\r\n")
    assert detect_format(p) == "csv"
    tr = read_trace(p)
    assert tr.arrival_time.tolist() == [0.0, 0.5] and tr.prompt_tokens.tolist() == [100, 200]
    azure = tmp_path / "azure.csv"
    azure.write_bytes(b"\xef\xbb\xbf" + AZURE.encode())
    assert read_trace(azure, "azure").prompt_tokens.tolist() == [374, 10, 396]  # a named format too


def test_mooncake_jsonl(tmp_path):
    lines = [dict(timestamp=0, input_length=600, output_length=5, hash_ids=[0, 1]),
             dict(timestamp=1500, input_length=100, output_length=7, hash_ids=[0])]
    p = write(tmp_path, "mc.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    tr = read_trace(p)
    assert tr.format == "mooncake"
    assert tr.arrival_time.tolist() == [0.0, 1.5]
    assert tr.hash_ids == ((0, 1), (0,))


@pytest.mark.parametrize("name, text, match", [
    ("empty.csv", "", r"empty"),
    ("header_only.csv", "arrival_time,prompt_tokens,output_tokens\n", r"has no requests"),
    ("bad_number.csv", "arrival_time,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n", r"bad_number\.csv:3: prompt_tokens"),
    ("short_row.csv", "arrival_time,prompt_tokens,output_tokens\n0,10\n", r"short_row\.csv:2: expected 3 columns"),
    ("neg.csv", "arrival_time,prompt_tokens,output_tokens\n-1,10,5\n", r"neg\.csv:2: arrival_time"),
    ("zero.csv", "arrival_time,prompt_tokens,output_tokens\n0,0,5\n", r"zero\.csv:2: prompt_tokens must be >= 1"),
    ("azure_bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", r"azure_bad\.csv:2: TIMESTAMP"),
    ("unknown.csv", "a,b,c\n1,2,3\n", r"cannot tell the format"),
    ("bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{oops\n', r"bad\.jsonl line 2 is not valid JSON"),
    ("missing.jsonl", '{"timestamp": 0, "output_length": 1}\n', r"missing\.jsonl:1: missing key 'input_length'"),
    ("few_hashes.jsonl", '{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1]}\n',
     r"few_hashes\.jsonl:1: 1 hash_ids cover 512 tokens"),
    ("nan.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                  '{"timestamp": NaN, "input_length": 5, "output_length": 1}\n', r"nan\.jsonl:2: timestamp must be"),
    ("inf.jsonl", '{"timestamp": Infinity, "input_length": 5, "output_length": 1}\n', r"inf\.jsonl:1: timestamp must be"),
    ("frac.jsonl", '{"timestamp": 0, "input_length": 10.7, "output_length": 1}\n',
     r"frac\.jsonl:1: input_length must be an integer, got 10.7"),
    ("inf_len.jsonl", '{"timestamp": 0, "input_length": Infinity, "output_length": 1}\n',
     r"inf_len\.jsonl:1: input_length must be an integer"),
])
def test_malformed_traces_name_file_and_line(tmp_path, name, text, match):
    p = write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=r"^workload\.trace: .*" + match):
        read_trace(p)


def test_a_file_not_in_utf8_is_refused_naming_it(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes("arrival_time,prompt_tokens,output_tokens\n0,10,5\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=rf"^workload\.trace: {p} is not UTF-8 text .*save it as UTF-8"):
        read_trace(p)


def test_explicit_format_overrides_detection(tmp_path):
    p = write(tmp_path, "trace.txt", AZURE)
    assert detect_format(p) == "azure"
    with pytest.raises(ConfigError, match=r"header lacks column\(s\) arrival_time"):
        read_trace(p, "csv")


# --- the real published traces ---------------------------------------------------------------------
def test_real_azure_traces(shared_data):
    base = shared_data / "traces/azure-llm-2023/data"
    conv = read_trace(base / "AzureLLMInferenceTrace_conv.csv")
    code = read_trace(base / "AzureLLMInferenceTrace_code.csv")
    assert (len(conv), len(code)) == (19_366, 8_819)  # row counts stated in the data README
    for tr in (conv, code):
        assert tr.format == "azure"
        assert 0.9 * 3600 < tr.arrival_time[-1] < 1.1 * 3600  # "~1 h" of traffic
        assert np.all(np.diff(tr.arrival_time) >= 0) and tr.prompt_tokens.min() >= 1
    # code prompts are longer and outputs shorter than conversation ones (Splitwise paper, Fig. 3)
    assert np.median(code.prompt_tokens) > np.median(conv.prompt_tokens)
    assert np.median(code.output_tokens) < np.median(conv.output_tokens)


def test_real_mooncake_trace(shared_data):
    tr = read_trace(shared_data / "traces/mooncake/traces/conversation_trace.jsonl")
    assert len(tr) == 12_031
    # their README: average input 12,035 and output 343 tokens
    assert tr.prompt_tokens.mean() == pytest.approx(12_035, rel=0.01)
    assert tr.output_tokens.mean() == pytest.approx(343, rel=0.02)
    assert all(len(h) * 512 >= n for h, n in zip(tr.hash_ids, tr.prompt_tokens))


def test_shipped_example_slices_parse():
    """examples/traces must work without ../shared (formats detected, rows as the README says)."""
    from pathlib import Path

    base = Path(__file__).resolve().parents[3] / "examples" / "traces"
    conv, code, mc = (read_trace(base / f) for f in ("azure_conv_2023_slice.csv", "azure_code_2023_slice.csv",
                                                      "mooncake_conv_slice.jsonl"))
    assert (conv.format, len(conv), code.format, len(code), mc.format, len(mc)) == (
        "azure", 300, "azure", 200, "mooncake", 200)
    assert 60 < conv.arrival_time[-1] < 120

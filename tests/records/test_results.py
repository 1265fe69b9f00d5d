"""The requests/steps tables and the files written beside a run."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from policies import BatchPlan, Request, ScheduledSeq
from records.metrics import summarize
from records.results import (REQUEST_COLUMNS, STEP_COLUMNS, Recorder, pooled_itls, record_step, requests_table,
                         steps_table, write_results)
from records_helpers import make_done_request, make_rejected_request


def test_requests_table_has_the_contract_columns_and_tags():
    a = make_done_request("a", 0.0, [1.0, 2.0], queue_s=0.25, cls="chat")
    table = requests_table([a, make_rejected_request("r", 0.0)], {"a": "r0"})
    assert list(table.columns[:len(REQUEST_COLUMNS)]) == list(REQUEST_COLUMNS)
    assert table.loc[0, "cls"] == "chat"
    assert table.loc[0, "replica"] == "r0"
    assert table.loc[0, "queue_s"] == pytest.approx(0.25)
    assert table.loc[0, "max_itl_s"] == pytest.approx(1.0)


def test_empty_tables_keep_their_columns():
    assert list(requests_table([]).columns) == list(REQUEST_COLUMNS)
    assert list(steps_table([]).columns) == list(STEP_COLUMNS)


class _BM:
    num_gpu_blocks = 100
    num_used_gpu_blocks = 25


class _Sched:
    block_manager = _BM()
    num_waiting, num_running, num_swapped = 3, 2, 1


def test_record_step_splits_prefill_decode_and_padding():
    p = Request(1, 0.0, 50, 4)
    d = Request(2, 0.0, 8, 4)
    pad = Request(3, 0.0, 8, 4)
    plan = BatchPlan(7, (ScheduledSeq(p, 32, 16, False), ScheduledSeq(d, 1, 9, True),
                         ScheduledSeq(pad, 1, 9, False, is_padding=True)), preempted=(4,),
                     swap_out_blocks=((1, 2), (3, 4)))
    rec = record_step(plan, 1.5, 0.02, _Sched(), "x")
    assert (rec.num_prefill_tokens, rec.num_decode_tokens, rec.num_padding_tokens) == (32, 1, 1)
    assert rec.num_prefill_tokens == plan.num_prefill_tokens and rec.num_decode_tokens == plan.num_decode_tokens
    assert (rec.num_seqs, rec.num_swap_out_blocks, rec.num_preempted) == (3, 2, 1)
    assert rec.kv_usage == pytest.approx(0.25)
    assert (rec.num_waiting, rec.num_running, rec.num_swapped, rec.replica) == (3, 2, 1, "x")


def test_recorder_keeps_each_request_once_and_its_last_replica():
    rec = Recorder()
    a = make_done_request("a", 0.0, [1.0])
    rec.add_request(a, "prefill0")
    rec.add_request(a, "decode1")
    assert rec.requests == [a] and rec.replica_of["a"] == "decode1"


def test_write_results_round_trips_through_csv_and_json(tmp_path):
    reqs = [make_done_request(i, i * 0.1, [i * 0.1 + 0.5, i * 0.1 + 0.7]) for i in range(5)]
    reqs.append(make_rejected_request(99, 0.3))
    table = requests_table(reqs)
    steps = steps_table([])
    summary = summarize(table, steps, pooled_itls(reqs))
    out = write_results(tmp_path / "run", table, steps, summary, "[sim]\n", plot=False)
    for name in ("summary.json", "requests.csv", "steps.csv", "config.toml"):
        assert (out / name).is_file()
    back = pd.read_csv(out / "requests.csv")
    assert len(back) == 6 and back["finish_reason"].tolist().count("rejected") == 1
    loaded = json.loads((out / "summary.json").read_text())
    assert loaded["num_requests"] == 6 and loaded["num_rejected"] == 1
    assert loaded["ttft_s"]["mean"] == pytest.approx(0.5)

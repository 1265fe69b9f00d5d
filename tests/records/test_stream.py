"""StreamingRecorder: the streamed tables and summary against the in-memory ones on the same records."""
from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pandas as pd
import pytest

from policies import FinishReason, Request
from records.metrics import SLOConfig, summarize
from records.results import (REQUEST_COLUMNS, StepRecord, pooled_itls, request_columns, request_row, requests_table,
                             steps_table)
from records.stream import StreamingRecorder
from records.table_writer import TableWriter
from records_helpers import make_done_request, make_rejected_request


def make_requests(n: int, seed: int = 0) -> list[Request]:
    """Finished, rejected, aborted and never-scheduled requests with tags and preemptions."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        arrival = float(i) * 0.1
        kind = i % 7
        if kind == 5:
            out.append(make_rejected_request(i, arrival))
            continue
        tokens = list(arrival + 0.05 + np.cumsum(rng.exponential(0.02, int(rng.integers(1, 12)))))
        r = make_done_request(i, arrival, tokens, prompt=int(rng.integers(5, 500)),
                              queue_s=float(rng.exponential(0.01)), cls="chat" if i % 2 else "batch")
        if kind == 3:
            r.preemption_intervals = [(arrival + 0.06, arrival + 0.07)]
            r.num_preemptions = 1
        if kind == 6:  # aborted mid-way: finish reason aborted, no latency metrics
            r = Request(i, arrival, 20, 8, tags={"cls": "chat"})
            r.finish(FinishReason.ABORTED, arrival + 1.0, "the simulation ended")
        out.append(r)
    return out


def make_steps(n: int, seed: int = 0) -> list[StepRecord]:
    rng = np.random.default_rng(seed)
    t, steps = 0.0, []
    for i in range(n):
        d = float(rng.exponential(0.02)) + 1e-4
        used = int(rng.integers(0, 100))
        steps.append(StepRecord(i, t, d, int(rng.integers(0, 512)), int(rng.integers(0, 64)), 0, 3, 0, 0, 0, used,
                                used / 100, int(rng.integers(0, 9)), int(rng.integers(0, 64)), 0, str(i % 3)))
        t += d
    return steps


def stream(requests, steps, tmp_path=None, slo=None, **kwargs) -> StreamingRecorder:
    rec = StreamingRecorder(tmp_path, slo=slo, **kwargs)
    for r in requests:
        rec.add_request(r, str(r.req_id % 3))
    for i, s in enumerate(steps):
        rec.add_step(s) if i % 2 else rec.add_steps([s])
    for r in requests[: len(requests) // 2]:  # half end through the hook, the rest at close
        rec.on_finish(r, r.finish_time)
    rec.close()
    return rec


def assert_summaries_match(streamed: dict, exact: dict, rel: float = 1e-12) -> None:
    assert streamed.keys() == exact.keys()
    for key, want in exact.items():
        got = streamed[key]
        if isinstance(want, dict):
            assert_summaries_match(got, want, rel)
        elif isinstance(want, float) and not isinstance(want, bool):
            assert got == pytest.approx(want, rel=rel, abs=1e-15) or (math.isnan(got) and math.isnan(want)), key
        else:
            assert got == want, key


def in_memory(requests, steps, slo=None):
    replica_of = {r.req_id: str(r.req_id % 3) for r in requests}
    return requests_table(requests, replica_of), steps_table(steps), \
        summarize(requests_table(requests, replica_of), steps_table(steps), pooled_itls(requests), slo)


def test_request_columns_are_request_rows():
    requests = make_requests(60)
    columns = request_columns(requests, {r.req_id: "x" for r in requests})
    for i, r in enumerate(requests):
        row = request_row(r, "x")
        for key, value in row.items():
            got = columns[key][i]
            got = got.item() if isinstance(got, np.generic) else got
            assert got == value or (isinstance(value, float) and math.isnan(value) and math.isnan(got)), key
    assert list(columns) == list(REQUEST_COLUMNS) + ["cls"]


@pytest.mark.parametrize("batches", [(1, 1), (7, 5), (10_000, 10_000)])
def test_streamed_summary_matches_the_in_memory_one(batches):
    requests, steps = make_requests(300), make_steps(500)
    slo = SLOConfig(ttft_s=0.1, tpot_s=0.03)
    rec = stream(requests, steps, slo=slo, request_batch=batches[0], step_batch=batches[1])
    assert rec.exact
    _, _, want = in_memory(requests, steps, slo)
    assert_summaries_match(rec.summary, want)


def test_past_the_exact_limit_percentiles_are_within_the_stated_error():
    requests, steps = make_requests(700), make_steps(2000)
    rec = stream(requests, steps, request_batch=50, step_batch=64, exact_limit=100, relative_accuracy=1e-3)
    assert not rec.exact and set(rec.sketched_metrics) >= {"itl_s", "step_time_s"}
    _, _, want = in_memory(requests, steps)
    got = rec.summary
    for metric in ("ttft_s", "tpot_s", "e2e_s", "queue_s", "itl_s", "step_time_s"):
        for key in ("p50", "p90", "p99"):
            assert abs(got[metric][key] - want[metric][key]) <= 1e-3 * abs(want[metric][key]) * (1 + 1e-9), metric
        assert got[metric]["max"] == want[metric]["max"]
        assert got[metric]["mean"] == pytest.approx(want[metric]["mean"], rel=1e-12)
    assert got["num_finished"] == want["num_finished"] and got["num_steps"] == want["num_steps"]


@pytest.mark.parametrize("parquet", [True, False])
def test_streamed_tables_read_back_as_the_in_memory_tables(tmp_path, parquet):
    if parquet:
        pytest.importorskip("pyarrow")
    requests, steps = make_requests(120), make_steps(300)
    stream(requests, steps, tmp_path, request_batch=16, step_batch=50, parquet=parquet)
    want_requests, want_steps, _ = in_memory(requests, steps)
    csv_requests = pd.read_csv(tmp_path / "requests.csv").sort_values("req_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(csv_requests, _csv_roundtrip(want_requests), check_dtype=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "steps.csv"), _csv_roundtrip(want_steps), check_dtype=False)
    if parquet:
        got = pd.read_parquet(tmp_path / "requests.parquet").sort_values("req_id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want_requests, check_dtype=False)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "steps.parquet"), want_steps)
    else:
        assert not (tmp_path / "requests.parquet").exists()


def _csv_roundtrip(df: pd.DataFrame) -> pd.DataFrame:
    import io

    return pd.read_csv(io.StringIO(df.to_csv(index=False)))


def test_a_run_without_rows_writes_headers(tmp_path):
    rec = StreamingRecorder(tmp_path)
    summary = rec.close()
    assert summary["num_requests"] == 0 and summary["ttft_s"] is None
    assert pd.read_csv(tmp_path / "requests.csv").columns[0] == "req_id"
    assert len(pd.read_csv(tmp_path / "steps.csv")) == 0


def test_live_requests_only_are_held(tmp_path):
    requests = make_requests(50)
    rec = StreamingRecorder(tmp_path, request_batch=4)
    held = []
    for r in requests:
        rec.add_request(r, "0")
        rec.on_finish(r, r.finish_time)
        held.append(len(rec.requests) + len(rec._ended))
    assert max(held) <= 4
    assert rec.replica_of.keys() <= {r.req_id for r in rec.requests} | {r.req_id for r, _ in rec._ended}
    assert rec.close()["num_requests"] == 50


def test_a_column_first_seen_late_is_reported_not_silently_dropped(tmp_path, capsys):
    w = TableWriter(tmp_path, "t", parquet=False)
    w.write({"a": [1, 2]})
    w.write({"a": [3], "b": ["x"]})
    w.close()
    assert "column 'b'" in capsys.readouterr().err
    assert pd.read_csv(tmp_path / "t.csv")["a"].tolist() == [1, 2, 3]


def test_summary_json_of_a_streamed_record_is_valid_json(tmp_path):
    rec = stream(make_requests(30), make_steps(30))
    json.loads(json.dumps(rec.summary))


def test_the_summary_does_not_depend_on_how_the_steps_came():
    """Steps added one by one, in runs of any length or as fast-path rows give the same batches, so
    the same summary to the last bit (its sums are taken batch by batch)."""
    rng = np.random.default_rng(5)
    n = 1000
    rows = [(i, 0.01 * i, float(rng.exponential(0.02)), int(rng.integers(0, 512)), int(rng.integers(0, 64)),
             int(rng.integers(1, 65)), int(rng.integers(0, 900)), float(rng.random()), int(rng.integers(0, 9)),
             int(rng.integers(1, 65)), "0") for i in range(n)]
    records = [StepRecord(r[0], r[1], r[2], r[3], r[4], 0, r[5], 0, 0, 0, r[6], r[7], r[8], r[9], 0, r[10])
               for r in rows]
    summaries = []
    for way in ("one", "runs", "rows"):
        rec = StreamingRecorder(step_batch=64)
        rec.add_request(make_done_request(0, 0.0, [0.5, 0.6]))
        if way == "one":
            for r in records:
                rec.add_step(r)
        elif way == "runs":
            i = 0
            while i < n:
                k = int(rng.integers(1, 200))
                rec.add_steps(records[i:i + k])
                i += k
        else:
            rec.add_step_rows(rows[:500])
            rec.add_step_rows(rows[500:])
        summaries.append(json.dumps(rec.close(), sort_keys=True, default=str))
    assert summaries[0] == summaries[1] == summaries[2]


@pytest.mark.parametrize("parquet", [True, False])
def test_a_snapshot_is_the_in_memory_tables_at_that_moment(tmp_path, parquet):
    """A spooled recorder's snapshot, with requests still live and steps still buffered, writes the
    tables and summary the in-memory ones have at that moment (rows in the order requests ended),
    and the recording goes on as if it had not been taken."""
    if parquet:
        pytest.importorskip("pyarrow")
    requests, steps = make_requests(120), make_steps(300)

    def record(folder, snapshot_to=None):
        live = [Request(1000 + i, 20.0, 10, 5) for i in range(3)]  # admitted, no token yet: unfinished rows
        rec = StreamingRecorder(folder, request_batch=16, step_batch=50, parquet=parquet, spool=True, plot=True)
        for r in requests + live:
            rec.add_request(r, str(r.req_id % 3))
        rec.add_steps(steps[:170])
        for r in requests[:70]:
            rec.on_finish(r, r.finish_time)
        if snapshot_to is not None:
            snapshot = rec.snapshot()
            assert len(rec._ended) == 70 % 16 and len(rec.steps) == 170 % 50  # what it copied stays
            rec.add_steps(steps[170:])  # writing goes on before the snapshot is written
            snapshot.write(snapshot_to)
        else:
            rec.add_steps(steps[170:])
        for r in live:
            r.finish(FinishReason.ABORTED, 21.0)
            rec.on_finish(r, 21.0)
        return rec.close(), live

    summary, live = record(tmp_path / "spool", tmp_path / "dump")
    assert summary == record(tmp_path / "spool2")[0]  # to the last bit: as if no snapshot was taken
    for r in live:  # as they were at the snapshot
        r.finish_reason = r.finish_time = None
    want_requests, want_steps, want_summary = in_memory(requests + live, steps[:170])
    got = pd.read_csv(tmp_path / "dump" / "requests.csv")
    assert got["req_id"].tolist()[:64] == [r.req_id for r in requests[:64]]  # the batches written, in end order
    pd.testing.assert_frame_equal(got.sort_values("req_id").reset_index(drop=True), _csv_roundtrip(want_requests),
                                  check_dtype=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "dump" / "steps.csv"), _csv_roundtrip(want_steps),
                                  check_dtype=False)
    if parquet:
        got = pd.read_parquet(tmp_path / "dump" / "requests.parquet").sort_values("req_id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want_requests, check_dtype=False)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "dump" / "steps.parquet"), want_steps)
    got_summary = json.loads((tmp_path / "dump" / "summary.json").read_text())
    assert_summaries_match(got_summary, json.loads(json.dumps(want_summary)))
    assert got_summary["num_unfinished"] == 3
    assert (tmp_path / "dump" / "timeline.png").exists() == (importlib.util.find_spec("matplotlib") is not None)


def test_a_snapshot_copies_no_exact_value_and_leaves_the_summary_to_write(tmp_path):
    """`snapshot()` runs under the engine's lock, between two steps: it neither copies the summary's
    exact values (up to 4,194,304 a metric) nor sorts them for percentiles
    (docs/results/2026-12-08-serve-shutdown-and-memory.md); `write` does the latter, after the lock."""
    import tracemalloc

    rec = StreamingRecorder(tmp_path / "spool", spool=True)
    for _ in range(20):
        rec.running.sketches["itl_s"].add(np.random.default_rng(3).random(25_600))  # 4 MB of gaps
    tracemalloc.start()
    try:
        snapshot = rec.snapshot()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    assert snapshot.summary["itl_s"] == rec.running.summary()["itl_s"]

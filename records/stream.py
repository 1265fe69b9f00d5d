"""`StreamingRecorder`: a `Recorder` whose finished requests and steps leave memory as the run goes.

The in-memory `records.results.Recorder` keeps every request and step until the run ends, so its
memory grows with the run (docs/results/2026-12-01-speed.md). This one keeps only what is live:
a request from its submit to its end, then in a batch of finished ones; steps in a buffer of
`step_batch`. Each full batch becomes table columns (`request_columns` / `steps_columns`, the
values of the in-memory tables), goes to the `RunningSummary` and, with an `out_dir`, to
requests.csv/.parquet and steps.csv/.parquet (`TableWriter`), and is dropped. `close()` writes
what is left and returns the summary (`records.metrics.summarize`'s dict; see RunningSummary for
how it compares).

It has the Recorder's interface (`add_request`, `add_step`, `add_steps`, `steps`, `replica_of`,
`requests`: here the live requests only), plus `on_finish(request, now)`, which the runner
registers as a finish hook after every other hook (so a request's times are final when its row
is built). Rows come in the order requests ended, not in submission order.

With `spool=True` (a server, which runs until stopped and is asked for its tables at any time)
`out_dir` is a working folder of `records.table_spool.TableSpool` segments, and `snapshot()`
freezes everything recorded so far (the requests still live as unfinished rows, as an in-memory
table shows them) into a `RecordsSnapshot`, whose `write(dir)` makes the tables, summary.json and
timeline.png of `records.results.write_results`, while the recording goes on unchanged.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from records.files import write_summary
from records.results import (REQUEST_COLUMNS, STEP_COLUMNS, plot_timeline, request_columns_and_itls,
                             steps_columns)
from records.running_summary import RunningSummary
from records.sketch import DEFAULT_EXACT_LIMIT, DEFAULT_RELATIVE_ACCURACY
from records.table_spool import TableSpool, copy_table
from records.table_writer import TableWriter

if TYPE_CHECKING:
    from policies import Request
    from records.metrics import SLOConfig
    from records.results import StepRecord

REQUEST_BATCH = 8192
STEP_BATCH = 65536
PLOT_POINTS = 8192  # steps kept for timeline.png (every k-th, k doubling as the run grows)
_PLOT_COLUMNS = ("start", "kv_usage", "num_waiting", "num_running", "num_prefill_tokens", "num_decode_tokens")


class StreamingRecorder:
    """Records a run into running aggregates and (with `out_dir`) table files, batch by batch."""

    def __init__(self, out_dir: str | Path | None = None, slo: "SLOConfig | None" = None,
                 request_batch: int = REQUEST_BATCH, step_batch: int = STEP_BATCH, plot: bool = False,
                 parquet: bool | None = None, exact_limit: int = DEFAULT_EXACT_LIMIT,
                 relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY, step_meters: tuple = (),
                 spool: bool = False) -> None:
        if spool and out_dir is None:
            raise ValueError("StreamingRecorder: spool=True needs an out_dir (its working folder)")
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.spool = spool
        self.running = RunningSummary(slo, exact_limit, relative_accuracy)
        self.request_batch = max(int(request_batch), 1)
        self.step_batch = max(int(step_batch), 1)
        # the buffer (StepRecords, and rows from the fast path); disaggregated pools append to it directly
        self.steps: list = []
        self.replica_of: dict = {}  # live requests only
        self._live: dict = {}  # req_id -> (request, submission number)
        self._ended: list[tuple["Request", int]] = []
        # more aggregates fed every step batch: `add_steps(columns)`, `summary(span_s, output_tokens)`
        self.step_meters = tuple(step_meters)
        self.num_requests = 0
        self.next_order: int | None = None  # the next request's submission number, when the runner knows it
        self._writers = None
        if self.out_dir is not None:
            table = TableSpool if spool else TableWriter
            self._writers = (table(self.out_dir, "requests", parquet), table(self.out_dir, "steps", parquet))
        self._plot = {c: [] for c in _PLOT_COLUMNS + ("replica",)} if plot else None
        self._plot_stride, self._num_steps_seen = 1, 0
        self.summary: dict | None = None

    # --- the Recorder interface -------------------------------------------------------------------
    @property
    def requests(self) -> list["Request"]:
        """The requests submitted and not yet written out (live, or ended since the last batch)."""
        return [r for r, _ in self._live.values()]

    def add_request(self, request: "Request", replica: str | None = None) -> None:
        if request.req_id not in self._live:
            order = self.num_requests if self.next_order is None else self.next_order
            self.next_order = None
            self._live[request.req_id] = (request, order)
            self.num_requests += 1
        if replica is not None:
            self.replica_of[request.req_id] = replica

    def add_step(self, record: "StepRecord") -> None:
        steps = self.steps
        steps.append(record)
        if len(steps) >= self.step_batch:
            self._flush_steps()

    def add_steps(self, records: list["StepRecord"]) -> None:
        self.steps.extend(records)
        if len(self.steps) >= self.step_batch:
            self._flush_steps()

    def add_step_rows(self, rows: list[tuple]) -> None:
        """Steps as rows of values in `STEP_COLUMNS` order (kept as rows: no StepRecord built)."""
        self.steps.extend(rows)
        if len(self.steps) >= self.step_batch:
            self._flush_steps()

    def on_finish(self, request: "Request", now: float) -> None:
        """A finish hook: the request has ended; it is written with the next batch."""
        entry = self._live.pop(request.req_id, None)
        if entry is None:
            return  # written already, or never recorded
        self._ended.append(entry)
        if len(self._ended) >= self.request_batch:
            self._flush_requests(self._ended)
            self._ended = []
        if len(self.steps) >= self.step_batch:  # steps appended straight to the list (disaggregation)
            self._flush_steps()

    # --- batches ----------------------------------------------------------------------------------
    def _flush_requests(self, entries: list[tuple["Request", int]]) -> None:
        if not entries:
            return
        requests = [r for r, _ in entries]
        replica_of = self.replica_of
        columns, itls = request_columns_and_itls(requests, replica_of)
        for r in requests:
            replica_of.pop(r.req_id, None)
        order = np.fromiter((k for _, k in entries), dtype=np.int64, count=len(entries))
        self.running.add_requests(columns, itls, order)
        if self._writers is not None:
            self._writers[0].write(columns)

    def _flush_steps(self, final: bool = False) -> None:
        """Take the buffered steps in batches of exactly `step_batch` rows (the rest waits for the next
        call, unless `final`), so that the batches, and the float sums the summary takes batch by
        batch, depend on the steps alone, not on how many came at once."""
        steps, size = self.steps, self.step_batch
        start = 0
        while len(steps) - start >= size:
            self._step_batch(steps[start:start + size])
            start += size
        if final and start < len(steps):
            self._step_batch(steps[start:])
            start = len(steps)
        del steps[:start]  # in place: disaggregated pools hold this list

    def _step_batch(self, steps: list) -> None:
        columns = steps_columns(steps)
        self.running.add_steps(columns)
        for meter in self.step_meters:
            meter.add_steps(columns)
        if self._writers is not None:
            self._writers[1].write(columns)
        if self._plot is not None:
            self._sample(columns)

    def _sample(self, columns: dict) -> None:
        n = len(columns["start"])
        first = (-self._num_steps_seen) % self._plot_stride
        self._num_steps_seen += n
        keep = np.arange(first, n, self._plot_stride)
        for c in self._plot:
            values = columns[c]
            self._plot[c].extend(np.asarray(values)[keep].tolist() if c != "replica" else [values[i] for i in keep])
        if len(self._plot["start"]) > 2 * PLOT_POINTS:
            for c in self._plot:
                self._plot[c] = self._plot[c][::2]
            self._plot_stride *= 2

    # --- a copy while the run goes on (spool=True) ------------------------------------------------
    def snapshot(self) -> "RecordsSnapshot":
        """Everything recorded so far, frozen (call it between steps, under the caller's lock; it
        copies only what is in memory): the rows written, then those of the requests ended since the
        last batch and of those still live (in submission order: unfinished, as the in-memory
        `requests_table` shows them now), and the buffered steps, with the summary of them all
        (without the step meters'). The recorder goes on as if it had not been called."""
        if not self.spool:
            raise ValueError("snapshot: the recorder was made without spool=True")
        # a view of this recorder with aggregates of its own: the rows still in memory go into those
        view = copy.copy(self)
        view.running = copy.deepcopy(self.running)
        entries = self._ended + list(self._live.values())
        requests = steps = None
        if entries:
            requests, itls = request_columns_and_itls([r for r, _ in entries], self.replica_of)
            view.running.add_requests(requests, itls, np.fromiter((k for _, k in entries), np.int64, len(entries)))
        if self.steps:
            steps = steps_columns(list(self.steps))
            view.running.add_steps(steps)
        if self._plot is not None:
            view._plot = {c: list(values) for c, values in self._plot.items()}
            if steps is not None:
                view._sample(steps)
        # the summary itself is computed by `RecordsSnapshot.write`, after the caller's lock is released:
        # its percentiles sort up to 4,194,304 values a metric
        return RecordsSnapshot(self._writers[0].seal(), self._writers[1].seal(), requests, steps,
                               view.running, view if self._plot is not None else None,
                               self._writers[0].parquet)

    # --- the end ----------------------------------------------------------------------------------
    def close(self) -> dict:
        """Write what is left (ended or still live requests, buffered steps), close the files and
        return the summary (also kept as `self.summary`)."""
        if self.summary is not None:
            return self.summary
        self._flush_requests(self._ended + list(self._live.values()))
        self._ended, self._live = [], {}
        self._flush_steps(final=True)
        if self._writers is not None:
            self._writers[0].close({c: [] for c in REQUEST_COLUMNS})
            self._writers[1].close({c: [] for c in STEP_COLUMNS})
        self.summary = self.running.summary()
        return self.summary

    @property
    def exact(self) -> bool:
        """True while every percentile of the summary is exact (see records.sketch)."""
        return self.running.exact

    @property
    def sketched_metrics(self) -> list[str]:
        """The summary's metrics whose percentiles come from a sketch (more values than its exact limit)."""
        return [name for name, s in self.running.sketches.items() if not s.exact]

    @property
    def wants_plot(self) -> bool:
        return self._plot is not None

    def plot(self, path: str | Path) -> Path | None:
        """timeline.png from the sampled steps and the latency values (needs plot=True, matplotlib)."""
        if self._plot is None:
            raise ValueError("plot: the recorder was made without plot=True")
        import pandas as pd

        steps = pd.DataFrame(self._plot)
        latency = {}
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            sketch = self.running.sketches[name]
            if sketch.exact:
                latency[name] = pd.Series(sketch.values())
            else:  # the CDF through 1,000 of its percentiles
                latency[name] = pd.Series([sketch.percentile(p) for p in np.linspace(0, 100, 1001)])
        return plot_timeline(steps, pd.DataFrame(latency), path)


class RecordsSnapshot:
    """What a spooled `StreamingRecorder` had recorded at one moment: closed table segments, the rows
    that were still in memory, the summary, and (with plot=True) the timeline's samples."""

    def __init__(self, request_segments: tuple, step_segments: tuple, requests: dict | None, steps: dict | None,
                 running: RunningSummary, view: StreamingRecorder | None, parquet: bool | None = None) -> None:
        self.request_segments, self.step_segments = request_segments, step_segments
        self.parquet = parquet
        self.requests, self.steps = requests, steps
        self.running = running  # the summary's aggregates at the snapshot (a copy: recording goes on)
        self._summary: dict | None = None
        self._view = view

    @property
    def summary(self) -> dict:
        """The summary at the snapshot (computed at the first call, outside the recorder's lock)."""
        if self._summary is None:
            self._summary = self.running.summary()
        return self._summary

    def write(self, out_dir: str | Path, config_toml: str | None = None, plot: bool = True) -> Path:
        """Write summary.json, requests.csv, steps.csv (+ config.toml, the Parquet copies with pyarrow,
        timeline.png with matplotlib), as `records.results.write_results` does; safe while the
        recorder goes on (it reads closed segment files only)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_summary(out / "summary.json", self.summary)
        copy_table(self.request_segments, out, "requests", self.requests, {c: [] for c in REQUEST_COLUMNS},
                   self.parquet)
        copy_table(self.step_segments, out, "steps", self.steps, {c: [] for c in STEP_COLUMNS}, self.parquet)
        if config_toml is not None:
            (out / "config.toml").write_text(config_toml)
        if plot and self._view is not None:
            self._view.plot(out / "timeline.png")
        return out

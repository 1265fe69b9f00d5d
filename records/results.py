"""The two result tables, built from plain `Request` objects and `StepRecord`s (no SimPy needed).

Both worlds write the same artifacts: the simulator's replicas and the torch engine each append one
`StepRecord` per iteration to a `Recorder` and hand it every request they see; `requests_table` and
`steps_table` turn those into DataFrames with the columns docs/architecture.md lists, and
`write_results` saves them beside `summary.json` (see `records.metrics.summarize`).
"""
from __future__ import annotations

import json
import math
from itertools import chain
from dataclasses import MISSING, dataclass, fields
from operator import attrgetter, sub
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

import numpy as np

from policies import FinishReason
from records.files import write_summary

if TYPE_CHECKING:  # pandas on demand: a streamed run (records.stream) never builds a DataFrame
    import pandas as pd

    from policies import BatchPlan, Request

REQUEST_COLUMNS = (
    "req_id", "arrival_time", "first_scheduled_time", "first_token_time", "finish_time",
    "num_prompt_tokens", "num_output_tokens", "max_tokens", "priority", "num_cached_tokens",
    "num_preemptions", "num_swaps", "num_recomputes", "finish_reason", "reject_reason",
    "ttft_s", "e2e_s", "tpot_s", "queue_s", "max_itl_s", "replica", "preemption_intervals",
    "num_cpu_cached_tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
)

# finish reasons of requests that produced their whole answer (the ones latency metrics count)
COMPLETED_REASONS = (FinishReason.LENGTH.value, FinishReason.STOP.value)


@dataclass(slots=True)
class StepRecord:
    """One iteration of one replica: when it ran, what it computed and the state around it.

    Queue lengths and KV usage are read right after `schedule()`, i.e. they describe the step
    while it runs. Padding tokens are the `static` baseline's computed-but-useless tokens. The
    offload columns count the step's copies from and to the KV offload tier, in blocks and in bytes
    over the replica's GPUs (`policies.kv_offload`; 0 without a tier).
    """

    step_id: int
    start: float
    duration: float
    num_prefill_tokens: int
    num_decode_tokens: int
    num_padding_tokens: int
    num_seqs: int
    num_swap_out_blocks: int
    num_swap_in_blocks: int
    num_preempted: int
    num_kv_blocks_used: int
    kv_usage: float
    num_waiting: int
    num_running: int
    num_swapped: int
    replica: str = "0"
    num_offload_load_blocks: int = 0
    num_offload_store_blocks: int = 0
    offload_load_bytes: int = 0
    offload_store_bytes: int = 0
    num_spec_tokens: int = 0


STEP_COLUMNS = tuple(f.name for f in fields(StepRecord))
_step_row = attrgetter(*STEP_COLUMNS)  # a StepRecord's values as a row, in STEP_COLUMNS order
# a fast-path row (`add_step_rows`): a step with no padding, swap, preemption, swapped request, offload
# copy or draft; these columns, every other one at its StepRecord default (0)
FAST_STEP_COLUMNS = ("step_id", "start", "duration", "num_prefill_tokens", "num_decode_tokens", "num_seqs",
                     "num_kv_blocks_used", "kv_usage", "num_waiting", "num_running", "replica")
_DEFAULTS = {f.name: 0 if f.default is MISSING else f.default  # the counts without a default: 0 there
             for f in fields(StepRecord) if f.name not in FAST_STEP_COLUMNS}
_EXTRA = tuple(_DEFAULTS)
_EXTRA_DEFAULTS = tuple(_DEFAULTS.values())
_fast_of, _extra_of = attrgetter(*FAST_STEP_COLUMNS), attrgetter(*_EXTRA)


def _full_row(row) -> tuple:
    """A StepRecord, or a fast-path row, as a row of every column in STEP_COLUMNS order."""
    if row.__class__ is not tuple:
        return _step_row(row)
    values = dict(zip(FAST_STEP_COLUMNS, row))
    return tuple(values[c] if c in values else _DEFAULTS[c] for c in STEP_COLUMNS)


def _as_fast(record: StepRecord) -> tuple | None:
    """A StepRecord as a fast-path row when its other columns are at their defaults, else None."""
    return _fast_of(record) if _extra_of(record) == _EXTRA_DEFAULTS else None


def add_step_rows(recorder, rows: list[tuple]) -> None:
    """Hand `rows` (each a step's values in `FAST_STEP_COLUMNS` order) to `recorder`: as rows where it
    takes them (`add_step_rows`: no StepRecord built), else as StepRecords (`add_steps`)."""
    add = getattr(recorder, "add_step_rows", None)
    if add is not None:
        add(rows)
        return
    records = [StepRecord(*_full_row(row)) for row in rows]
    add_steps = getattr(recorder, "add_steps", None)
    if add_steps is not None:
        add_steps(records)
    else:
        for record in records:
            recorder.add_step(record)


def count_tokens(seqs) -> tuple[int, int, int]:
    """(prefill, decode, padding) tokens of scheduled sequences, as the steps table counts them:
    a one-token chunk after some context is a decode, every other chunk is prefill."""
    num_prefill = num_decode = num_padding = 0
    for _, n, c, _, padding in seqs:  # (request, num_tokens, num_computed, samples, is_padding)
        if padding:
            num_padding += n
        elif n == 1 and c > 0:
            num_decode += 1
        else:
            num_prefill += n
    return num_prefill, num_decode, num_padding


def record_step(plan: "BatchPlan", start: float, duration: float, scheduler, replica: str = "0") -> StepRecord:
    """Build the `StepRecord` of `plan` (one pass over its sequences) and the scheduler's state."""
    t = plan.totals
    bm = scheduler.block_manager
    used = bm.num_used_gpu_blocks
    record = StepRecord(
        plan.step_id, start, duration, t.num_prefill_tokens, t.num_decode_tokens, t.num_padding_tokens, t.num_seqs,
        len(plan.swap_out_blocks), len(plan.swap_in_blocks), len(plan.preempted),
        used, used / bm.num_gpu_blocks,
        scheduler.num_waiting, scheduler.num_running, scheduler.num_swapped, replica,
    )
    if plan.spec_token_ids:
        record.num_spec_tokens = t.num_spec_tokens
    if plan.offload_load_blocks or plan.offload_store_blocks:
        block_bytes = bm.offload.block_bytes
        record.num_offload_load_blocks = n_load = len(plan.offload_load_blocks)
        record.num_offload_store_blocks = n_store = len(plan.offload_store_blocks)
        record.offload_load_bytes = n_load * block_bytes
        record.offload_store_bytes = n_store * block_bytes
    return record


class Recorder:
    """Collects what a run produces: every request submitted (in order) and every step.

    Several replicas may share one recorder; `replica_of` remembers which replica took each
    request (the last one to claim it, e.g. the decode side of a disaggregated pair).
    """

    def __init__(self) -> None:
        self.requests: list["Request"] = []
        self.steps: list[StepRecord] = []
        self.replica_of: dict[int | str, str] = {}
        self._seen: set[int | str] = set()

    @property
    def num_requests(self) -> int:
        """Requests submitted so far (a `records.stream.StreamingRecorder` counts them too)."""
        return len(self.requests)

    def add_request(self, request: "Request", replica: str | None = None) -> None:
        if request.req_id not in self._seen:
            self._seen.add(request.req_id)
            self.requests.append(request)
        if replica is not None:
            self.replica_of[request.req_id] = replica

    def add_step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def add_steps(self, records: list[StepRecord]) -> None:
        """Several steps at once, in order (a replica's decode run)."""
        self.steps.extend(records)

    def add_step_rows(self, rows: list[tuple]) -> None:
        """Several steps as rows of values in `FAST_STEP_COLUMNS` order (the simulator's fast path)."""
        self.steps.extend([StepRecord(*_full_row(row)) for row in rows])


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def request_row(req: "Request", replica: str = "", max_itl: float | None = None) -> dict:
    """One row of the `requests` table (vLLM bench-serve definitions; NaN where undefined).

    `max_itl`: the largest gap between two output tokens when the caller already has it.
    """
    times = req.token_times
    reason = req.finish_reason.value if req.finish_reason is not None else "unfinished"
    completed = reason in COMPLETED_REASONS and len(times) > 0
    ttft = times[0] - req.arrival_time if completed else math.nan
    e2e = times[-1] - req.arrival_time if completed else math.nan
    n = len(times)
    tpot = (e2e - ttft) / (n - 1) if completed and n > 1 else math.nan
    if max_itl is None:
        max_itl = max(map(sub, times[1:], times)) if n > 1 else math.nan  # map: C speed, no generator
    queue = req.first_scheduled_time - req.arrival_time if req.first_scheduled_time is not None else math.nan
    row = {
        "req_id": req.req_id, "arrival_time": req.arrival_time,
        "first_scheduled_time": _nan(req.first_scheduled_time), "first_token_time": _nan(req.first_token_time),
        "finish_time": _nan(req.finish_time), "num_prompt_tokens": req.num_prompt_tokens,
        "num_output_tokens": req.num_output_tokens, "max_tokens": req.max_tokens, "priority": req.priority,
        "num_cached_tokens": req.num_cached_tokens, "num_preemptions": req.num_preemptions,
        "num_swaps": req.num_swaps, "num_recomputes": req.num_recomputes, "finish_reason": reason,
        "reject_reason": req.reject_reason or "", "ttft_s": ttft, "e2e_s": e2e, "tpot_s": tpot,
        "queue_s": queue, "max_itl_s": max_itl, "replica": replica,
        # JSON [[preempted_at, resumed_at], ...]: one cell, so the table stays one row per request
        "preemption_intervals": json.dumps(req.preemption_intervals) if req.preemption_intervals else "[]",
        "num_cpu_cached_tokens": req.num_cpu_cached_tokens,
        # speculative decoding: verify steps that carried drafts, draft tokens verified, accepted
        "num_drafts": req.num_drafts, "num_draft_tokens": req.num_draft_tokens,
        "num_accepted_tokens": req.num_accepted_tokens,
    }
    for key, value in req.tags.items():  # workload labels (class, group, turn...) become columns
        row.setdefault(key, value)
    return row


def request_columns(requests: list["Request"], replica_of: Mapping | None = None) -> dict[str, list | np.ndarray]:
    """The `requests` table's rows of `requests` as columns (arrays where numeric, lists otherwise).

    The values of `request_row`, built column by column for a streamed run's batches; workload tag
    columns follow the fixed ones, in the order first seen, None where a request lacks one.
    """
    return request_columns_and_itls(requests, replica_of)[0]


def request_columns_and_itls(requests: list["Request"], replica_of: Mapping | None = None
                             ) -> tuple[dict[str, list | np.ndarray], np.ndarray]:
    """`request_columns` and `pooled_itls` of the same requests, from one array of all their token
    times (the same float subtractions as each computes on its own)."""
    replica_of = replica_of or {}
    n = len(requests)
    times = [r.token_times for r in requests]
    lengths = np.fromiter(map(len, times), dtype=np.int64, count=n)
    reasons = [r.finish_reason.value if r.finish_reason is not None else "unfinished" for r in requests]
    completed = np.fromiter((x in COMPLETED_REASONS for x in reasons), dtype=bool, count=n) & (lengths > 0)
    arrival = np.fromiter((r.arrival_time for r in requests), dtype=np.float64, count=n)
    ends = np.cumsum(lengths)
    flat = np.fromiter(chain.from_iterable(times), dtype=np.float64, count=int(ends[-1]) if n else 0)
    has = lengths > 0
    first, last = np.full(n, math.nan), np.full(n, math.nan)
    first[has] = flat[(ends - lengths)[has]]
    last[has] = flat[ends[has] - 1]
    # every gap between two consecutive times of one request; the max of each request's, and the
    # pooled ones of the completed requests (max_itls and pooled_itls, without flattening twice)
    gaps = np.diff(flat)
    owner = np.repeat(np.arange(n), lengths)
    internal = owner[1:] == owner[:-1]
    max_itl = np.full(n, math.nan)
    with_gaps = lengths > 1
    if with_gaps.any():
        max_itl[with_gaps] = np.maximum.reduceat(np.where(internal, gaps, -np.inf), (ends - lengths)[with_gaps])
    itls = gaps[internal & (completed & with_gaps)[owner[:-1]]]
    ttft = np.where(completed, first - arrival, math.nan)
    e2e = np.where(completed, last - arrival, math.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(completed & (lengths > 1), (e2e - ttft) / (lengths - 1), math.nan)
    scheduled = np.fromiter((_nan(r.first_scheduled_time) for r in requests), dtype=np.float64, count=n)

    def ints(name: str) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), requests), dtype=np.int64, count=n)

    columns: dict[str, list | np.ndarray] = {
        "req_id": [r.req_id for r in requests], "arrival_time": arrival, "first_scheduled_time": scheduled,
        "first_token_time": np.fromiter((_nan(r.first_token_time) for r in requests), dtype=np.float64, count=n),
        "finish_time": np.fromiter((_nan(r.finish_time) for r in requests), dtype=np.float64, count=n),
        "num_prompt_tokens": ints("num_prompt_tokens"), "num_output_tokens": ints("num_output_tokens"),
        "max_tokens": ints("max_tokens"), "priority": ints("priority"), "num_cached_tokens": ints("num_cached_tokens"),
        "num_preemptions": ints("num_preemptions"), "num_swaps": ints("num_swaps"),
        "num_recomputes": ints("num_recomputes"), "finish_reason": reasons,
        "reject_reason": [r.reject_reason or "" for r in requests], "ttft_s": ttft, "e2e_s": e2e, "tpot_s": tpot,
        "queue_s": scheduled - arrival, "max_itl_s": max_itl,
        "replica": [replica_of.get(r.req_id, "") for r in requests],
        "preemption_intervals": [json.dumps(r.preemption_intervals) if r.preemption_intervals else "[]"
                                 for r in requests],
        "num_cpu_cached_tokens": ints("num_cpu_cached_tokens"),
        "num_drafts": ints("num_drafts"), "num_draft_tokens": ints("num_draft_tokens"),
        "num_accepted_tokens": ints("num_accepted_tokens"),
    }
    tag_keys: dict[str, None] = {}
    for r in requests:
        if r.tags:
            tag_keys.update(dict.fromkeys(r.tags))
    for key in tag_keys:
        if key not in columns:
            columns[key] = [r.tags.get(key) for r in requests]
    return columns, itls


def steps_columns(steps: list) -> dict[str, list | np.ndarray]:
    """The `steps` table's rows of `steps` (StepRecords, or fast-path rows in `FAST_STEP_COLUMNS`
    order, in any mix) as columns: numbers as the int64/float64 arrays pandas would infer from the
    lists, anything else as lists (rows transposed by zip, not dataclasses.astuple, which deep-copies
    every field: far faster than pandas inferring from rows). A batch of fast-path rows alone has
    its other columns at their defaults, as whole arrays."""
    if not steps:
        return {name: np.array([]) for name in STEP_COLUMNS}
    rows = [r if r.__class__ is tuple else _as_fast(r) for r in steps]
    fast = None not in rows
    names = FAST_STEP_COLUMNS if fast else STEP_COLUMNS
    if not fast:
        rows = [_full_row(r) for r in steps]
    got = {}
    for name, column in zip(names, zip(*rows)):
        values = np.array(column)
        got[name] = values if values.dtype.kind in "if" else list(column)
    if not fast:
        return got
    n = len(steps)
    return {name: got[name] if name in got else np.full(n, _DEFAULTS[name], dtype=np.array([_DEFAULTS[name]]).dtype)
            for name in STEP_COLUMNS}


def requests_table(requests: Iterable["Request"], replica_of: Mapping | None = None) -> pd.DataFrame:
    """The `requests` table: one row per request, finished, rejected or aborted."""
    import pandas as pd

    replica_of = replica_of or {}
    requests = requests if isinstance(requests, list) else list(requests)
    rows = [request_row(r, replica_of.get(r.req_id, ""), itl)
            for r, itl in zip(requests, max_itls([r.token_times for r in requests]))]
    if not rows:
        return pd.DataFrame(columns=list(REQUEST_COLUMNS))
    return pd.DataFrame(rows)


def preemption_table(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per preemption (req_id, preempted_at, resumed_at) from the `requests` table's JSON
    `preemption_intervals` column; also for a table read back from CSV, or one without the column."""
    import pandas as pd

    rows = []
    if "preemption_intervals" in requests:
        for req_id, cell in zip(requests["req_id"], requests["preemption_intervals"]):
            if isinstance(cell, str) and cell not in ("", "[]"):
                rows.extend((req_id, a, b) for a, b in json.loads(cell))
    return pd.DataFrame(rows, columns=["req_id", "preempted_at", "resumed_at"])


def steps_table(steps: Iterable[StepRecord]) -> pd.DataFrame:
    """The `steps` table: one row per iteration (per replica)."""
    import pandas as pd

    steps = steps if isinstance(steps, list) else list(steps)
    if not steps:
        return pd.DataFrame([], columns=list(STEP_COLUMNS))
    return pd.DataFrame(steps_columns(steps))


def max_itls(token_times: list[list[float]]) -> list[float]:
    """The largest gap between consecutive times of each list (NaN for fewer than two times).

    One array of all the times: the gaps across two lists are masked, then one `maximum.reduceat`
    over the lists with gaps (the same float subtractions as list by list, in a fraction of the time).
    """
    lengths = np.fromiter(map(len, token_times), dtype=np.int64, count=len(token_times))
    out = np.full(len(token_times), np.nan)
    with_gaps = lengths > 1
    if with_gaps.any():
        ends = np.cumsum(lengths)
        gaps = np.diff(np.fromiter(chain.from_iterable(token_times), dtype=np.float64, count=int(ends[-1])))
        crossing = ends[(lengths > 0) & (ends < ends[-1])] - 1  # the gap from a list's last time to the next's first
        gaps[crossing] = -np.inf
        out[with_gaps] = np.maximum.reduceat(gaps, (ends - lengths)[with_gaps])
    return out.tolist()


def pooled_itls(requests: Iterable["Request"]) -> np.ndarray:
    """Every gap between consecutive output tokens of every completed request, pooled (vLLM ITL)."""
    parts = [r.token_times for r in requests
             if len(r.token_times) > 1 and r.finish_reason is not None
             and r.finish_reason.value in COMPLETED_REASONS]
    if not parts:
        return np.empty(0)
    # one array of every request's times; the differences across two requests are dropped
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    flat = np.fromiter(chain.from_iterable(parts), dtype=np.float64, count=int(lengths.sum()))
    gaps = np.diff(flat)
    return np.delete(gaps, np.cumsum(lengths)[:-1] - 1)


def write_results(out_dir: str | Path, requests: pd.DataFrame, steps: pd.DataFrame, summary: dict,
                  config_toml: str | None = None, plot: bool = True) -> Path:
    """Write summary.json, requests.csv, steps.csv (+ config.toml, parquet, timeline.png when possible)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_summary(out / "summary.json", summary)
    requests.to_csv(out / "requests.csv", index=False)
    steps.to_csv(out / "steps.csv", index=False)
    if config_toml is not None:
        (out / "config.toml").write_text(config_toml)
    try:  # optional extra: servesim[parquet]
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        requests.to_parquet(out / "requests.parquet", index=False)
        steps.to_parquet(out / "steps.parquet", index=False)
    if plot:
        plot_timeline(steps, requests, out / "timeline.png")
    return out


PLOT_STEPS = 4000  # points per replica in timeline.png


def plot_timeline(steps: pd.DataFrame, requests: pd.DataFrame, path: str | Path) -> Path | None:
    """KV usage, queue lengths and batch tokens over time, and the TTFT/TPOT CDFs, in one figure.

    Needs matplotlib (servesim[calibrate]); returns None without it. A replica's steps are thinned
    to every k-th (at most `PLOT_STEPS` points): a 1,000-pixel-wide panel cannot show more, and
    drawing 100,000 steps took seconds; short spikes between the points drawn do not show.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    if len(steps):
        for replica, s in steps.groupby("replica", sort=False):
            s = s.iloc[::max(1, -(-len(s) // PLOT_STEPS))]
            axes[0, 0].step(s["start"], s["kv_usage"], where="post", label=f"replica {replica}")
            axes[0, 1].step(s["start"], s["num_waiting"], where="post", label=f"waiting ({replica})")
            axes[0, 1].step(s["start"], s["num_running"], where="post", label=f"running ({replica})")
            axes[1, 0].plot(s["start"], s["num_prefill_tokens"] + s["num_decode_tokens"], ".", ms=2,
                            label=f"tokens/step ({replica})")
    axes[0, 0].set(title="KV cache usage", xlabel="time (s)", ylabel="fraction of GPU blocks", ylim=(0, 1.05))
    axes[0, 1].set(title="queue lengths", xlabel="time (s)", ylabel="requests")
    axes[1, 0].set(title="tokens per step", xlabel="time (s)", ylabel="tokens")
    for col, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        v = np.sort(requests[col].dropna().to_numpy(dtype=float)) if col in requests else np.empty(0)
        if len(v):
            axes[1, 1].plot(v, np.arange(1, len(v) + 1) / len(v), label=label)
    axes[1, 1].set(title="latency CDFs", xlabel="seconds", ylabel="fraction of requests", xscale="log")
    for ax in axes.flat:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def end_unfinished(scheduler, requests: list[Request], now: float, why: str) -> None:
    """Abort every request still live, so that it appears in the results with a reason."""
    for request in requests:
        if not request.is_finished:
            scheduler.abort_request(request.req_id, now)
            if request.finish_reason is None:  # a scheduler that did not know it
                request.finish(FinishReason.ABORTED, now)
            request.reject_reason = why

"""Trace readers: our CSV, the Azure LLM inference trace 2023 CSV, the Mooncake JSONL, and registered ones.

The layouts are documented once, in docs/formats.md ("Request traces"): ``csv`` (ours: header
``arrival_time,prompt_tokens,output_tokens[,priority]``), ``azure`` (as published,
Azure/AzurePublicDataset, CC-BY 4.0), ``mooncake`` (JSON lines with ``hash_ids``, one per 512-token
prefix block), and registered formats (`sim.workload.registry.TraceFormat`, e.g. fidelity's length
tables without arrival times: lengths only, not for `kind = "trace"`), detected from their CSV
header. `detect_format` picks one from the suffix and header when `trace_format = "auto"`.

Files are read as UTF-8 with an optional byte-order mark (`TEXT_ENCODING`), as Excel saves a CSV.

Arrival times are shifted so that the first request arrives at 0 and sorted (stably). Every
malformed line raises one `ConfigError` naming the field, the file and the line number
(`csv_rows` and `parse_int` do it for registered readers too).
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from policies.config import ConfigError
from records.files import iter_json_lines
from sim.workload import registry

MOONCAKE_BLOCK_TOKENS = 512  # tokens per Mooncake hash id (their README)
# UTF-8, skipping a leading byte-order mark: Excel's "CSV UTF-8" starts with one, which would
# otherwise glue itself to the first column's name ("\ufeffarrival_time")
TEXT_ENCODING = "utf-8-sig"


@dataclass(frozen=True)
class Trace:
    """Parsed trace rows as arrays, sorted by arrival (seconds from the first arrival)."""

    path: str
    format: str
    arrival_time: np.ndarray  # float64 seconds
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    priority: np.ndarray | None = None  # int64, our CSV only
    hash_ids: tuple | None = None  # tuple of tuples of ints, Mooncake only

    def __len__(self) -> int:
        return len(self.arrival_time)

    @property
    def mean_rate(self) -> float:
        """Requests per second over the recorded span ((n - 1) gaps)."""
        span = float(self.arrival_time[-1] - self.arrival_time[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else float("inf")


def has_arrivals(fmt: str) -> bool:
    """Whether traces of format `fmt` record arrival times (a length table does not)."""
    return fmt not in registry.TRACE_FORMATS or registry.TRACE_FORMATS[fmt].has_arrivals


def detect_format(path: str | Path, field: str = "workload.trace") -> str:
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    with p.open("r", encoding=TEXT_ENCODING, errors="replace") as f:
        header = f.readline().strip()
    cols = [c.strip() for c in header.split(",")]
    if "TIMESTAMP" in cols and "ContextTokens" in cols:
        return "azure"
    if "arrival_time" in cols:
        return "csv"
    for fmt in registry.TRACE_FORMATS.values():
        if fmt.detect(cols):
            return fmt.name
    if header.startswith("{"):
        return "mooncake"
    if not header:
        raise ConfigError(f"{field}: {p} is empty")
    expected = ["arrival_time,prompt_tokens,output_tokens (csv)", "TIMESTAMP,ContextTokens,GeneratedTokens (azure)",
                *(f"{fmt.header} ({fmt.name})" for fmt in registry.TRACE_FORMATS.values())]
    raise ConfigError(f"{field}: cannot tell the format of {p} from its first line {header[:80]!r}; expected a "
                      f"header {', '.join(expected)} or JSON lines (mooncake), or set workload.trace_format "
                      f"({registry.REGISTERED_BY})")


def read_trace(path: str | Path, fmt: str = "auto", field: str = "workload.trace") -> Trace:
    """Read and validate a trace file (cached per path, format and modification time)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{field}: no such file {p}")
    if fmt == "auto":
        fmt = detect_format(p, field)
    return _read_cached(str(p.resolve()), fmt, os.stat(p).st_mtime_ns, field)


@lru_cache(maxsize=8)
def _read_cached(path: str, fmt: str, _mtime: int, field: str) -> Trace:
    readers = {"csv": _read_ours, "azure": _read_azure, "mooncake": _read_mooncake,
               **{name: f.read for name, f in registry.TRACE_FORMATS.items()}}
    reader = readers.get(fmt)
    if reader is None:
        raise ConfigError(f"workload.trace_format: {fmt!r} is not allowed; choose one of "
                          f"{', '.join(['auto', *readers])}")
    try:
        rows = reader(Path(path), field)
    except UnicodeDecodeError as exc:  # a file saved in another encoding (Latin-1, UTF-16)
        raise ConfigError(f"{field}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          "save it as UTF-8") from None
    if not rows[0]:
        raise ConfigError(f"{field}: {path} has no requests")
    t = np.asarray(rows[0], dtype=np.float64)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order[0]]
    pick = lambda a: None if a is None else np.asarray(a, dtype=np.int64)[order]  # noqa: E731
    hashes = None if rows[4] is None else tuple(rows[4][i] for i in order)
    return Trace(path, fmt, t, pick(rows[1]), pick(rows[2]), pick(rows[3]), hashes)


def parse_int(value: str, what: str, where: str, minimum: int = 0) -> int:
    if isinstance(value, float) and not value.is_integer():  # a JSON 10.7: int() would drop the .7 unsaid
        raise ConfigError(f"{where}: {what} must be an integer, got {value!r}")
    try:
        x = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON Infinity
        raise ConfigError(f"{where}: {what} must be an integer, got {value!r}") from None
    if x < minimum:
        raise ConfigError(f"{where}: {what} must be >= {minimum}, got {x}")
    return x


def csv_rows(path: Path, field: str, required: tuple[str, ...]):
    """Yield (line number, row dict, where) after checking the header has the `required` columns."""
    with path.open("r", encoding=TEXT_ENCODING, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise ConfigError(f"{field}: {path} is empty")
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise ConfigError(f"{field}: {path}:1: header lacks column(s) {', '.join(missing)}; "
                              f"found {','.join(header)}")
        for row in reader:
            lineno = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            where = f"{field}: {path}:{lineno}"
            if len(row) != len(header):
                raise ConfigError(f"{where}: expected {len(header)} columns ({','.join(header)}), got {len(row)}")
            yield dict(zip(header, (c.strip() for c in row))), where


def _read_ours(path: Path, field: str):
    t, p, o, pr = [], [], [], []
    has_priority = None
    for row, where in csv_rows(path, field, ("arrival_time", "prompt_tokens", "output_tokens")):
        try:
            t.append(float(row["arrival_time"]))
        except ValueError:
            raise ConfigError(f"{where}: arrival_time must be a number, got {row['arrival_time']!r}") from None
        if not np.isfinite(t[-1]) or t[-1] < 0:
            raise ConfigError(f"{where}: arrival_time must be a finite number >= 0, got {row['arrival_time']!r}")
        p.append(parse_int(row["prompt_tokens"], "prompt_tokens", where, 1))
        o.append(parse_int(row["output_tokens"], "output_tokens", where, 1))
        if has_priority is None:
            has_priority = "priority" in row
        if has_priority:
            pr.append(parse_int(row["priority"], "priority", where, -(2**31)))
    return t, p, o, (pr if has_priority else None), None


def _read_azure(path: Path, field: str):
    t, p, o = [], [], []
    for row, where in csv_rows(path, field, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        try:
            t.append(datetime.fromisoformat(row["TIMESTAMP"]).timestamp())
        except ValueError:
            raise ConfigError(f"{where}: TIMESTAMP must look like 2023-11-16 18:17:03.9799600, "
                              f"got {row['TIMESTAMP']!r}") from None
        # the published trace has no zero counts, but a request needs >= 1 prompt and output token
        p.append(max(1, parse_int(row["ContextTokens"], "ContextTokens", where)))
        o.append(max(1, parse_int(row["GeneratedTokens"], "GeneratedTokens", where)))
    return t, p, o, None, None


def _read_mooncake(path: Path, field: str):
    t, p, o, h = [], [], [], []
    for lineno, d in iter_json_lines(path, field):
        where = f"{field}: {path}:{lineno}"
        for key in ("timestamp", "input_length", "output_length"):
            if key not in d:
                raise ConfigError(f"{where}: missing key {key!r}")
        stamp = d["timestamp"]  # Python's json reads NaN and Infinity: neither is a time
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp) or stamp < 0:
            raise ConfigError(f"{where}: timestamp must be a number of ms >= 0, got {d['timestamp']!r}")
        t.append(d["timestamp"] / 1000.0)
        n_in = parse_int(d["input_length"], "input_length", where, 1)
        p.append(n_in)
        o.append(max(1, parse_int(d["output_length"], "output_length", where)))
        ids = d.get("hash_ids")
        if ids is None:  # no prefix information: the prompt shares nothing
            h.append(None)
            continue
        if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
            raise ConfigError(f"{where}: hash_ids must be a list of integers")
        if len(ids) * MOONCAKE_BLOCK_TOKENS < n_in:
            raise ConfigError(f"{where}: {len(ids)} hash_ids cover {len(ids) * MOONCAKE_BLOCK_TOKENS} tokens, "
                              f"fewer than input_length={n_in}")
        h.append(tuple(ids))
    return t, p, o, None, h


def write_trace_csv(path: str | Path, arrival_time, prompt_tokens, output_tokens, priority=None) -> Path:
    """Write our CSV format (used by examples and tests)."""
    p = Path(path)
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arrival_time", "prompt_tokens", "output_tokens"] + (["priority"] if priority is not None else []))
        for i in range(len(arrival_time)):
            row = [f"{float(arrival_time[i]):.6f}", int(prompt_tokens[i]), int(output_tokens[i])]
            w.writerow(row + ([int(priority[i])] if priority is not None else []))
    return p

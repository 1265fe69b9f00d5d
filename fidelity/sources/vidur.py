"""Vidur's processed traces: length tables without arrival times, as a `workload.trace_format`.

Vidur ships its request traces as CSV tables of token counts, e.g. the arXiv summarization lengths
(Llama-2 tokenizer): header `num_prefill_tokens,num_decode_tokens[,...]`, one request a row. With
no arrival times they give lengths only: with an arrival process (`kind = "poisson"` ...) or as an
empirical length distribution, not for `kind = "trace"`. Importing this module registers the format
(`trace_format = "vidur"`, detected from the header) with `sim.workload.registry`.
"""
from __future__ import annotations

from pathlib import Path

from sim.workload.registry import TraceFormat, register_trace_format
from sim.workload.traces import csv_rows, parse_int

COLUMNS = ("num_prefill_tokens", "num_decode_tokens")


def read_length_table(path: Path, field: str):
    """(arrivals all 0, prompt tokens, output tokens (at least 1), no priorities, no hash ids)."""
    p, o = [], []
    for row, where in csv_rows(path, field, COLUMNS):
        p.append(parse_int(row["num_prefill_tokens"], "num_prefill_tokens", where, 1))
        o.append(max(1, parse_int(row["num_decode_tokens"], "num_decode_tokens", where)))
    return [0.0] * len(p), p, o, None, None


TRACE_FORMAT = TraceFormat(name="vidur", read=read_length_table, detect=lambda cols: all(c in cols for c in COLUMNS),
                           header=",".join(COLUMNS), has_arrivals=False)
register_trace_format(TRACE_FORMAT)

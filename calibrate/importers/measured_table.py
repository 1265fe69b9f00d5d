"""A published per-op measurement table (CSV), its rows checked as they are read.

An importer's table that lost a column, or holds a NaN, a word or a time <= 0 in a cell it reads,
would otherwise fail inside the fit with a traceback or an error that names no file, or fit
silently: a negative time bends a least-squares attention fit, zero times make an op free.
`read_rows` refuses such a table in one line naming the file, the line, the column and what is
allowed. Sizes (tokens, heads, bytes, GPUs) and times must be positive; a column named in
`optional` may be left blank (a table that did not time that op there), not filled with junk.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable

from policies import ConfigError


def read_rows(path: str | Path, positive: Iterable[str], optional: Iterable[str] = (),
              label: str = "data_dir") -> list[dict]:
    """Rows of the CSV at `path` as dicts: each column of `positive` a float > 0 (None where it is
    blank and in `optional`), the others as read. Errors start with `label` (the flag or argument
    that chose the folder) and name the file and line."""
    path = Path(path)
    positive, optional = tuple(positive), set(optional)
    where = f"{label}: {path}"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        if not header:
            raise ConfigError(f"{where}: empty file; expected a CSV with the columns {', '.join(positive)}")
        missing = [c for c in positive if c not in header]
        if missing:
            raise ConfigError(f"{where}: no column {', '.join(missing)}; expected the columns {', '.join(positive)}")
        rows = []
        for row in reader:
            for col in positive:
                raw = row[col]
                if col in optional and (raw is None or raw.strip() == ""):
                    row[col] = None
                    continue
                try:
                    v = float(raw)
                except (TypeError, ValueError):
                    v = math.nan
                if not (math.isfinite(v) and v > 0):
                    raise ConfigError(f"{where} line {reader.line_num}: {col} = {raw!r}; expected a number > 0"
                                      + (" or a blank cell" if col in optional else ""))
                row[col] = v
            rows.append(row)
    if not rows:
        raise ConfigError(f"{where}: no rows below the header")
    return rows

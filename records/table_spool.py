"""`TableSpool`: one result table written batch by batch, of which a whole copy can be made at any time.

A long-running server (`gpu_backend.serve`) writes its tables as it goes, so that memory holds only
what is live, yet `POST /admin/dump` must hand out the whole table while writing goes on. A
Parquet file cannot be read before its footer is written, so the spool writes the table in
segments (`TableWriter`s NAME-00000.csv/.parquet, NAME-00001..., in a working folder): `seal()`
closes the segment being written (the next batch opens another) and returns the closed ones;
`copy_table` joins them, and a last batch of rows for this copy alone (e.g. the requests still
running), into OUT/NAME.csv and NAME.parquet, one Parquet row group at a time, so memory holds a
batch, never the table. Every segment has the first one's columns and types (its template), so
the joined files are the table one `TableWriter` would have written.
"""
from __future__ import annotations

from pathlib import Path

from records.table_writer import TableWriter, _has_pyarrow


class TableSpool:
    """A table kept in closed segment files under `spool_dir`, with the `TableWriter` interface."""

    def __init__(self, spool_dir: str | Path, name: str, parquet: bool | None = None) -> None:
        self.dir = Path(spool_dir)
        self.name = name
        # decided (and pyarrow imported, a fifth of a second) now, not at the first batch: a
        # server writes that between two steps
        self.parquet = _has_pyarrow() if parquet is None else parquet
        self.segments: list[TableWriter] = []  # closed, with rows
        self._open: TableWriter | None = None

    @property
    def num_rows(self) -> int:
        return sum(s.num_rows for s in self.segments) + (self._open.num_rows if self._open is not None else 0)

    def write(self, columns: dict) -> None:
        """Append one batch (every column the same length) to the open segment."""
        if self._open is None:
            template = self.segments[0] if self.segments else None
            self._open = TableWriter(self.dir, f"{self.name}-{len(self.segments):05d}", self.parquet, template)
        self._open.write(columns)

    def seal(self) -> tuple[TableWriter, ...]:
        """Close the segment being written (if it has rows) and return every closed one, in order:
        files that no later write changes, which a copy may read while writing goes on."""
        segment, self._open = self._open, None
        if segment is not None and segment.num_rows:
            segment.close()
            self.segments.append(segment)
        elif segment is not None:  # opened, never written: it made no file
            self._open = segment
        return tuple(self.segments)

    def close(self, columns: dict | None = None) -> None:
        """The `TableWriter` call at the end of a run: seal (the table is copied out with `copy_table`)."""
        self.seal()


def copy_table(segments: tuple[TableWriter, ...], out_dir: str | Path, name: str, last: dict | None = None,
               empty: dict | None = None, parquet: bool | None = None) -> TableWriter:
    """Write OUT/NAME.csv (+ .parquet): the rows of the closed `segments` (from `TableSpool.seal`),
    then `last`'s (columns, e.g. the rows of requests still running); a table without rows gets
    `empty`'s columns as its header, as `TableWriter.close` does."""
    template = segments[0] if segments else None
    out = TableWriter(out_dir, name, parquet, template)
    for segment in segments:
        out.append(segment)
    if last is not None:
        out.write(last)
    out.close(empty)
    return out

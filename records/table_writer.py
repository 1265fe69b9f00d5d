"""`TableWriter`: one result table written batch by batch to NAME.csv (and NAME.parquet).

A streamed run writes its tables as it goes instead of holding them until the end. With pyarrow
installed (servesim[parquet]) each batch goes to both files through pyarrow's CSV and Parquet
writers (one Parquet row group per batch); without it, to the CSV through the standard library.
Either CSV reads back with `pandas.read_csv` to the values of the in-memory table's `to_csv`
(missing values are empty cells; pyarrow quotes every string cell, which readers undo).

The columns are fixed by the first batch (or by `columns` when nothing was written, or by a
`template` writer's): a later batch's missing columns are written empty, and a column first seen
later is left out with one warning on stderr (workload tags normally appear from the first batch on).
`append` copies in the rows of another, closed writer of the same columns from its files (the
segments of a `records.table_spool.TableSpool`), a batch at a time.
"""
from __future__ import annotations

import csv
import math
import shutil
import sys
from pathlib import Path

import numpy as np


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


class TableWriter:
    """Appends batches of columns ({name: array or list}) to `out_dir/NAME.csv` (+ `.parquet`)."""

    def __init__(self, out_dir: str | Path, name: str, parquet: bool | None = None,
                 template: "TableWriter | None" = None) -> None:
        self.dir = Path(out_dir)
        self.name = name
        # `template`: another writer of the same table (an earlier segment) whose columns and types
        # this one takes once the template has them, so that the files join into one table
        self.template = template
        self.arrow = (template.arrow if template is not None else _has_pyarrow()) if parquet is None else parquet
        self.num_rows = 0
        self._names: list[str] | None = None
        self._schema = None
        self._csv = self._parquet = None
        self._file = None  # the CSV file (pyarrow writes through it too, so `append` can add raw lines)
        self._warned: set[str] = template._warned if template is not None else set()

    @property
    def paths(self) -> list[Path]:
        names = [f"{self.name}.csv"] + ([f"{self.name}.parquet"] if self.arrow else [])
        return [self.dir / n for n in names]

    def write(self, columns: dict) -> None:
        """Append one batch (every column the same length)."""
        n = len(next(iter(columns.values()))) if columns else 0
        if n == 0:
            return
        if self._names is None:
            self._open(columns)
        late = [c for c in columns if c not in self._schema_names and c not in self._warned]
        for c in late:
            self._warned.add(c)
            print(f"servesim: {self.name} column {c!r} first appeared after the table's columns were fixed; "
                  "its values are left out of the file", file=sys.stderr)
        if self.arrow:
            self._write_arrow(columns, n)
        else:
            self._write_csv(columns, n)
        self.num_rows += n

    @property
    def _schema_names(self) -> list[str]:
        return self._names or []

    # --- pyarrow ----------------------------------------------------------------------------------
    def _open(self, columns: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        template = self.template
        fixed = template is not None and template._names is not None
        self._names = list(template._names) if fixed else list(columns)
        if self.arrow:
            import pyarrow as pa
            import pyarrow.csv as pacsv
            import pyarrow.parquet as pq

            self._schema = template._schema if fixed else \
                pa.schema([pa.field(name, _arrow_type(values)) for name, values in columns.items()])
            self._file = pa.OSFile(str(self.dir / f"{self.name}.csv"), "wb")  # unbuffered: rows in order
            self._csv = pacsv.CSVWriter(self._file, self._schema,
                                        write_options=pacsv.WriteOptions(quoting_style="needed"))
            self._parquet = pq.ParquetWriter(str(self.dir / f"{self.name}.parquet"), self._schema)
        else:
            self._file = open(self.dir / f"{self.name}.csv", "w", newline="")  # noqa: SIM115 (closed in close())
            self._csv = csv.writer(self._file)
            self._csv.writerow(self._names)

    def _write_arrow(self, columns: dict, n: int) -> None:
        import pyarrow as pa

        arrays = []
        for field in self._schema:
            values = columns.get(field.name)
            if values is None:
                arrays.append(pa.nulls(n, field.type))
                continue
            try:
                arrays.append(_arrow_array(values, field.type))
            except (TypeError, ValueError, OverflowError):
                if field.name not in self._warned:
                    self._warned.add(field.name)
                    print(f"servesim: {self.name} column {field.name!r} changed type after the table's "
                          "columns were fixed; its later values are left empty", file=sys.stderr)
                arrays.append(pa.nulls(n, field.type))
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        self._csv.write_table(table)
        self._parquet.write_table(table)

    # --- the standard library ---------------------------------------------------------------------
    def _write_csv(self, columns: dict, n: int) -> None:
        cells = []
        for name in self._names:
            values = columns.get(name)
            if values is None:
                cells.append([""] * n)
                continue
            values = values.tolist() if isinstance(values, np.ndarray) else values
            cells.append(["" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values])
        self._csv.writerows(zip(*cells))

    # --- rows from another writer's files ---------------------------------------------------------
    def append(self, other: "TableWriter") -> None:
        """Append the rows of `other`, a closed writer with this table's columns and types (made with
        the same template, say): its CSV lines as written, its Parquet file one
        row group at a time, so memory never holds its table."""
        if other.num_rows == 0:
            return
        if self._names is None:  # nothing written yet: its columns and types become this table's
            self.template = other
            self._open({})
        if self.arrow != other.arrow or self._names != other._names or self._schema != other._schema:
            raise ValueError(f"{self.name}: cannot append {other.name}, a table of other columns")
        if self.arrow:
            import pyarrow.parquet as pq

            with open(other.dir / f"{other.name}.csv", "rb") as f:
                f.readline()  # its header: this file has one
                while chunk := f.read(1 << 20):
                    self._file.write(chunk)
            parquet = pq.ParquetFile(other.dir / f"{other.name}.parquet")
            for i in range(parquet.num_row_groups):
                self._parquet.write_table(parquet.read_row_group(i))
        else:
            with open(other.dir / f"{other.name}.csv", newline="") as f:
                f.readline()
                shutil.copyfileobj(f, self._file)
        self.num_rows += other.num_rows

    # --- the end ----------------------------------------------------------------------------------
    def close(self, columns: dict | None = None) -> None:
        """Finish the files; a table that never got a row is written with `columns` (names -> sample
        values or empty lists) as its header (or with its template's columns, once it has them)."""
        if self._names is None:
            self._open(columns or {})
        if self.arrow:
            self._csv.close()
            self._parquet.close()
        if self._file is not None:
            self._file.close()


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _arrow_type(values):
    """The pyarrow type of a first batch's column (numbers stay int64/float64; all-empty: float64,
    which reads back as NaN like pandas' missing values)."""
    import pyarrow as pa

    if isinstance(values, np.ndarray) and values.dtype.kind in "ifb":
        return {"i": pa.int64(), "f": pa.float64(), "b": pa.bool_()}[values.dtype.kind]
    kinds = {type(v) for v in values if not _missing(v)}
    if not kinds:
        return pa.float64()
    if kinds <= {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def _bits(mask: np.ndarray):
    import pyarrow as pa

    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _arrow_array(values, arrow_type):
    """A pyarrow array of `values` (numpy array or list; None/NaN -> null) built from its buffers.

    Not `pyarrow.array`: its first call imports pandas (about a second of a streamed run's start-up)."""
    import pyarrow as pa

    n = len(values)
    if pa.types.is_string(arrow_type):
        values = values.tolist() if isinstance(values, np.ndarray) else values
        valid = np.fromiter((not _missing(v) for v in values), dtype=bool, count=n)
        encoded = [v.encode() if isinstance(v, str) else ("" if _missing(v) else str(v)).encode() for v in values]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n), out=offsets[1:])
        validity = None if valid.all() else _bits(valid)
        return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])
    if pa.types.is_floating(arrow_type):
        if isinstance(values, np.ndarray):
            data = values.astype(np.float64, copy=False)
        else:
            data = np.array([math.nan if _missing(v) else float(v) for v in values], dtype=np.float64)
        valid = ~np.isnan(data)
        validity = None if valid.all() else _bits(valid)
        return pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(np.ascontiguousarray(data))])
    if pa.types.is_integer(arrow_type):
        if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
            data, valid = values.astype(np.int64, copy=False), None
        else:
            valid = np.fromiter((not _missing(v) for v in values), dtype=bool, count=n)
            data = np.array([int(v) if ok else 0 for v, ok in zip(values, valid)], dtype=np.int64)
            if isinstance(values, np.ndarray) and values.dtype.kind == "f" and not np.array_equal(data[valid], values[valid]):
                raise ValueError("not integers")
        validity = None if valid is None or valid.all() else _bits(valid)
        return pa.Array.from_buffers(pa.int64(), n, [validity, pa.py_buffer(np.ascontiguousarray(data))])
    if pa.types.is_boolean(arrow_type):
        values = values.tolist() if isinstance(values, np.ndarray) else values
        valid = np.fromiter((not _missing(v) for v in values), dtype=bool, count=n)
        data = np.fromiter((bool(v) if ok else False for v, ok in zip(values, valid)), dtype=bool, count=n)
        return pa.Array.from_buffers(pa.bool_(), n, [None if valid.all() else _bits(valid), _bits(data)])
    raise TypeError(f"unsupported column type {arrow_type}")

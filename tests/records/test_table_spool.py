"""`TableSpool` / `copy_table`: a table written in segments and copied out whole is the table one
`TableWriter` writes, with or without pyarrow, however the copies and writes interleave."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from records.table_spool import TableSpool, copy_table
from records.table_writer import TableWriter


def make_batches(n: int, size: int = 5) -> list[dict]:
    """Batches of mixed columns: ints, floats with NaN, strings (one with a comma and a quote)."""
    out = []
    for b in range(n):
        i = np.arange(b * size, (b + 1) * size)
        out.append({"req_id": [f"r-{k}" for k in i], "n": i, "t": np.where(i % 4 == 0, np.nan, i * 0.1),
                    "reason": ['a "quoted", one' if k % 3 == 0 else "" for k in i]})
    return out


def write_one(tmp_path, batches, parquet, last=None):
    """What one TableWriter writes of `batches` (then `last`)."""
    w = TableWriter(tmp_path / "one", "t", parquet)
    for batch in batches + ([last] if last else []):
        w.write(batch)
    w.close()
    return tmp_path / "one"


def read(folder, parquet):
    csv = pd.read_csv(folder / "t.csv", keep_default_na=False, na_values=[""])
    return csv, (pd.read_parquet(folder / "t.parquet") if parquet else None)


@pytest.mark.parametrize("parquet", [True, False])
def test_copies_between_writes_are_the_one_writers_table(tmp_path, parquet):
    if parquet:
        pytest.importorskip("pyarrow")
    batches = make_batches(7)
    spool = TableSpool(tmp_path / "spool", "t", parquet)
    for k, batch in enumerate(batches):
        spool.write(batch)
        if k in (1, 2, 5):  # a copy closes the open segment; writing goes on in a new one
            copy_table(spool.seal(), tmp_path / f"copy{k}", "t", parquet=parquet)
            want = read(write_one(tmp_path / f"w{k}", batches[:k + 1], parquet), parquet)
            got = read(tmp_path / f"copy{k}", parquet)
            pd.testing.assert_frame_equal(got[0], want[0])
            if parquet:
                pd.testing.assert_frame_equal(got[1], want[1])
    assert len(spool.seal()) == 4 and spool.num_rows == 35
    # the CSV bytes too: one header, every row once, in order
    copy_table(spool.seal(), tmp_path / "all", "t", parquet=parquet)
    one = write_one(tmp_path / "w", batches, parquet)
    assert (tmp_path / "all" / "t.csv").read_bytes() == (one / "t.csv").read_bytes()


@pytest.mark.parametrize("parquet", [True, False])
def test_a_last_batch_goes_into_the_copy_only(tmp_path, parquet):
    if parquet:
        pytest.importorskip("pyarrow")
    batches, last = make_batches(3), make_batches(5)[4]
    spool = TableSpool(tmp_path / "spool", "t", parquet)
    for batch in batches:
        spool.write(batch)
    copy_table(spool.seal(), tmp_path / "copy", "t", last, parquet=parquet)
    want = read(write_one(tmp_path, batches, parquet, last), parquet)
    got = read(tmp_path / "copy", parquet)
    pd.testing.assert_frame_equal(got[0], want[0])
    if parquet:
        pd.testing.assert_frame_equal(got[1], want[1])
    assert spool.num_rows == 15  # the spool never saw it


def test_later_segments_keep_the_first_segments_columns(tmp_path):
    pytest.importorskip("pyarrow")
    spool = TableSpool(tmp_path / "spool", "t")
    spool.write({"a": [1, 2], "b": ["x", "y"]})
    spool.seal()
    spool.write({"a": [3]})  # b missing: empty, as in one file, not a segment of other columns
    copy_table(spool.seal(), tmp_path / "copy", "t")
    got = pd.read_parquet(tmp_path / "copy" / "t.parquet")
    assert got["a"].tolist() == [1, 2, 3] and got["b"][:2].tolist() == ["x", "y"] and got["b"].isna()[2]


def test_a_copy_without_rows_has_the_header_it_is_given(tmp_path):
    spool = TableSpool(tmp_path / "spool", "t", parquet=False)
    copy_table(spool.seal(), tmp_path / "copy", "t", empty={"a": [], "b": []}, parquet=False)
    assert (tmp_path / "copy" / "t.csv").read_text().strip() == "a,b"
    assert not (tmp_path / "spool").exists() or not list((tmp_path / "spool").iterdir())

"""A published measurement table read by an importer (`calibrate.importers.measured_table`): its
rows as numbers, and a damaged table refused in one line naming the file, line and column."""
from __future__ import annotations

import pytest

from calibrate.importers.measured_table import read_rows
from policies import ConfigError

GOOD = "m,k,latency_us,note\n8,2048,8.9,a\n16,2048,,b\n"


def test_rows_come_back_as_numbers_and_a_blank_optional_cell_as_none(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(GOOD)
    rows = read_rows(path, ("m", "k", "latency_us"), optional=("latency_us",))
    assert [(r["m"], r["k"], r["latency_us"], r["note"]) for r in rows] == [(8.0, 2048.0, 8.9, "a"),
                                                                          (16.0, 2048.0, None, "b")]


@pytest.mark.parametrize("text, match", [
    ("", "t.csv: empty file; expected a CSV with the columns m, k, latency_us"),
    ("m,k,latency_us\n", "t.csv: no rows below the header"),
    ("m,latency_us\n8,8.9\n", "t.csv: no column k; expected the columns m, k, latency_us"),
    ("m,k,latency_us\n8,2048,nan\n", "t.csv line 2: latency_us = 'nan'; expected a number > 0$"),
    ("m,k,latency_us\n8,2048,8.9\n8,2048,-3\n", "t.csv line 3: latency_us = '-3'"),
    ("m,k,latency_us\n8,2048,0\n", "t.csv line 2: latency_us = '0'"),
    ("m,k,latency_us\n8,2048,inf\n", "t.csv line 2: latency_us = 'inf'"),
    ("m,k,latency_us\n8,2048,9 us\n", "t.csv line 2: latency_us = '9 us'"),
    ("m,k,latency_us\n8,,8.9\n", "t.csv line 2: k = ''; expected a number > 0$"),  # blank, not optional
    ("m,k,latency_us\n8,2048\n", "t.csv line 2: latency_us = None"),  # a short row
])
def test_a_damaged_table_is_refused_naming_file_line_and_column(tmp_path, text, match):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^--data-dir: .*{match}"):
        read_rows(path, ("m", "k", "latency_us"), label="--data-dir")


def test_a_missing_table_is_named(tmp_path):
    with pytest.raises(ConfigError, match="^data_dir: .*nope.csv: no such file"):
        read_rows(tmp_path / "nope.csv", ("m",))

"""The config form's helpers that do not need a running page: the trace upload's file."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
from ui.forms import _upload_trace  # noqa: E402


class Upload:
    """What `st.file_uploader` returns, as far as the form uses it."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self._data = name, data

    def getvalue(self) -> bytes:
        return self._data


def test_rerunning_the_page_reuses_one_file_per_upload():
    data = b"arrival_time,prompt_tokens,output_tokens\n0.0,10,5\n" + str(id(object())).encode()
    first = _upload_trace(Upload("t.csv", data))
    again = _upload_trace(Upload("t.csv", data))
    other = _upload_trace(Upload("t.csv", data + b"0.5,20,5\n"))
    try:
        assert first == again  # the same config (and cache key) on every rerun, and no new file
        assert other != first
        assert Path(first).read_bytes() == data and Path(first).suffix == ".csv"
    finally:
        for path in {first, other}:
            Path(path).unlink(missing_ok=True)

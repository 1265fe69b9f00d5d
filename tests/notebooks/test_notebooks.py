"""Every notebook runs top to bottom and matches its source in notebooks/src/.

The default run executes the small settings (SERVESIM_NOTEBOOK_SMALL=1); the `slow` run executes
every notebook at its full, documented size, where the assertions that back its markdown claims
must hold too (`make test-slow`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9]*.ipynb"))
sys.path.insert(0, str(REPO / "notebooks"))
import build  # noqa: E402  (notebooks/build.py)


def test_every_source_has_its_notebook():
    sources = {p.stem for p in (REPO / "notebooks" / "src").glob("[0-9]*.py")}
    assert sources and sources == {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_source(path):
    built = build.build(REPO / "notebooks" / "src" / f"{path.stem}.py")
    on_disk = nbformat.read(path, as_version=4)
    assert [c.source for c in on_disk.cells] == [c.source for c in built.cells], \
        "run `python notebooks/build.py` after editing notebooks/src/"


def _execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3",
                                     resources={"metadata": {"path": str(REPO / "notebooks")}})
    client.execute()  # raises CellExecutionError on the first failing cell (a failed claim included)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("SERVESIM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    _execute(path)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_full_size(path, monkeypatch):
    """The full-size run: the markdown's claims are asserted on the numbers a reader sees."""
    monkeypatch.delenv("SERVESIM_NOTEBOOK_SMALL", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    _execute(path)

"""Build the .ipynb notebooks from their percent-format sources in notebooks/src/.

The sources (`# %%` code cells, `# %% [markdown]` cells whose lines start with `# `) are what we edit
and review; `python notebooks/build.py` writes `notebooks/NN_name.ipynb` without outputs.
`tests/notebooks/` checks the two stay in sync and executes every notebook.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"


def parse_cells(text: str) -> list:
    """Split a percent-format script into nbformat cells."""
    cells, kind, lines = [], None, []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(body))
        else:
            cells.append(nbformat.v4.new_code_cell(body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        else:
            lines.append(line)
    flush()
    return cells


def build(src: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = parse_cells(src.read_text())
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids keep rebuilt notebooks byte-identical
        cell["id"] = f"{src.stem.replace('_', '-')}-{i}"
    return nb


def target(src: Path) -> Path:
    return HERE / f"{src.stem}.ipynb"


def main() -> int:
    for src in sorted(SRC.glob("[0-9]*.py")):
        nbformat.write(build(src), target(src))
        print(f"wrote {target(src).relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

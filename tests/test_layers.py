"""The import rules of the layered packages, read from the source tree with `ast` (nothing is imported).

Layers, lowest first; a module imports only from its own package and from lower layers:

    policies < records < specs < {sim, gpu_backend} < calibrate < fidelity < {servesim, app}

Packages of one layer never import each other: `sim` and `gpu_backend` are independent (the engine
never knows the simulator), and so are `servesim` and `app`. `records` (what a run leaves) sits
below `specs` (model and GPU catalogs): records never import specs, and specs may use records.

Rules, each failure naming the file, the line and the rule:
- `layer`: no import up the order (or sideways to a peer, or into a folder outside the layers);
- `cycle`: no import cycle between modules (module-level imports, including `if TYPE_CHECKING:`);
- `in-function`: an import inside a function or method is only for an optional extra (`EXTRAS`, and
  the slow base dependencies `LAZY`), or for a project module that loads one the importing module
  does not load otherwise (`needs`: `servesim simulate --from-run` defers pandas, `servesim calibrate
  import` the engine's torch), except in the `servesim/cli.py` dispatcher (it loads one command's
  module, so that `servesim simulate` never imports torch); `importlib.import_module` likewise;
- `dataset`: the names of datasets and `../shared` paths (`DATASET_NAMES`) appear in identifiers,
  imported module names and string literals only under `fidelity/` and `calibrate/importers/`
  (docstrings and comments may cite them).

`PENDING` lists the modules whose in-function imports wait for work in flight on those very files;
the list only shrinks (a listed module that keeps the rule fails `test_pending_modules_still_pending`).
The app's pages import `ui` and `_path` (app/ and app/views/ are on their path): read as app.ui, app.views._path.

`python tests/test_layers.py [ROOT]` prints the figures (modules, edges, cycles, violations per rule).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("policies", "records", "specs", ("sim", "gpu_backend"), "calibrate", "fidelity", ("servesim", "app"))
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in ((layer,) if isinstance(layer, str) else layer)}
# optional extras of pyproject.toml (import names) and test-only tools: imported inside functions
EXTRAS = frozenset({
    "torch", "safetensors", "scipy", "matplotlib", "aiconfigurator", "aiconfigurator_core", "streamlit",
    "plotly", "ray", "fastapi", "uvicorn", "starlette", "tokenizers", "jinja2", "pyarrow", "transformers",
    "httpx", "playwright", "guidellm", "flash_attn",
})
# base dependencies slow to import: pandas (seconds) where tables are built, tqdm (25 ms of a 150 ms start)
# where a progress bar is drawn, so that `import sim.runner` and a streamed `servesim simulate` start without them
LAZY = frozenset({"pandas", "tqdm"})
IN_FUNCTION_OK = EXTRAS | LAZY
DISPATCHERS = frozenset({"servesim/cli.py"})
DATASET_NAMES = ("distserve", "splitwise", "llmservingsim", "inference_perf", "inference-perf", "guidellm",
                 "vidur", "../shared")
DATASET_HOMES = ("fidelity/", "calibrate/importers/")
# modules whose in-function imports still wait to be hoisted: none left (the list only shrinks)
PENDING: frozenset = frozenset()
_DATASET = re.compile("|".join(re.escape(n) for n in DATASET_NAMES), re.IGNORECASE)


@dataclass(frozen=True)
class Edge:
    """One import statement: `src` (module) imports `dst` (module), at `file:line`."""

    src: str
    dst: str
    file: str
    line: int
    in_function: bool
    type_only: bool = False


@dataclass(frozen=True)
class Violation:
    """A broken rule at `file:line`."""

    rule: str
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: [{self.rule}] {self.message}"


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file of the layered packages under `root`."""
    out = {}
    for pkg in RANK:
        for path in sorted((root / pkg).rglob("*.py")) if (root / pkg).is_dir() else ():
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path], importer: str = "") -> str | None:
    """The longest prefix of dotted `name` that is a project module (None: not the project's)."""
    if importer.startswith("app.") and name.split(".")[0] not in RANK:  # the app's pages: app/, app/views/ on the path
        for base in ("app.", "app.views."):
            found = _resolve(base + name, modules)
            if found is not None:
                return found
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in modules:
            return ".".join(parts[:k])
    return None


class _Imports(ast.NodeVisitor):
    """Collects (node, target names, in_function, type_only) for every import of one module."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.found: list[tuple[ast.AST, list[str], bool, bool]] = []
        self.depth = 0
        self.type_only = 0

    def _base(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        pkg = self.module.split(".") if self.is_package else self.module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        return ".".join(pkg + ([node.module] if node.module else []))

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, [a.name for a in node.names], self.depth > 0, self.type_only > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._base(node)
        self.found.append((node, [f"{base}.{a.name}" for a in node.names] or [base], self.depth > 0,
                           self.type_only > 0))

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self.found.append((node, [node.args[0].value], True, False))  # a dynamic import counts as in-function
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        is_tc = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
                (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
        self.type_only += is_tc
        for child in node.body:
            self.visit(child)
        self.type_only -= is_tc
        for child in node.orelse:
            self.visit(child)

    def _function(self, node) -> None:
        for d in getattr(node, "decorator_list", ()):
            self.visit(d)
        self.depth += 1
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


def scan(root: Path) -> tuple[dict[str, Path], list[Edge], list[tuple[str, int, str]]]:
    """(modules, project import edges, in-function imports of anything that is not an extra)."""
    root = Path(root)
    modules = module_files(root)
    edges: list[Edge] = []
    foreign: list[tuple[str, int, str]] = []
    for mod, path in modules.items():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        v = _Imports(mod, path.name == "__init__.py")
        v.visit(tree)
        for node, names, in_fn, type_only in v.found:
            for name in names:
                dst = _resolve(name, modules, mod)
                if dst is not None:
                    edges.append(Edge(mod, dst, rel, node.lineno, in_fn, type_only))
                elif in_fn and name.split(".")[0] not in IN_FUNCTION_OK:
                    top = name.split(".")[0]
                    if top in RANK or top in ("benchmarks", "tests", "notebooks"):
                        edges.append(Edge(mod, name, rel, node.lineno, in_fn, type_only))
                    else:
                        foreign.append((rel, node.lineno, name))
    return modules, edges, foreign


def _package(module: str) -> str:
    return module.split(".")[0]


def _home(module: str, file: str) -> str:
    return "calibrate/importers/" if file.startswith("calibrate/importers/") else _package(module)


def layer_violations(edges: list[Edge]) -> list[Violation]:
    out = []
    for e in edges:
        a, b = _package(e.src), _package(e.dst)
        if a == b:
            continue
        if b not in RANK:
            out.append(Violation("layer", e.file, e.line, f"{e.src} imports {e.dst}, outside the layered packages"))
        elif RANK[b] > RANK[a]:
            out.append(Violation("layer", e.file, e.line, f"{e.src} ({a}) imports {e.dst} ({b}), a higher layer; "
                                 f"the order is {_order()}"))
        elif RANK[b] == RANK[a]:
            out.append(Violation("layer", e.file, e.line, f"{e.src} ({a}) imports {e.dst} ({b}): packages of "
                                 f"one layer are independent"))
    return out


def _order() -> str:
    return " < ".join(x if isinstance(x, str) else "{" + ", ".join(x) + "}" for x in LAYERS)


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components (> 1 module, or a module importing itself) of the module-level graph."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.in_function:
            graph.setdefault(e.src, set()).add(e.dst)
            graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan, iterative over each node's successors
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1 or node in graph[node]:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def cycle_violations(edges: list[Edge]) -> list[Violation]:
    out = []
    for comp in cycles(edges):
        members = set(comp)
        inner = [e for e in edges if not e.in_function and e.src in members and e.dst in members]
        first = min(inner, key=lambda e: (e.file, e.line))
        where = "; ".join(f"{e.file}:{e.line} {e.src} -> {e.dst}" for e in sorted(inner, key=lambda e: (e.file, e.line)))
        out.append(Violation("cycle", first.file, first.line, f"import cycle between {', '.join(comp)} ({where})"))
    return out


def needs(root: Path, modules: dict[str, Path], edges: list[Edge]) -> dict[str, frozenset]:
    """Module -> the optional extras and `LAZY` dependencies importing it loads: its own module-level
    imports of them and those of every project module it imports at module level (packages included)."""
    own: dict[str, set] = {}
    for mod, path in modules.items():
        v = _Imports(mod, path.name == "__init__.py")
        v.visit(ast.parse(path.read_text(), filename=str(path)))
        own[mod] = {n.split(".")[0] for node, names, in_fn, type_only in v.found if not (in_fn or type_only)
                    for n in names if _resolve(n, modules, mod) is None and n.split(".")[0] in IN_FUNCTION_OK}
    graph: dict[str, set] = {m: {".".join(m.split(".")[:k]) for k in range(1, m.count(".") + 1)} & set(modules)
                             for m in modules}
    for e in edges:
        if not e.in_function and not e.type_only:
            graph.setdefault(e.src, set()).add(e.dst)
    out = {}
    for m in modules:
        seen, stack, found = {m}, [m], set()
        while stack:
            x = stack.pop()
            found |= own.get(x, set())
            for d in graph.get(x, ()):
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        out[m] = frozenset(found)
    return out


def in_function_violations(edges: list[Edge], foreign: list[tuple[str, int, str]],
                           pending: frozenset = frozenset(), loads: dict[str, frozenset] | None = None
                           ) -> list[Violation]:
    loads = loads or {}

    def defers(e: Edge) -> bool:  # the import keeps an extra (or a LAZY dependency) off the importer's start
        return bool(loads.get(e.dst, frozenset()) - loads.get(e.src, frozenset()))

    out = [Violation("in-function", e.file, e.line, f"{e.src} imports {e.dst} inside a function; project "
                     "imports go at module level (only the servesim/cli.py dispatcher loads lazily, and an "
                     "import that defers an optional extra the module does not load otherwise)")
           for e in edges if e.in_function and e.file not in DISPATCHERS | pending and not defers(e)]
    out += [Violation("in-function", f, line, f"imports {name} inside a function; only optional extras "
                      f"and {', '.join(sorted(LAZY))} are imported there")
            for f, line, name in foreign if f not in DISPATCHERS | pending]
    return out


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def dataset_violations(root: Path, modules: dict[str, Path]) -> list[Violation]:
    out = []
    for mod, path in modules.items():
        rel = path.relative_to(root).as_posix()
        if rel.startswith(DATASET_HOMES):
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            words: list[str] = []
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                words = [node.value]
            elif isinstance(node, ast.Name):
                words = [node.id]
            elif isinstance(node, ast.Attribute):
                words = [node.attr]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                words = [node.name]
            elif isinstance(node, ast.arg):
                words = [node.arg]
            elif isinstance(node, ast.keyword) and node.arg:
                words = [node.arg]
            elif isinstance(node, ast.alias):
                words = [node.name, node.asname or ""]
            elif isinstance(node, ast.ImportFrom) and node.module:
                words = [node.module]
            for w in words:
                if m := _DATASET.search(w):
                    out.append(Violation("dataset", rel, getattr(node, "lineno", 0),
                                         f"{m.group(0)!r} in {w[:60]!r}; dataset names and ../shared paths "
                                         f"belong under {' or '.join(DATASET_HOMES)}"))
                    break
    return out


def violations(root: Path = ROOT, pending: frozenset = frozenset()) -> dict[str, list[Violation]]:
    """Every broken rule of the tree at `root`, by rule (`pending` files left out of the in-function rule)."""
    modules, edges, foreign = scan(root)
    return {
        "layer": layer_violations(edges),
        "cycle": cycle_violations(edges),
        "in-function": in_function_violations(edges, foreign, pending, needs(Path(root), modules, edges)),
        "dataset": dataset_violations(Path(root), modules),
    }


def _fail_on(found: list[Violation]) -> None:
    assert not found, f"{len(found)} violation(s):\n" + "\n".join(map(str, found))


# --- the tree -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tree_violations():
    return violations(ROOT, PENDING)


@pytest.mark.parametrize("rule", ["layer", "cycle", "in-function", "dataset"])
def test_the_tree_keeps_the_rule(tree_violations, rule):
    _fail_on(tree_violations[rule])


def test_pending_modules_still_pending():
    """A module that keeps the in-function rule leaves PENDING (the list of exceptions only shrinks)."""
    broken = {v.file for v in violations(ROOT)["in-function"]}
    done = sorted(PENDING - broken)
    assert not done, f"these keep the in-function rule now: remove them from tests/test_layers.py PENDING: {done}"


def test_the_lower_layers_import_without_the_engine_or_the_sources():
    """`import sim...` (and everything below it) loads no torch, no extra and no higher layer."""
    modules = sorted(m for m in module_files(ROOT) if _package(m) in ("policies", "records", "specs", "sim"))
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "print(sorted({n.split('.')[0] for n in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    loaded = set(ast.literal_eval(out.stdout.strip().splitlines()[-1]))
    assert not loaded & (EXTRAS | {"gpu_backend", "calibrate", "fidelity", "servesim", "app"}), loaded


def test_the_scan_sees_the_layers():
    modules, edges, _ = scan(ROOT)
    assert {_package(m) for m in modules} == set(RANK)
    down = {(_package(e.src), _package(e.dst)) for e in edges if _package(e.src) != _package(e.dst)}
    assert ("sim", "policies") in down and ("servesim", "sim") in down  # the scan finds real edges


# --- the checker on tiny trees --------------------------------------------------------------------
def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in RANK:
        (root / pkg).mkdir(exist_ok=True)
        (root / pkg / "__init__.py").touch()
    return root


def test_an_upward_import_is_named_with_file_line_and_rule(tmp_path):
    root = write_tree(tmp_path, {"policies/a.py": '"""a"""\nimport os\nfrom sim.b import x\n', "sim/b.py": "x = 1\n"})
    found = violations(root)["layer"]
    assert [str(v).split(" ")[0:2] for v in found] == [["policies/a.py:3:", "[layer]"]]
    assert "policies.a (policies) imports sim.b (sim), a higher layer" in found[0].message


def test_peers_of_one_layer_may_not_import_each_other(tmp_path):
    root = write_tree(tmp_path, {"gpu_backend/e.py": "import sim.runner\n", "sim/runner.py": "import policies\n"})
    found = violations(root)["layer"]
    assert [(v.file, v.line) for v in found] == [("gpu_backend/e.py", 1)] and "independent" in found[0].message
    assert violations(root)["cycle"] == []


def test_a_cycle_is_found_and_a_hidden_one_is_not_a_cycle(tmp_path):
    root = write_tree(tmp_path, {
        "sim/a.py": "from sim import b\n",
        "sim/b.py": "import os\n\nimport sim.c\n",
        "sim/c.py": "from . import a\n",                      # relative: sim.a
        "sim/d.py": "def f():\n    from sim import e\n",       # hidden in a function: not a cycle...
        "sim/e.py": "import sim.d\n",
    })
    v = violations(root)
    assert [x.message.split(" (")[0] for x in v["cycle"]] == ["import cycle between sim.a, sim.b, sim.c"]
    assert v["cycle"][0].file == "sim/a.py" and v["cycle"][0].line == 1
    assert [(x.file, x.line) for x in v["in-function"]] == [("sim/d.py", 2)]  # ...but an in-function import


def test_pending_files_are_left_out_of_the_in_function_rule_only(tmp_path):
    root = write_tree(tmp_path, {"sim/a.py": "def f():\n    from sim import b\n", "sim/b.py": "x = 1\n",
                                 "sim/c.py": "def g():\n    import sim.b\n"})
    found = violations(root, frozenset({"sim/a.py"}))["in-function"]
    assert [(v.file, v.line) for v in found] == [("sim/c.py", 2)]


def test_in_function_imports_only_for_extras_and_in_the_dispatcher(tmp_path):
    root = write_tree(tmp_path, {
        "sim/a.py": "def f():\n    import torch\n    import scipy.stats\n    import yaml\n"
                    "    import importlib\n    importlib.import_module('sim.b')\n",
        "sim/b.py": "x = 1\n",
        "servesim/cli.py": "def main():\n    from servesim.commands import simulate\n    import json\n",
        "servesim/commands/simulate.py": "x = 1\n",
    })
    found = violations(root)["in-function"]
    assert sorted((v.file, v.line) for v in found) == [("sim/a.py", 4), ("sim/a.py", 5), ("sim/a.py", 6)]


def test_an_in_function_import_may_defer_an_extra_the_module_does_not_load(tmp_path):
    root = write_tree(tmp_path, {
        "sim/engine.py": "import torch\n",
        "sim/tables.py": "import pandas as pd\n\nimport sim.engine\n",
        "sim/a.py": "def f():\n    import sim.engine\n",          # defers torch: allowed
        "sim/b.py": "def f():\n    from sim import tables\n",      # defers pandas and torch (through tables)
        "sim/c.py": "import torch\n\ndef f():\n    import sim.engine\n",  # c loads torch anyway
        "sim/d.py": "import sim.tables\n\ndef f():\n    import sim.engine\n",  # so does d, through tables
        "sim/e.py": "x = 1\n",
        "sim/f.py": "def f():\n    import sim.e\n",               # defers nothing
    })
    found = sorted((v.file, v.line) for v in violations(root)["in-function"])
    assert found == [("sim/c.py", 4), ("sim/d.py", 4), ("sim/f.py", 2)]


def test_type_checking_imports_count_for_cycles_and_layers(tmp_path):
    root = write_tree(tmp_path, {
        "records/r.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specs.s import S\n",
        "specs/s.py": "import records.r\n",
    })
    v = violations(root)
    assert [(x.file, x.line) for x in v["layer"]] == [("records/r.py", 3)]
    assert len(v["cycle"]) == 1


def test_dataset_names_outside_their_homes_but_not_in_docstrings_or_comments(tmp_path):
    root = write_tree(tmp_path, {
        "sim/w.py": '"""Cites DistServe and ../shared/data."""\n# vidur in a comment\n'
                    'KINDS = ("poisson", "inference_perf")\n\ndef f(guidellm_rate):\n    """inference-perf"""\n',
        "servesim/commands/c.py": 'HELP = "folder (default ../shared/data)"\n',
        "fidelity/sources/vidur.py": 'NAME = "vidur"\n',
        "calibrate/importers/vidur.py": 'NAME = "vidur"\n',
        "calibrate/bench.py": "from calibrate.importers.vidur import NAME\n",
    })
    found = sorted((v.file, v.line) for v in violations(root)["dataset"])
    assert found == [("calibrate/bench.py", 1), ("servesim/commands/c.py", 1), ("sim/w.py", 3), ("sim/w.py", 5)]


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else ROOT
    modules, edges, foreign = scan(root)
    in_fn = {(e.file, e.line) for e in edges if e.in_function and e.file not in DISPATCHERS}
    hidden = cycles([Edge(e.src, e.dst, e.file, e.line, False) for e in edges if e.file not in DISPATCHERS])
    print(f"modules {len(modules)}; module-level cycles {len(cycles(edges))}; cycles once in-function imports "
          f"count {len(hidden)} ({'; '.join(' <-> '.join(c) for c in hidden)}); upward or sideways imports "
          f"{len(layer_violations(edges))}; in-function project import statements {len(in_fn)}; other in-function "
          f"imports of non-extras {len({(f, n) for f, n, _ in foreign if f not in DISPATCHERS})}; dataset names "
          f"outside their homes {len(dataset_violations(root, modules))}")
    for x in [v for vs in violations(root, PENDING).values() for v in vs] if "-v" in sys.argv else ():
        print("  ", x)

"""Every command line of README.md and docs/*.md works as written, and every path README.md names exists.

The commands are the lines of the docs' ```bash blocks (continuations joined, comments dropped).
Each runs with `SERVESIM_SMALL=1` (every command caps its workload and calibrates on the smoke
grid: `servesim.commands.small`) from a scratch folder laid out like a clone (the repository's
top-level entries linked in, `../shared/data` beside it when the data is there), so that what it
writes lands there; afterwards every path it names exists, outputs included. `servesim serve` runs
as a server with the `curl` lines that follow it sent to it, then Ctrl-C. A line with placeholders
(`CONFIG.toml`, `[--set ...]`, `...`) is a synopsis: its paths are checked, it is not run. A line
that installs packages, needs ../shared (when absent) or a GPU, or runs for minutes even when
small, is skipped or marked slow with its reason (`REASONS`). Paths in the inline code of README.md,
docs/*.md and the package and example READMEs (`examples/...`, `calibrate/README.md`) must exist too.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from calibrate.importers.shared_data import shared_data_dir, shared_data_present

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = shared_data_dir()
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TIMEOUT_S = 900

# a pattern of the command line -> (what the test does with it, why); the first that matches counts
REASONS: dict[str, tuple[str, str]] = {
    r"^make\b": ("skip", "sets up .venv (pip installs); the fresh-clone check runs `make demo` and `make test`"),
    r"^pip\b": ("skip", "installs packages"),
    r"^streamlit run\b": ("skip", "a long-running app server; tests/app drives its pages"),
    r"benchmarks/sim_speed\.py": ("slow", "times 10,000-request simulations at several sizes (a minute or more)"),
    r"benchmarks/distserve_replay\.py": ("slow", "replays DistServe's 37 measured runs (about 2 minutes)"),
    r"benchmarks/fidelity_report\.py": ("slow", "reproduces every shipped real run three times (minutes)"),
    r"benchmarks/splitwise_check\.py": ("slow", "imports and fits Vidur's per-op tables at three TPs (minutes)"),
    r"^servesim reproduce\b": ("slow", "simulates every real run it finds (minutes)"),
    r"^servesim calibrate fit-runs\b": ("slow", "re-simulates real runs for every fit round (minutes)"),
    r"--kernels vidur": ("shared", "reads ../shared/data/profiles/vidur-per-op (the importer's default folder)"),
    r"--source aiconfigurator": ("module aiconfigurator_core", "needs the aiconfigurator extra"),
}

PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z_]+(\.[a-z]+)?|[A-Z_]+=[A-Z_]+)$")
PATH_SUFFIXES = (".toml", ".csv", ".json", ".jsonl", ".py", ".md", ".yaml", ".yml", ".png", ".html", ".txt")
OUTPUT_FLAGS = ("--out", "--calibrate-frontend")
TOP_LEVEL = sorted(p.name for p in REPO.iterdir() if not p.name.startswith(".") and p.name != "runs")


@dataclass
class DocCommand:
    """One command line of a doc's bash block, with the `curl` lines that go to it (a server)."""

    doc: Path
    line: int
    text: str
    tokens: list[str]
    clients: list["DocCommand"] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}:{' '.join(self.tokens[:3])}"

    @property
    def program(self) -> str:
        """`servesim simulate`, `benchmarks/x.py`, `make`, `pip`, `curl`, `streamlit run`."""
        t = self.tokens
        if t[0] == "servesim":
            if len(t) > 2 and t[1] == "calibrate" and not t[2].startswith("-"):
                return f"servesim calibrate {t[2]}"
            return f"servesim {t[1]}" if len(t) > 1 else "servesim"
        if t[0] in ("python", "python3"):
            return t[2] if t[1] == "-m" else t[1]
        return " ".join(t[:2]) if t[0] == "streamlit" else t[0]

    @property
    def is_synopsis(self) -> bool:
        return any(PLACEHOLDER.match(t) or t.startswith("[") for t in self.tokens[1:])

    @property
    def is_server(self) -> bool:
        return self.program == "servesim serve" and "--calibrate-frontend" not in self.tokens


def bash_blocks(doc: Path):
    """(first line number, lines) of each ```bash block."""
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            start, body = i + 2, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            yield start, body
        i += 1


def doc_commands() -> list[DocCommand]:
    out: list[DocCommand] = []
    for doc in DOCS:
        for start, body in bash_blocks(doc):
            server = None
            k = 0
            while k < len(body):
                first, text = k, body[k]
                while text.rstrip().endswith("\\") and k + 1 < len(body):
                    k += 1
                    text = text.rstrip()[:-1] + " " + body[k].strip()
                k += 1
                tokens = shlex.split(text, comments=True)
                if not tokens:
                    continue
                cmd = DocCommand(doc, start + first, text, tokens)
                if cmd.program == "curl" and server is not None:
                    server.clients.append(cmd)
                    continue
                server = cmd if cmd.is_server else None
                out.append(cmd)
    return out


def named_paths(cmd: DocCommand) -> tuple[list[str], list[str]]:
    """(paths the command reads, paths it writes) among its arguments."""
    reads, writes = [], []
    tokens = cmd.tokens[1:]
    for i, tok in enumerate(tokens):
        value = tok.split("=", 1)[1] if "=" in tok and not tok.startswith("-") else tok
        if value.startswith("-") or "://" in value or ":" in value or "{" in value or PLACEHOLDER.match(value):
            continue
        if "/" not in value and not value.endswith(PATH_SUFFIXES):
            continue
        if cmd.tokens[0] in ("pip", "make", "curl"):
            continue
        (writes if i > 0 and tokens[i - 1] in OUTPUT_FLAGS else reads).append(value)
    return reads, writes


def treatments(cmd: DocCommand) -> list[tuple[str, str]]:
    """Every ("skip" | "slow" | "gpu" | "shared" | "module NAME", reason) that applies; none: run it."""
    text = " ".join(cmd.tokens)
    out = [how for pattern, how in REASONS.items() if re.search(pattern, text)]
    if cmd.is_synopsis:
        out.insert(0, ("skip", "a synopsis (placeholders); its paths are checked"))
    if "cuda" in cmd.tokens:
        out.append(("gpu", "needs a CUDA GPU"))
    if any("../shared" in t for t in cmd.tokens):
        out.append(("shared", "reads ../shared/data"))
    return out


COMMANDS = doc_commands()
#: what the docs' commands write: later commands may read it, so it need not exist beforehand
WRITTEN = {p for c in COMMANDS for p in named_paths(c)[1]}


def marks(cmd: DocCommand) -> list:
    if cmd.is_synopsis:  # only its paths are checked: quick
        return []
    kinds = {kind for kind, _ in treatments(cmd)}
    return [getattr(pytest.mark, k) for k in ("slow", "gpu") if k in kinds]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A scratch folder laid out like a clone: the repository's entries linked in, ../shared/data beside it."""
    root = tmp_path_factory.mktemp("docs")
    work = root / "servesim"
    work.mkdir()
    for name in TOP_LEVEL:
        (work / name).symlink_to(REPO / name)
    if shared_data_present():
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(SHARED_DATA)
    return work


def environment() -> dict:
    env = dict(os.environ, SERVESIM_SMALL="1", PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    env.pop("SERVESIM_NOTEBOOK_SMALL", None)
    return env


def argv(cmd: DocCommand) -> list[str]:
    t = cmd.tokens
    if t[0] == "servesim":
        return [sys.executable, "-m", "servesim.cli", *t[1:]]
    if t[0] in ("python", "python3"):
        return [sys.executable, *t[1:]]
    return list(t)


def run_server(cmd: DocCommand, cwd: Path) -> str:
    """Start the server on a free port, send it the docs' curl lines, stop it with Ctrl-C: its output."""
    args = argv(cmd)
    port_at = args.index("--port") + 1 if "--port" in args else None
    doc_port = args[port_at] if port_at else "8000"
    if port_at:
        args[port_at] = "0"
    else:
        args += ["--port", "0"]
    proc = subprocess.Popen(args, cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = []
    try:
        url = None
        for line in proc.stdout:  # until the bound URL is printed (or the server exits)
            seen.append(line)
            m = re.search(r"on http://([\d.]+):(\d+)", line)
            if m:
                url = m.group(2)
                break
        assert url, "the server did not start:\n" + "".join(seen)
        for client in cmd.clients:
            c = [t.replace(f"localhost:{doc_port}", f"127.0.0.1:{url}") for t in client.tokens]
            res = subprocess.run([*c[:1], "--fail", "--max-time", "120", *c[1:]], cwd=cwd, capture_output=True,
                                 text=True, timeout=180)
            assert res.returncode == 0, f"{client.text}: exit {res.returncode}\n{res.stderr}"
            assert res.stdout.strip(), f"{client.text}: empty answer"
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    seen.append(rest)
    assert proc.returncode in (0, 130), "".join(seen)  # 130: stopped by Ctrl-C, as the docs say to
    return "".join(seen)


@pytest.mark.parametrize("cmd", [pytest.param(c, id=c.id, marks=marks(c)) for c in COMMANDS])
def test_documented_command_works_as_written(cmd: DocCommand, clone: Path):
    how = treatments(cmd)
    no_data = any(kind == "shared" for kind, _ in how) and not shared_data_present()
    reads, writes = named_paths(cmd)
    for path in reads:
        if path in WRITTEN or (no_data and "../shared" in path):
            continue
        assert (clone / path).exists(), f"{cmd.doc.name}:{cmd.line}: {path} does not exist ({cmd.text.strip()})"
    for kind, reason in how:
        if kind == "skip" or (kind == "shared" and no_data):
            pytest.skip(reason)
        if kind.startswith("module "):
            pytest.importorskip(kind.split()[1], reason=reason)
    if cmd.is_server:
        run_server(cmd, clone)
    else:
        proc = subprocess.run(argv(cmd), cwd=clone, env=environment(), capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        assert proc.returncode == 0, f"{cmd.text.strip()}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n" \
                                     f"{proc.stderr[-4000:]}"
    for path in writes:
        assert (clone / path).exists(), f"{cmd.text.strip()}: wrote no {path}"


def test_the_docs_have_commands():
    programs = {c.program for c in COMMANDS}
    assert {"servesim simulate", "servesim run", "servesim serve", "servesim validate", "make"} <= programs


# --- paths in the prose -------------------------------------------------------------------------------
INLINE = re.compile(r"`([^`\s]+)`")
ROOTS = tuple(f"{name}/" for name in TOP_LEVEL)


def prose_paths(doc: Path) -> list[str]:
    """Inline-code spans of `doc` that are repository paths (start at a top-level entry; no
    placeholders, globs or outputs under runs/)."""
    out = []
    for span in INLINE.findall(doc.read_text()):
        span = span.rstrip(".,;:").split(":", 1)[0]  # `policies/presets.py:VLLM_VERSIONS`: the file
        if not span.startswith(ROOTS) and span not in TOP_LEVEL:
            continue
        if any(ch in span for ch in "<>*[]=(") or span.startswith("runs/"):
            continue
        out += expand_braces(span)
    return out


def expand_braces(span: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", span)
    if not m:
        return [span]
    return [p for alt in m.group(1).split(",") for p in expand_braces(span[:m.start()] + alt + span[m.end():])]


@pytest.mark.parametrize("doc", [*DOCS, *sorted(REPO.glob("*/README.md")), *sorted(REPO.glob("examples/*/README.md"))],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_the_docs_name_exists(doc):
    missing = [p for p in prose_paths(doc) if not (REPO / p).exists()]
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"

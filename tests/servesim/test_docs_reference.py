"""What the docs say of the code's names holds: config keys, their defaults, command flags, dotted names.

`test_docs_commands.py` runs the docs' commands; this module checks the reference text a user reads
instead of `--help` or the source:

- every key of every config section (the frozen dataclasses `sim.config.section_types()` builds, and
  `[serve]`'s) is named in its section's row of README.md's *Configuration reference*, and no row names
  a section the loader does not know;
- a key's parenthesis that opens with a TOML literal (`(2048; ...)`, `("chunked"; ...)`, `(false)`)
  states its default: it must be the dataclass's (prose such as `(the model's context length)` is not
  checked);
- every `section.key` a doc gives to `--set`, and every one in README.md's inline code, is a config key
  (`slo.min_attainment` is a flag, `--slo-attainment`, not a key);
- every `--flag` of a `servesim ...` line (code blocks and inline code of README.md, docs/*.md and the
  package READMEs) is a flag of that command, synopsis lines included (those are not run);
- every dotted name in inline code that starts at one of the project's packages
  (`sim.capacity.search.find_max_rate`) imports and resolves;
- every key of a small simulation's `summary.json` and every column of its tables is named in
  docs/formats.md.

Only names the docs give are checked against the code, and only keys against the docs: prose may say
anything around them.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from gpu_backend.serve.config import ServeConfig
from servesim.cli import SUBCOMMANDS
from sim.config import load_config, section_types
from sim.runner import simulate

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("*/README.md")),
        *sorted(REPO.glob("examples/*/README.md"))]
PACKAGES = ("policies", "sim", "calibrate", "gpu_backend", "records", "specs", "fidelity", "servesim")


def sections() -> dict[str, type]:
    return {**section_types(), "serve": ServeConfig}


def reference_rows() -> dict[str, str]:
    """Section name -> its row of README.md's configuration table (`| `[name]` | keys |`)."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^\| `\[(\w+)\]` \| (.*)\|\s*$", README.read_text(), re.M)}


def keys(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.init]


def test_the_reference_has_a_row_for_each_section_and_no_other():
    assert set(reference_rows()) == set(sections())


@pytest.mark.parametrize("name", sorted(sections()))
def test_every_config_key_is_in_its_sections_row(name):
    row = reference_rows()[name]
    missing = [f.name for f in keys(sections()[name]) if f"`{f.name}`" not in row]
    assert not missing, f"README.md's [{name}] row does not name {missing}"


def stated_default(row: str, key: str):
    """The TOML literal a key's parenthesis opens with (up to `;`, `:`, ` = `, ` or `, `, `), or None."""
    m = re.search(rf"`{key}` \(([^;:)]*)", row)
    if not m:
        return None
    first = re.split(r" = | or |, ", m.group(1))[0].strip()
    try:
        return tomllib.loads(f"v = {first}")["v"]
    except tomllib.TOMLDecodeError:  # prose, not a value
        return None


@pytest.mark.parametrize("name", sorted(sections()))
def test_every_stated_default_is_the_codes(name):
    row = reference_rows()[name]
    wrong = []
    for f in keys(sections()[name]):
        stated = stated_default(row, f.name)
        if stated is not None and f.default is not dataclasses.MISSING and stated != f.default:
            wrong.append(f"{f.name}: the README says {stated!r}, the code's default is {f.default!r}")
    assert not wrong, f"[{name}]: " + "; ".join(wrong)


def config_keys_named(doc: Path) -> set[str]:
    """`section.key` names a doc gives as config keys: every `--set SECTION.KEY=...`, and (README.md,
    whose inline code names keys that way) every inline span of that shape whose section is a config
    section and not a package (`sim.max_sim_time_s` is a key, `sim.runner` a module)."""
    text = doc.read_text()
    named = {m.group(1) for m in re.finditer(r"--set[ =]([a-z_]+\.[a-z_]+)", text)}
    if doc == README:
        named |= set(re.findall(r"`([a-z_]+\.[a-z_]+)`", text))
    return {name for name in named if name.split(".")[0] in sections()}  # `--set section.key=`: a synopsis


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_key_a_doc_names_exists(doc):
    wrong = []
    for name in sorted(config_keys_named(doc)):
        section, key = name.split(".")
        if key in {f.name for f in keys(sections()[section])}:
            continue
        if section in PACKAGES and resolves(name):
            continue
        wrong.append(name)
    assert not wrong, f"{doc.name} names config keys that do not exist: {wrong}"


# --- command flags ---------------------------------------------------------------------------------
def flags_by_command() -> dict[str, set[str]]:
    """'servesim simulate' -> its option strings; subcommands of a command ('servesim calibrate import') too."""
    out: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        out[prefix] = set()
        for action in parser._actions:
            out[prefix] |= set(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub, sub_parser in action.choices.items():
                    walk(sub_parser, f"{prefix} {sub}")

    for name, (module, _) in SUBCOMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"servesim {name}")
        importlib.import_module(module).configure(parser)
        walk(parser, f"servesim {name}")
    return out


def servesim_lines(doc: Path) -> list[tuple[int, str]]:
    """(line number, text) of each `servesim ...` command: code-block lines (continuations joined) and
    inline-code spans."""
    lines = doc.read_text().splitlines()
    out, in_block, i = [], False, 0
    while i < len(lines):
        line, number = lines[i], i + 1
        if line.strip().startswith("```"):
            in_block = not in_block
        elif in_block:
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            if line.strip().startswith("servesim "):
                out.append((number, line.strip()))
        else:
            out += [(number, span) for span in re.findall(r"`(servesim [^`]+)`", line)]
        i += 1
    return out


def command_of(tokens: list[str], known: dict[str, set[str]]) -> str | None:
    """The longest known command the tokens start with ('servesim calibrate import' before 'servesim calibrate')."""
    for n in (3, 2):
        name = " ".join(tokens[:n])
        if name in known:
            return name
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_flag_a_doc_gives_a_command_is_its_flag(doc):
    known = flags_by_command()
    wrong = []
    for number, text in servesim_lines(doc):
        tokens = shlex.split(text.replace("[", " ").replace("]", " "), comments=True)
        command = command_of(tokens, known)
        if command is None:
            if len(tokens) > 1 and not tokens[1].startswith(("-", "<")) and tokens[1] not in ("...",):
                wrong.append(f"{doc.name}:{number}: {' '.join(tokens[:2])} is no command")
            continue
        for token in tokens:
            flag = token.split("=", 1)[0]
            if flag.startswith("--") and flag not in known[command]:
                wrong.append(f"{doc.name}:{number}: {command} has no {flag}")
    assert not wrong, "\n".join(wrong)


# --- dotted names ----------------------------------------------------------------------------------
def resolves(name: str) -> bool:
    """`name` is a module, or an attribute chain on the longest module prefix that imports."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] not in PACKAGES:  # an extra not installed here
                pytest.importorskip(exc.name.split(".")[0])
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_dotted_name_a_doc_gives_resolves(doc):
    pattern = re.compile(rf"({'|'.join(PACKAGES)})(\.[A-Za-z_]\w*)+")
    names = {span.rstrip(".,;:") for span in re.findall(r"`([^`\s(]+)", doc.read_text())}
    missing = sorted(n for n in names if pattern.fullmatch(n) and not resolves(n))
    assert not missing, f"{doc.name} names what does not exist: {missing}"


# --- result files ----------------------------------------------------------------------------------
def test_every_result_key_and_column_is_in_the_formats_page():
    """A small simulation's summary.json keys and requests/steps columns are each named in docs/formats.md."""
    result = simulate(load_config(REPO / "examples/default.toml", ["workload.num_requests=20"]))
    text = (REPO / "docs/formats.md").read_text()
    names = [*result.summary, *result.requests.columns, *result.steps.columns]
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/formats.md does not name {missing}"

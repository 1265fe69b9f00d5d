"""The flags every `servesim` command spells and explains the same way, and what they mean in code.

A command adds the flags that make sense for it with the `add_*` functions, so that `--set`,
`--out`, `--quiet`, `--no-progress`, `--json`, `--device` and `--threads` read the same in every
`--help` and mean the same everywhere:

- `--set SECTION.KEY=VALUE` (repeatable, `args.overrides`): one config value, a TOML scalar;
- `--out`: where the command writes what it made (a folder, or a file where it makes one file);
- `--quiet`: nothing on the terminal but errors and warnings; `--no-progress`: no progress bar only;
- `--json`: the result as JSON on stdout instead of the table (notes go to stderr, as always);
- `--device cpu|cuda` and `--threads N`: where the torch engine runs, and its CPU threads.

`say` prints a command's tables and `note` its notes (one line each, on stderr) unless `--quiet`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from policies import ConfigError
from records.files import json_safe
from servesim.commands import small
from sim.config import load_config
from sim.notes import with_notes

SET_HELP = ("override one config value (repeatable): a TOML scalar, a bare word is a string, "
            "e.g. --set scheduler.policy=continuous")
QUIET_HELP = "print nothing but errors and warnings: no progress bar, tables or notes"
NO_PROGRESS_HELP = "no progress bar (tables and notes still print)"
DEVICE_HELP = "where the torch engine runs (default cpu)"
OUT_CHECK = "_check_out_"  # + an --out flag's dest: True where it names a folder (`check_out`)
THREADS_HELP = ("torch CPU threads (default 1: a tiny model gains nothing from more, and on a busy machine "
                "spinning OpenMP threads slow every step)")


def add_config(parser: argparse.ArgumentParser, help: str = "a TOML config (see examples/)", optional: bool = False,
               ) -> None:
    parser.add_argument("config", nargs="?" if optional else None, help=help)


def add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help=SET_HELP)


def add_out(parser: argparse.ArgumentParser, what: str, default: str | None = None, required: bool = False,
            metavar: str = "DIR", dest: str = "out", default_text: str | None = None) -> None:
    """`--out`: `what` the command writes there (a folder unless `metavar` says FILE); `default_text`
    describes a default the command works out itself."""
    where = "this file" if metavar.endswith(("FILE", ".json")) else "this folder"
    shown = default_text or default
    tail = f" (default {shown})" if shown is not None else ""
    parser.add_argument("--out", dest=dest, default=default, required=required, metavar=metavar,
                        help=f"write {what} to {where}{tail}")
    # checked before the command works (`check_out`): a long run must not end on a path it cannot write
    parser.set_defaults(**{OUT_CHECK + dest: where == "this folder"})


def check_out(args: argparse.Namespace) -> None:
    """Refuse, before any work, an `--out` the command could not write: a file where a folder is
    wanted, a folder where a file is wanted, a place under no writable folder."""
    for key, folder in vars(args).items():
        value = getattr(args, key[len(OUT_CHECK):], None) if key.startswith(OUT_CHECK) else None
        if value is None:
            continue
        if not str(value).strip():  # Path("") is the current folder: never where a user meant to write
            raise ConfigError(f"--out: empty; give a {'folder' if folder else 'file name'}")
        path = Path(value)
        if folder and path.exists() and not path.is_dir():
            raise ConfigError(f"--out: {path} is a file; give a folder (it is made if missing)")
        if not folder and path.is_dir():
            raise ConfigError(f"--out: {path} is a folder; give a file name")
        parent = next((p for p in (path if folder else path.parent, *path.parents) if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"--out: {path}: cannot write under {parent}")


def add_quiet(parser: argparse.ArgumentParser, progress: bool = True, subcommand: bool = False) -> None:
    """`--quiet` and (for commands with a progress bar) `--no-progress`. `subcommand`: the parser of
    an action (`calibrate import`), whose unset flags must not undo the same flag given before it."""
    default = argparse.SUPPRESS if subcommand else False
    parser.add_argument("--quiet", action="store_true", default=default, help=QUIET_HELP)
    if progress:
        parser.add_argument("--no-progress", action="store_true", default=default, help=NO_PROGRESS_HELP)


def add_json(parser: argparse.ArgumentParser, what: str = "the summary", subcommand: bool = False) -> None:
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if subcommand else False,
                        help=f"print {what} as JSON on stdout instead of the table")


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help=DEVICE_HELP)


def add_threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, metavar="N", help=THREADS_HELP)


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity set where the OS has one (a container or `taskset`
    may allow fewer than the machine has), else every CPU the machine has."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_threads(args: argparse.Namespace) -> int:
    """`--threads`, refused below 1 or above the CPUs this process may use: torch given more threads
    than that spins them all (a machine brought to a crawl) or crashes in OpenMP (a segmentation
    fault, no message)."""
    threads, cpus = args.threads, usable_cpus()
    if threads < 1:
        raise ConfigError(f"--threads: must be >= 1, got {threads}")
    if threads > cpus:
        raise ConfigError(f"--threads: {threads} is more than the {cpus} CPU(s) this process may use; "
                          f"choose 1..{cpus}")
    return threads


# --- what the flags mean ----------------------------------------------------------------------------
def progress(args: argparse.Namespace) -> bool:
    """Whether a progress bar may show."""
    return not (getattr(args, "quiet", False) or getattr(args, "no_progress", False))


def quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def say(args: argparse.Namespace, *lines: str) -> None:
    """Print a command's table or report lines (stdout) unless --quiet (with --json: to stderr)."""
    if quiet(args):
        return
    stream = sys.stderr if getattr(args, "json", False) else sys.stdout
    for line in lines:
        print(line, file=stream)


def note(args: argparse.Namespace, *notes: str) -> None:
    """One `note: ...` line per note on stderr, unless --quiet."""
    if quiet(args):
        return
    for text in notes:
        print(f"note: {text}", file=sys.stderr)


def written(out: Path) -> str:
    """The files a command wrote into `out`, for its last line: every file there, by name."""
    return ", ".join(sorted(p.name for p in Path(out).iterdir() if p.is_file()))


def print_json(obj) -> None:
    """`obj` as JSON on stdout (NaN/inf and numpy values made JSON-safe)."""
    def plain(v):  # numpy scalars (table cells), paths
        return v.item() if hasattr(v, "item") else str(v)

    print(json.dumps(json_safe(obj), indent=2, default=plain))


def flush_stdout() -> None:
    """Flush stdout; a reader that left (`| head`) is not an error."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (keeps the interpreter's final flush quiet)


# --- the config a command's arguments name ------------------------------------------------------------
def load_config_args(args: argparse.Namespace, source=None):
    """The Config of `source` (default `args.config`) with `args.overrides`, shortened in small mode.

    `SERVESIM_SMALL`'s caps (servesim.commands.small) are appended to `args.overrides`, so that a
    command which loads the config again (sweep points, validate) sees them; their notes are the
    config's, beside the loader's own (sections of other commands).
    """
    source = args.config if source is None else source
    config = load_config(source, args.overrides)
    extra, notes = small.caps(config)
    if extra:
        args.overrides = [*args.overrides, *extra]
        config = load_config(source, args.overrides)
    return with_notes(config, notes)

"""The project's JSON files, read and written in one place (stdlib only: specs and catalogs use it too).

`read_json_object` reads any of them (profiles, front-end and host layers, HF config.json, reports),
`read_json` any JSON value, `read_json_lines` a JSON Lines file (`iter_json_lines` as it reads): every way a read can fail is one
line starting with the field the file came from. `write_json` writes one (UTF-8, indented, one
trailing newline, its folder made). A summary (`write_summary`, `json_safe`) is written with
NaN/inf as null, since JSON has no NaN, and numpy scalars as plain numbers (`json_default`);
`servesim ... --json` prints the same way. `write_content_file` writes a file named by its
content (a profile or trace the app or a run's config points to), once.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path

from policies import ConfigError


def read_json(path: str | Path, field: str, *, missing: type[Exception] = ConfigError) -> object:
    """The JSON value in the file at `path`; every way it can fail is one line starting with `field`.

    A missing file raises `missing` (callers that promised `FileNotFoundError` keep it); an unreadable
    file, bad UTF-8 or bad JSON (an empty or truncated file, say) raise `ConfigError`.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")  # JSON is UTF-8 (RFC 8259), whatever the locale says
    except FileNotFoundError:
        raise missing(f"{field}: no such file {path}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{field}: {path} is not valid JSON (not UTF-8: {exc.reason} at byte {exc.start})") from None
    except OSError as exc:  # a directory, no permission, ...
        raise ConfigError(f"{field}: cannot read {path} ({exc.strerror or exc})") from None
    if not text.strip():
        raise ConfigError(f"{field}: {path} is not valid JSON (the file is empty)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{field}: {path} is not valid JSON ({exc})") from None


def read_json_object(path: str | Path, field: str, *, missing: type[Exception] = ConfigError) -> dict:
    """The JSON object in the file at `path` (`read_json`); a top level that is not an object is a
    `ConfigError` too."""
    data = read_json(path, field, missing=missing)
    if not isinstance(data, dict):
        raise ConfigError(f"{field}: {path} does not hold a JSON object (its top level is {_json_kind(data)})")
    return data


def iter_json_lines(path: str | Path, field: str, *, missing: type[Exception] = ConfigError):
    """(line number, object) for each non-blank line of a JSON Lines file, read as it goes (a trace
    of millions of lines is never held as text); a line that is not a JSON object is refused naming
    `field`, the file and the line, and so is a file that is not UTF-8 (a leading BOM is allowed)."""
    path = Path(path)
    try:
        f = path.open("r", encoding="utf-8-sig")
    except FileNotFoundError:
        raise missing(f"{field}: no such file {path}") from None
    except OSError as exc:  # a directory, no permission, ...
        raise ConfigError(f"{field}: cannot read {path} ({exc.strerror or exc})") from None
    with f:
        try:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{field}: {path} line {number} is not valid JSON ({exc})") from None
                if not isinstance(data, dict):
                    raise ConfigError(f"{field}: {path} line {number} does not hold a JSON object "
                                      f"(it is {_json_kind(data)})")
                yield number, data
        except UnicodeDecodeError as exc:  # a file saved in another encoding (Latin-1, UTF-16)
            raise ConfigError(f"{field}: {path} is not UTF-8 text ({exc.reason}); save it as UTF-8") from None


def read_json_lines(path: str | Path, field: str, *, missing: type[Exception] = ConfigError) -> list[dict]:
    """The JSON objects of a JSON Lines file, one per non-blank line (`iter_json_lines`)."""
    return [data for _, data in iter_json_lines(path, field, missing=missing)]


def write_json(path: str | Path, data: object, *, indent: int = 2, default=None) -> Path:
    """Write `data` as JSON (one trailing newline) to `path`, making its folder; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=default) + "\n", encoding="utf-8")
    return path


def write_content_file(folder: str | Path, prefix: str, data: bytes, suffix: str = ".json") -> Path:
    """`data` in `folder` (made) as `<prefix><hash of data><suffix>`, written once and atomically:
    the same content is one file (and one cached config that names it), and a concurrent writer
    never leaves half a file where a reader can see it."""
    path = Path(folder) / f"{prefix}{hashlib.sha256(data).hexdigest()[:20]}{suffix}"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path


def write_summary(path: str | Path, summary: dict) -> Path:
    """A run's summary.json: NaN/inf as null, numpy scalars as numbers."""
    return write_json(path, json_safe(summary), default=json_default)


def json_safe(obj):
    """A copy of a summary fit for JSON: NaN/inf become null (json.dumps would write invalid NaN)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_default(obj):
    """`json.dumps`'s `default` for table cells: numpy integers and floats as Python numbers."""
    np = sys.modules.get("numpy")  # not loaded: `obj` is no numpy scalar (and this module stays stdlib)
    if np is not None:
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.floating):
            return float(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _json_kind(value: object) -> str:
    """JSON's own name for a parsed value's type ("an array", "null", ...), for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {list: "an array", str: "a string"}.get(type(value), "a number")

"""YAML files (run configs, client and workload profiles) read in one place.

`read_yaml` returns the mapping a file holds; every way a read can fail is one line naming the
file (after `field`, the setting it came from, where given) and, for bad YAML, where the parser
stopped, so that neither `sim` nor `fidelity` shows yaml's traceback.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from policies import ConfigError


def read_yaml(path: str | Path, field: str = "") -> dict:
    """A YAML (or JSON) mapping; an empty file is an empty mapping."""
    head = f"{field}: {path}" if field else f"{path}"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{head}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{head}: is a folder, not a YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{head}: not valid YAML{where}: {what}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{head}: not valid YAML (not UTF-8: {exc.reason} at byte {exc.start})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{head}: expected a mapping at the top level, got {type(data).__name__}")
    return data

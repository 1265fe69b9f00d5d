"""Workload kinds and trace formats that other packages add to `sim.workload`.

The simulator knows arrival processes and the trace formats of its own; a load generator's exact
semantics or a published dataset's layout belong to the package that knows that source
(`fidelity`), which registers them here when it is imported (the `servesim` command and the app do).

- `register_kind(ProfileKind(...))`: `workload.kind = name` runs the file `workload.profile` (a YAML
  or JSON mapping, `read_profile`). `check(profile)` raises a ConfigError naming the profile's field
  when the config is made; `build(profile, seed)` returns the Workload (`start()`, `on_finish()`).
- `register_trace_format(TraceFormat(...))`: `workload.trace_format = name` reads a trace with
  `read(path, field) -> (arrivals, prompts, outputs, priorities, hash ids)`; `detect(columns)` tells
  the format from a CSV header when `trace_format = "auto"`. A format without arrival times
  (`has_arrivals=False`) gives lengths only.

Names are registered in order; registering a name again replaces it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from policies.config import ConfigError


@dataclass(frozen=True)
class ProfileKind:
    """A workload kind run from a profile file by another package's generator."""

    name: str
    check: Callable[[dict], object]  # raises ConfigError naming `profile.<key>`
    build: Callable[[dict, int], object]  # (profile, seed) -> Workload
    needs: str  # what the profile file holds, for the error when it is missing


@dataclass(frozen=True)
class TraceFormat:
    """A trace file layout read by another package."""

    name: str
    read: Callable[[Path, str], tuple]  # (path, field) -> (arrivals, prompts, outputs, priorities, hash ids)
    detect: Callable[[list[str]], bool]  # the CSV header's columns -> is it this format
    header: str  # the columns that tell it, for the error when no format matches
    has_arrivals: bool = True


KINDS: dict[str, ProfileKind] = {}
TRACE_FORMATS: dict[str, TraceFormat] = {}


def register_kind(kind: ProfileKind) -> None:
    KINDS[kind.name] = kind


def register_trace_format(fmt: TraceFormat) -> None:
    TRACE_FORMATS[fmt.name] = fmt


def read_profile(path: str) -> dict:
    """A profile file (YAML or JSON) as a mapping."""
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ConfigError(f"workload.profile: {path} must hold a mapping (the profile's sections)")
    return data

"""Workload kinds and trace formats that other packages add to `sim.workload`.

The simulator knows arrival processes and the trace formats of its own; a load generator's exact
semantics or a published dataset's layout belong to the package that knows that source
(`fidelity`), which registers them here when it is imported (the `servesim` command and the app do).

- `register_kind(ProfileKind(...))`: `workload.kind = name` runs the file `workload.profile` (a YAML
  or JSON mapping, `read_profile`; a profile without a kind goes to the first kind that takes it,
  `kind_of`). `check(profile)` raises a ConfigError naming the profile's field
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

from policies.config import ConfigError
from records.yaml_file import read_yaml

#: where a kind or format a config names but nobody registered comes from (`sim` names no source)
REGISTERED_BY = ("the servesim commands register the sources' own kinds and formats; from Python, "
                 "import fidelity.workloads first")


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


def kind_of(path: str) -> str | None:
    """The registered kind whose generator takes the profile file at `path` (the first in order),
    for a config that gives `workload.profile` without `workload.kind`. Where the file cannot be
    read, or no kind takes it and one is registered, that first kind (its own check then says
    why); where no kind takes it but one refused a value the profile gives (not a missing key),
    that kind; None when none is registered. Refused with each kind's own error otherwise."""
    if not KINDS:
        return None
    first = next(iter(KINDS))
    try:
        profile = read_profile(path)
    except (OSError, ConfigError):
        return first
    errors, written_for = [], []
    for kind in KINDS.values():
        try:
            kind.check(profile)
        except (ConfigError, ValueError) as exc:
            errors.append(f"kind = {kind.name!r}: {exc}")
            if _has_field(profile, str(exc)):  # a value of the profile's own key refused: its kind
                written_for.append(kind.name)
            continue
        return kind.name
    if len(KINDS) == 1 or len(written_for) == 1:
        return written_for[0] if written_for else first
    raise ConfigError(f"workload.profile: {path} is a profile of none of the registered kinds "
                      f"({'; '.join(errors)}); name workload.kind")


def _has_field(profile: dict, error: str) -> bool:
    """True when `error` names (`profile.a.b: ...`) a key the profile has: the check refused a
    value the profile gives, so the profile was written for that kind (not merely lacking its keys)."""
    head = error.split(":", 1)[0]
    if not head.startswith("profile."):
        return False
    node = profile
    for key in head[len("profile."):].split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def read_profile(path: str) -> dict:
    """A profile file (YAML or JSON) as a mapping; a damaged one is one line naming
    `workload.profile` and the file (`records.yaml_file`)."""
    data = read_yaml(path, "workload.profile")
    if not data:
        raise ConfigError(f"workload.profile: {path} must hold a mapping (the profile's sections)")
    return data

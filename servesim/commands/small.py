"""`SERVESIM_SMALL=1`: every command runs a short version of what it was asked.

tests/servesim/test_docs_commands.py runs each command line of README.md and docs/*.md as written,
with this variable set (as `SERVESIM_NOTEBOOK_SMALL` shortens the notebooks): a command caps its
workload at `NUM_REQUESTS` requests (sweeps, searches and plans: at every point, before a held
arrival window scales the count with the rate), `calibrate` and `validate` calibrate on the smoke
grid, and `serve --calibrate-frontend` times 3 requests a length; each says so in a note, which
the resolved config records like any other. The short run goes down the same code paths.
"""
from __future__ import annotations

import os

from sim.workload import registry

ENV = "SERVESIM_SMALL"
NUM_REQUESTS = 40


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() not in ("", "0")


def caps(config) -> tuple[list[str], list[str]]:
    """(`--set` overrides, notes) that shorten `config` in small mode; nothing otherwise."""
    if not enabled():
        return [], []
    w = config.workload
    if w.kind in registry.KINDS:  # a load generator's own profile (fidelity registers them)
        return [], [f"{ENV}=1: the workload.profile (workload.kind = {w.kind}) runs as given"]
    if w.num_requests is not None and w.num_requests <= NUM_REQUESTS:
        return [], []
    was = "unset" if w.num_requests is None else f"{w.num_requests:,}"
    return [f"workload.num_requests={NUM_REQUESTS}"], [f"{ENV}=1: workload.num_requests = {NUM_REQUESTS} (was {was})"]

"""Where the public data folder is: `$SERVESIM_SHARED_DATA`, else `../shared/data` beside the clone.

The importers' default folders (`vidur-per-op`, `h100-kernel-microbench`) and the test suite's
`shared_data` fixture read this one place, so that pointing the variable at another folder (CI's
second run points it at an empty one, as a user's clone without ../shared) moves them all.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "SERVESIM_SHARED_DATA"


def shared_data_dir() -> Path:
    """The data folder (it may not exist: a clone without ../shared)."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_data_present() -> bool:
    """True when the data folder exists and holds anything: an empty folder (CI's second run, a
    user's placeholder) counts as absent, so every test that reads the data skips instead of failing."""
    folder = shared_data_dir()
    return folder.is_dir() and any(folder.iterdir())

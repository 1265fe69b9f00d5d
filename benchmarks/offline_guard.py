"""The GPU check's guard: no network, no flash-attn, and a record of what each process imported.

The GPU machines this project is lent have torch and triton, no network, no flash-attn and none of
our other dependencies. `benchmarks/gpu_check.py` runs every stage in a process that calls
`install()` first (the pytest stage loads this module as a plugin: `-p offline_guard`), so a dry
run on any machine behaves as that one would:

- a connection to anything but this host raises `OSError` (an audit hook on `socket.connect`);
- `import flash_attn` raises ImportError, so the engine's attention falls back to torch
  (`gpu_backend.attention.select_backend`);
- with `$SERVESIM_GPU_CHECK_DENY` (a JSON list of top-level module names; the dry run sets it to
  every installed distribution outside torch's and the wheels' dependency closure), importing one
  raises ImportError: optional imports fall back as they will there, a needed one fails as there;
- at exit the top-level names of every module loaded from a file go to
  `$SERVESIM_GPU_CHECK_IMPORTS/<stage>-<pid>.json`: what a stage needs.
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import sys

STAGE_ENV, IMPORTS_ENV, DENY_ENV = "SERVESIM_GPU_CHECK_STAGE", "SERVESIM_GPU_CHECK_IMPORTS", "SERVESIM_GPU_CHECK_DENY"
_installed = False


def _local(address) -> bool:
    host = address[0] if isinstance(address, tuple) and address else address
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", "") or (isinstance(host, str) and host.startswith("127."))


def _audit(event: str, args) -> None:
    if event == "socket.connect":
        sock, address = args
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            raise OSError(f"gpu check: no network access (a connection to {address!r} was attempted)")


def _record_imports() -> None:
    folder = os.environ.get(IMPORTS_ENV)
    if not folder:
        return
    names = sorted({name.split(".")[0] for name, m in list(sys.modules.items())
                    if name and not name.startswith("_") and getattr(m, "__file__", None)})
    stage = os.environ.get(STAGE_ENV, "stage")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{stage}-{os.getpid()}.json"), "w") as f:
            json.dump({"stage": stage, "modules": names}, f)
    except OSError:
        pass


class _Deny:
    """A meta-path finder that refuses the top-level names it holds (see the module docstring)."""

    def __init__(self, names) -> None:
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002 (importlib's protocol)
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"gpu check: {name!r} is not on the GPU machine (not in the wheels)", name=name)
        return None


def install() -> None:
    """Block the network and flash-attn for this process and record its imports at exit (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    sys.addaudithook(_audit)
    sys.modules["flash_attn"] = None  # `import flash_attn` now raises ImportError
    deny = os.environ.get(DENY_ENV)
    if deny:
        with open(deny) as f:
            sys.meta_path.insert(0, _Deny(json.load(f)))
    atexit.register(_record_imports)


def pytest_configure(config) -> None:  # noqa: ARG001 (pytest hook: `-p offline_guard`)
    install()


if os.environ.get(STAGE_ENV):  # a stage's process: guarded from its first import of this module on
    install()                  # (pytest imports `-p` plugins before any conftest imports torch)

"""`SpoolFolder`: a streamed recorder's working folder, held by its process, swept once that has died.

A server streams its tables' segments (`records.table_spool`) into a hidden `.servesim-spool-*`
folder, in its records folder (--out) or the system's temporary one, and removes it when it stops.
A server killed by SIGKILL, or by the kernel's out-of-memory killer, never gets there: its folder
stayed behind, hidden, one more with every such kill, and nothing said that its records were never
written. So each folder holds a lock file that its process keeps locked (`flock`) while it lives,
with the process id in it; the kernel drops the lock when the process ends, however it ends. A new
folder's parent is swept first (`SpoolFolder.sweep`): a folder whose lock can be taken belongs to no
live process and is removed, with one line saying what it held; one still locked by another process
is a running server's, left alone, and where the parent is a records folder (`exclusive`) refused,
since two servers writing the same requests.csv at their shutdowns would overwrite each other.

A folder gets its name only once its lock is held (made under a `.servesim-claim-*` name, locked,
then renamed), so a sweep in another process never sees a live folder without its lock. Without
`fcntl` (not POSIX) there are no locks: nothing is swept and the folder is removed as before.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no flock
    fcntl = None

PREFIX = ".servesim-spool-"
CLAIM_PREFIX = ".servesim-claim-"
LOCK = "owner.lock"


class SpoolInUse(RuntimeError):
    """A records folder already holds a running server's working folder (`SpoolFolder.sweep`)."""


def _lock(path: Path) -> int | None:
    """An open descriptor of `path` locked exclusively, or None if another process holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _release(path: str, fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # drops the lock
    shutil.rmtree(path, ignore_errors=True)


def _num_rows(folder: Path, table: str) -> int:
    """Rows in a folder's CSV segments of `table` (lines less each file's header)."""
    rows = 0
    for path in folder.glob(f"{table}-*.csv"):
        with open(path, "rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        rows += max(lines - 1, 0)
    return rows


class SpoolFolder:
    """A working folder in `parent` (None: the system's temporary folder), locked by this process
    until `cleanup()`, which removes it (as does collecting the object, or the interpreter's exit)."""

    def __init__(self, parent: str | Path | None = None) -> None:
        claim = Path(tempfile.mkdtemp(prefix=CLAIM_PREFIX, dir=parent))
        fd = None
        if fcntl is not None:
            fd = _lock(claim / LOCK)
            os.write(fd, str(os.getpid()).encode())
        self.path = claim.with_name(PREFIX + claim.name[len(CLAIM_PREFIX):])
        os.rename(claim, self.path)
        self._finalizer = weakref.finalize(self, _release, str(self.path), fd)

    def cleanup(self) -> None:
        """Release the lock and remove the folder (idempotent)."""
        self._finalizer()

    @staticmethod
    def sweep(parent: str | Path | None = None, exclusive: bool = False) -> list[str]:
        """Remove the working folders in `parent` (None: the system's temporary folder) that no live
        process holds; one line for each saying what it held. `exclusive`: `parent` is a records
        folder that one server at a time may use, so another process's live folder raises SpoolInUse."""
        if fcntl is None:
            return []
        base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
        removed = []
        for folder in sorted(base.glob(PREFIX + "*")) if base.is_dir() else ():
            lock = folder / LOCK
            if not folder.is_dir():
                continue
            try:
                fd = _lock(lock) if lock.exists() else None
            except OSError:  # not ours to open (another user's, in a shared temporary folder)
                continue
            owner = lock.read_text().strip() if lock.exists() else ""
            if lock.exists() and fd is None:  # locked: a live process's
                if exclusive and owner != str(os.getpid()):
                    raise SpoolInUse(f"{base} is the records folder of a running server (pid {owner or '?'}, "
                                     f"working folder {folder.name}); two servers would overwrite each other's "
                                     "tables there: give this one another")
                continue
            requests, steps = _num_rows(folder, "requests"), _num_rows(folder, "steps")
            _release(str(folder), fd)
            if folder.exists():  # not ours to remove (another user's, in a shared temporary folder)
                continue
            removed.append(f"removed {folder}, the working folder of a server that ended without writing its "
                           f"records (killed{f', pid {owner}' if owner else ''}): its {requests:,} request and "
                           f"{steps:,} step rows there were never written to requests.csv / steps.csv")
        return removed

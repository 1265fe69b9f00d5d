"""`SpoolFolder`: a working folder locked by its process; a sweep removes those of dead processes
only, and refuses a records folder another live process is serving into."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from records.spool_folder import PREFIX, SpoolFolder, SpoolInUse

REPO = Path(__file__).resolve().parents[2]


def other_process(parent: Path) -> subprocess.Popen:
    """A process holding a SpoolFolder in `parent` (with one segment row) until killed."""
    code = ("import sys; from records.spool_folder import SpoolFolder; f = SpoolFolder(sys.argv[1]); "
            "(f.path / 'requests-00000.csv').write_text('req_id\\nr0\\nr1\\n'); print(f.path, flush=True); "
            "sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(parent)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    proc.folder = Path(proc.stdout.readline().strip())
    return proc


def test_a_killed_process_s_folder_is_swept_with_what_it_held(tmp_path):
    proc = other_process(tmp_path)
    proc.send_signal(signal.SIGKILL)  # no finalizer runs: the folder stays, its lock is dropped
    proc.wait()
    assert proc.folder.is_dir()
    mine = SpoolFolder(tmp_path)
    (lines,) = SpoolFolder.sweep(tmp_path, exclusive=True)
    assert str(proc.folder) in lines and f"pid {proc.pid}" in lines and "2 request and 0 step rows" in lines
    assert not proc.folder.exists() and mine.path.is_dir()  # a live folder (this process's) is kept
    mine.cleanup()
    assert not mine.path.exists() and list(tmp_path.iterdir()) == []


def test_a_live_process_s_folder_is_kept_and_refused_for_a_records_folder(tmp_path):
    proc = other_process(tmp_path)
    try:
        assert SpoolFolder.sweep(tmp_path) == [] and proc.folder.is_dir()  # the system's temp folder: shared
        with pytest.raises(SpoolInUse, match=f"running server \\(pid {proc.pid}"):
            SpoolFolder.sweep(tmp_path, exclusive=True)
    finally:
        proc.stdin.close()  # it exits normally and removes its folder
        proc.wait()
    assert not proc.folder.exists()


def test_a_folder_without_a_lock_is_a_killed_server_s(tmp_path):
    """A folder of a server from before the lock (or half-made): nothing can own it."""
    old = tmp_path / f"{PREFIX}old"
    old.mkdir()
    (old / "steps-00000.csv").write_text("start\n1\n2\n3\n")
    (lines,) = SpoolFolder.sweep(tmp_path)
    assert "0 request and 3 step rows" in lines and not old.exists()

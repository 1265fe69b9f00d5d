"""`ServeProcess` with stand-in children: start-up is bounded, and a chatty child never blocks on its pipe."""
from __future__ import annotations

import sys
import time

import pytest

from fidelity.sources.guidellm_client import ServeProcess


class ScriptProcess(ServeProcess):
    """A ServeProcess whose child runs a Python snippet instead of `servesim serve`."""

    script = ""

    def command(self, config, device, extra):
        return [sys.executable, "-c", self.script]


def make_process(script: str, tmp_path, **kw) -> ServeProcess:
    cls = type("Script", (ScriptProcess,), {"script": script})
    return cls("unused.toml", tmp_path, **kw)


def test_a_child_that_never_prints_its_url_fails_within_the_startup_timeout(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start"):
        make_process("import time; time.sleep(60)", tmp_path, startup_timeout_s=1)
    assert time.monotonic() - t0 < 30  # not the child's 60 s: the wait is bounded, then it is stopped


def test_output_after_start_up_is_drained(tmp_path):
    marker = tmp_path / "wrote-everything"
    script = ("import sys, time\n"
              "print('servesim serve: m on http://127.0.0.1:1 (device cpu)', flush=True)\n"
              "sys.stdout.write('log line\\n' * 100_000); sys.stdout.flush()\n"  # ~1 MB: far beyond a pipe's buffer
              f"open({str(marker)!r}, 'w').close()\n"
              "time.sleep(60)\n")
    proc = make_process(script, tmp_path, startup_timeout_s=30)
    try:
        assert proc.url == "http://127.0.0.1:1"
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the child blocked writing to a pipe nobody reads"
    finally:
        proc.stop(timeout_s=5)
    assert proc.proc.returncode is not None

"""The engine's clocks: wall time, or wall time less the time the engine's thread waited for a core.

On a CPU shared with other processes a single-threaded engine step is often ready to run and not
running: the kernel gives the core to another task for whole scheduler ticks (4 ms here). That wait
is the machine's, not the engine's: a profile measured in thread CPU time cannot predict it, and
it is amplified into queueing when it lands on a busy stretch of a replay (docs/results/
2026-12-02-cpu-validation.md). `UncontendedClock` is `time.perf_counter` minus the thread's
run-queue wait from Linux's schedstat (`/proc/<pid>/task/<tid>/schedstat`, second field, ns): on a
quiet machine it is the wall clock; on a loaded one it is the wall clock the engine would have seen
had it had a core to itself (caches shared with the other tasks still slow its own work). It reads
the thread that made it, so it is for an engine stepping on one thread (`Engine.run_workload`, one
torch thread); sleeping does not count as waiting, so idle waits for arrivals pass as on the wall.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

CLOCKS = ("wall", "uncontended")


class UncontendedClock:
    """Seconds: `time.perf_counter()` minus the run-queue wait of the thread that created this clock."""

    def __init__(self) -> None:
        self._fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        self._last = float("-inf")

    def waited_s(self) -> float:
        """The thread's run-queue wait so far (ready to run, no core given), in seconds."""
        return int(os.pread(self._fd, 96, 0).split()[1]) * 1e-9

    def __call__(self) -> float:
        # A wait that lands between reading the wall and reading schedstat would be subtracted
        # from a wall reading taken before it, and the clock would step back by a scheduler tick:
        # read the wait on both sides of the wall and take a reading no wait fell inside.
        for _ in range(8):
            before = self.waited_s()
            wall = time.perf_counter()
            waited = self.waited_s()
            if waited == before:
                break
        # the kernel's run-queue clock and perf_counter differ by microseconds: never step back
        self._last = max(self._last, wall - waited)
        return self._last

    def __del__(self) -> None:
        try:
            os.close(self._fd)
        except (OSError, AttributeError):
            pass

    @staticmethod
    def available() -> bool:
        """True where the kernel exposes per-thread schedstat (Linux with sched info)."""
        try:
            UncontendedClock().waited_s()
        except (OSError, ValueError, IndexError):
            return False
        return True


class ExcludingClock:
    """An engine clock that leaves out the intervals run inside `excluded()`: work done on the engine's
    thread between steps that is not the engine's (`calibrate.speed_probe`'s reference steps), so
    that the replay's arrivals meet the engine as they would have without it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.excluded_s = 0.0

    @contextmanager
    def excluded(self):
        """Leave out the time the `with` block takes (on the inner clock: a wait for a core that
        an uncontended inner clock already leaves out is not left out twice)."""
        t = self.inner()
        try:
            yield
        finally:
            self.excluded_s += self.inner() - t

    def __call__(self) -> float:
        return self.inner() - self.excluded_s


def make_clock(name: str):
    """The clock called `name` (one of `CLOCKS`), made on the calling thread."""
    if name == "wall":
        return time.perf_counter
    if name == "uncontended":
        return UncontendedClock()
    raise ValueError(f"engine.clock: {name!r} is not allowed; choose one of {', '.join(CLOCKS)}")

"""gpu_backend.heap: a pinned heap serves a step's repeated large temporaries without page faults."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")

# a forward pass's pattern: several MiB-sized temporaries alive together, all freed by the step's
# end. glibc serves the first ones with mmap, then raises its threshold and serves them from the
# heap, but the freed top of the heap (4 x 3 MiB) exceeds its trim threshold (2 x 3 MiB) and goes
# back to the system, so every step faults it in again
PROBE = """
import resource, sys
import numpy as np
from gpu_backend.heap import pin_heap
pinned = pin_heap() if sys.argv[1] == "pin" else None
faults = []
for i in range(40):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    temps = [np.ones(3 << 17) for _ in range(4)]  # 4 x 3 MiB
    del temps
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(pinned, sum(faults[10:]))
"""


def probe(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


def test_pinned_heap_reuses_memory_where_the_default_faults_every_step():
    pinned, pinned_faults = probe("pin")
    _, default_faults = probe("default")
    assert pinned == "True"
    # 30 steps x 12 MiB of temporaries: ~3,000 faults of 4 KiB a step unpinned, next to none pinned
    assert default_faults > 1000
    assert pinned_faults < default_faults / 20


def test_pin_heap_is_idempotent():
    from gpu_backend.heap import pin_heap

    assert pin_heap() is pin_heap()

"""`pin_heap`: keep glibc's heap in the process, so that a CPU step's temporaries never page-fault.

A CPU forward pass allocates and frees the same large temporaries every step (the decode path's
gathered K/V, attention scores, GEMM outputs: megabytes at a batch of 16 x 768 tokens). glibc
serves blocks above its mmap threshold (128 KiB, moved up and down as it sees frees) with fresh
`mmap`s and gives freed heap tops back to the system, so whether a call page-faults on its
temporaries depends on the allocation history: on the tiny CPU model the repeats of one decode-
attention shape spread by 44% (median over the calibration grid) and the same shape ran 0.6-1.9x
its calibrated time inside the engine. With a fixed 32 MiB mmap threshold (glibc's maximum) and no
trimming, temporaries come from memory the process already holds: repeat spread 10%, the
calibration's engine-step fit 3.8% instead of 5.5%. The cost is resident memory held at its peak.

Process-wide and idempotent; a no-op off glibc (macOS, musl) or when `mallopt` is missing.
"""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit
TRIM_THRESHOLD = 2**31 - 1  # bytes (mallopt takes an int): in effect, never give heap tops back

_pinned: bool | None = None


def pin_heap() -> bool:
    """Fix glibc's mmap threshold and stop trimming (see module docstring); True when it took effect."""
    global _pinned
    if _pinned is not None:
        return _pinned
    _pinned = False
    if sys.platform.startswith("linux"):
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):  # not glibc
            return _pinned
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        # setting either also stops glibc moving the mmap threshold by itself
        _pinned = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _pinned

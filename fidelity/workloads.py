"""The sources' workload kinds and trace formats, registered with `sim.workload` by importing them.

`servesim`'s commands and the app import this module, so that every config they read may use
`kind = "inference_perf"` (inference-perf's own generator) and `trace_format = "vidur"` (Vidur's
length tables), while `sim` itself names no source.
"""
from __future__ import annotations

from fidelity.sources.inference_perf import WORKLOAD_KIND
from fidelity.sources.vidur import TRACE_FORMAT

REGISTERED = (WORKLOAD_KIND, TRACE_FORMAT)

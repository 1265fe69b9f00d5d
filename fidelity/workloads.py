"""The sources' workload kinds and trace formats, registered with `sim.workload` by importing them.

`servesim`'s commands and the app import this module, so that every config they read may use
`kind = "inference_perf"` (inference-perf's own generator), `kind = "guidellm"` (guidellm's
benchmarks as it drives them) and `trace_format = "vidur"` (Vidur's length tables), while `sim`
itself names no source.
"""
from __future__ import annotations

from fidelity.sources.guidellm import WORKLOAD_KIND as GUIDELLM_KIND
from fidelity.sources.inference_perf import WORKLOAD_KIND as INFERENCE_PERF_KIND
from fidelity.sources.vidur import TRACE_FORMAT

REGISTERED = (INFERENCE_PERF_KIND, GUIDELLM_KIND, TRACE_FORMAT)

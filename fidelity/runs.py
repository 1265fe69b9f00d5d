"""Real serving runs in one common form: what was served, how it was configured, what was measured.

A `RealRun` is what every source's loader (`fidelity.sources.<source>`) returns: the same `requests`
table (arrival, lengths, prefix group, measured TTFT/E2E/TPOT with vLLM's definitions, built by
`measured_table`) and `ServerArgs` (vLLM's argument names). `fidelity.run_folders.find_runs` finds
the runs of a folder and hands each to its source's loader.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from policies.presets import DEFAULT_VLLM_VERSION, async_scheduling_default

if TYPE_CHECKING:  # pandas where a table is built: importing a source (its workload kind) stays light
    import pandas as pd

REQUEST_COLUMNS = (
    "req_id", "arrival_time", "num_prompt_tokens", "num_output_tokens", "prefix_group", "num_prefix_tokens",
    "ttft_s", "e2e_s", "tpot_s",
)
METRICS = ("ttft_s", "tpot_s", "e2e_s")
SUPPORTED_VERSIONS = ("0.11", "0.15", "0.19")  # the vllm scheduler presets' versions
DEFAULT_GPU = "H100"  # the vLLM 0.11 runs' README: an 80 GB card, most likely H100; the target fleet

# GPU names as the runs' folders / device strings spell them -> servesim's GPU catalog names
GPU_ALIASES = {
    "rtx4090": "RTX4090", "geforce rtx 4090": "RTX4090", "nvidia geforce rtx 4090": "RTX4090",
    "rtxpro6000": "RTXPRO6000", "rtx pro 6000": "RTXPRO6000",
    "nvidia rtx pro 6000 blackwell server edition": "RTXPRO6000",
    "h100": "H100", "h100-80gb": "H100", "nvidia h100 80gb hbm3": "H100",
    "a100": "A100", "a100-80gb": "A100", "a100-80g": "A100",
}


def canonical_gpu(name: str | None) -> str | None:
    """servesim's catalog name for a GPU spelled as a run spells it (unknown names pass through)."""
    if name is None:
        return None
    return GPU_ALIASES.get(str(name).strip().lower(), str(name))


@dataclass(frozen=True)
class ServerArgs:
    """The serving engine's configuration of one run, in vLLM's argument names.

    `None` means the run did not record it (the engine's default applies). `num_gpu_blocks` is the
    KV capacity the engine itself reported, when the run logged it.
    """

    model: str
    gpu: str | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    block_size: int = 16
    num_gpu_blocks: int | None = None
    engine_version: str | None = None  # "0.11", "0.19", ... (None: unknown)
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None  # vLLM's --kv-cache-dtype ("auto", "fp8", ...)
    kv_offloading_size: float | None = None  # vLLM's --kv-offloading-size (GiB over the TP ranks; None: off)
    kv_offloading_backend: str | None = None  # vLLM's --kv-offloading-backend ("native", "lmcache")
    async_scheduling: bool | None = None  # vLLM's --async-scheduling (None: not recorded, the release's default)
    max_paddings: int | None = None  # vLLM 0.2.2-0.3's --max-paddings (None: not recorded, the release's default)


def engine_version(server: ServerArgs) -> str:
    """The vLLM preset version closest to the run's engine (unknown: the preset's default)."""
    v = server.engine_version
    if v in SUPPORTED_VERSIONS:
        return v
    if v is None:
        return "0.19"
    try:
        major, minor = (int(x) for x in v.split(".")[:2])
    except ValueError:
        return "0.19"
    # the v1 presets start at 0.11; older engines (v0) use the 'continuous' policy instead
    return min(SUPPORTED_VERSIONS, key=lambda s: abs(int(s.split(".")[1]) - minor) if major == 0 else 0)


def release(server: ServerArgs) -> tuple[int, int, int] | None:
    """The run's recorded engine release as (major, minor, patch), or None (unrecorded, unparsable)."""
    try:
        parts = [int(x) for x in str(server.engine_version).split(".")[:3]] if server.engine_version else []
    except ValueError:
        return None
    return (*parts, 0, 0)[:3] if parts else None


def async_scheduling(server: ServerArgs) -> bool:
    """--async-scheduling as the run's engine had it: the recorded value, else its release's default
    (`policies.presets.async_scheduling_default`; unknown version: the assumed preset's); v0 engines: off."""
    if server.async_scheduling is not None:
        return server.async_scheduling
    if not server.enable_chunked_prefill:
        return False
    v = server.engine_version or DEFAULT_VLLM_VERSION
    try:
        return async_scheduling_default(v)
    except ValueError:
        return async_scheduling_default(DEFAULT_VLLM_VERSION)


@dataclass
class RealRun:
    """One measured run: its name, source, server arguments, workload and per-request measurements."""

    name: str
    source: str
    path: Path
    server: ServerArgs
    requests: pd.DataFrame
    profile: dict | None = None  # the load generator's profile (inference-perf or guidellm), parsed
    summary: dict = field(default_factory=dict)  # measured means when a run has no per-request rows
    # server arguments the run did not record but its loader inferred from the run's own timings:
    # name -> (the engine's default, how it was inferred); a source-out prediction uses the default
    inferred_args: dict = field(default_factory=dict)
    # every engine setting the run's files record: name -> (value, the file it is recorded in)
    # (`fidelity.engine_settings` lists each as modelled or not)
    recorded_args: dict = field(default_factory=dict)
    # recorded settings simulated otherwise: name -> why (listed as not modelled, never dropped silently)
    unmodelled_args: dict = field(default_factory=dict)
    # which kind of measurement the timings are (`fidelity.metric_definitions.DEFINITIONS`), and the
    # file they were read from
    measured_by: str = ""
    measured_file: Path | None = None
    # the summary's TPOT is (mean E2E - mean TTFT) / (mean output tokens - 1): score a prediction alike
    tpot_of_means: bool = False
    # the file `profile` was read from (the client's own resolved config when it wrote one), and the
    # keys of the folder's profile.yaml that resolved config lacks (unknown to that client release)
    profile_file: Path | None = None
    profile_ignored: tuple[str, ...] = ()
    # what the loader made up where the run's files are silent (vllm bench's send times, say): said
    # with the run's notes (`fidelity.client_workload.version_assumption`)
    assumed: tuple[str, ...] = ()
    # the client's bound on requests in flight where its sends are made up, not recorded (vllm
    # bench's --max-concurrency): a replay sends as that client did (`sim.workload.concurrency`)
    client_max_concurrency: int | None = None
    # each benchmark as the client's own report measured it, where that report is the measurement
    # (`fidelity.sources.guidellm_results.ReportBenchmarks`, read with the run: `fidelity.benchmarks`)
    client_benchmarks: object | None = None

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def has_per_request(self) -> bool:
        """True when arrivals and lengths of every request are known (the run can be replayed)."""
        return len(self.requests) > 0 and bool(self.requests["arrival_time"].notna().all())

    def without_inferred_args(self) -> "RealRun":
        """The run as its records alone describe it: every inferred server argument at its default."""
        if not self.inferred_args:
            return self
        return replace(self, server=replace(self.server, **{k: v[0] for k, v in self.inferred_args.items()}))

    def measured(self) -> dict[str, float]:
        """Mean TTFT, TPOT and E2E in seconds (vLLM bench-serve definitions)."""
        import pandas as pd

        out = {}
        for m in METRICS:
            col = self.requests[m] if m in self.requests else pd.Series(dtype=float)
            col = col[np.isfinite(col.astype(float))] if len(col) else col
            out[m] = float(col.mean()) if len(col) else float(self.summary.get(m, math.nan))
        return out


def measured_table(rows: dict[str, list | np.ndarray]) -> pd.DataFrame:
    """The common requests table (missing columns take their defaults), sorted by arrival, arrival
    times relative to the first one."""
    import pandas as pd

    df = pd.DataFrame(rows)
    n = len(df)
    defaults = {"req_id": list(range(n)), "prefix_group": -1, "num_prefix_tokens": 0}
    for col in REQUEST_COLUMNS:
        if col not in df:
            df[col] = defaults.get(col, math.nan)
    df = df.sort_values("arrival_time", kind="stable").reset_index(drop=True)
    if n:
        df["arrival_time"] = df["arrival_time"] - df["arrival_time"].iloc[0]
    for col in ("num_prompt_tokens", "num_output_tokens", "prefix_group", "num_prefix_tokens"):
        df[col] = df[col].astype(int)
    if "tpot_s" not in rows and n:
        df["tpot_s"] = tpot(df["ttft_s"], df["e2e_s"], df["num_output_tokens"])
    return df[list(REQUEST_COLUMNS)]


def tpot(ttft: pd.Series, e2e: pd.Series, num_output_tokens: pd.Series) -> pd.Series:
    """vLLM's TPOT: (E2E - TTFT) / (output tokens - 1), NaN for one-token answers."""
    n = num_output_tokens.astype(float)
    return ((e2e - ttft) / (n - 1)).where(n > 1)

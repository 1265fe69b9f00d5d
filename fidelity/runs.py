"""Real serving runs in one common form: what was served, how it was configured, what was measured.

A `RealRun` is what every source's loader (`fidelity.sources.<source>`) returns: the same `requests`
table (arrival, lengths, prefix group, measured TTFT/E2E/TPOT with vLLM's definitions, built by
`measured_table`) and `ServerArgs` (vLLM's argument names). `fidelity.run_folders.find_runs` finds
the runs of a folder and hands each to its source's loader.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from policies import ConfigError
from policies.presets import DEFAULT_VLLM_VERSION, async_scheduling_default, reserve_full_isl_default

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


# a true/false setting as YAML and JSON files spell it when it is quoted (YAML reads an unquoted
# true/false/yes/no as a boolean itself); bool("false") is True, so a string is never read by bool()
BOOL_SPELLINGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def recorded_bool(field: str, value) -> bool:
    """A recorded true/false setting: a boolean, 0 or 1, or a string `BOOL_SPELLINGS` has (any case);
    anything else is refused naming `field`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOL_SPELLINGS:
        return BOOL_SPELLINGS[value.strip().lower()]
    raise ConfigError(f"{field}: expected true or false, got {value!r}")


def recorded_gib(field: str, value) -> float | None:
    """A recorded size in GiB where 0 (or absent, false) means off: None, or a number > 0; anything
    else is refused naming `field`."""
    if not value:
        return None
    try:
        gib = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        gib = math.nan
    if gib == 0:
        return None
    if not (gib > 0 and math.isfinite(gib)):
        raise ConfigError(f"{field}: expected a size in GiB >= 0 (0: off), got {value!r}")
    return gib


# a vLLM release as runs record it: "0.11", "v0.11.0", "0.11.1.dev12+gabc", "0.6.3.post1", "0.7.0rc1"
_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.-]?(?:dev|post|rc|a|b)\d*)*(?:\+[0-9A-Za-z.]+)?",
                      re.IGNORECASE)


def version_text(field: str, value) -> str:
    """A recorded release number as the text it was written as; a number is refused naming `field`:
    YAML and JSON read an unquoted 0.10 as the number 0.1, and which release was meant is lost."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ConfigError(f"{field}: {value!r} was read as a number, not a release (YAML and JSON read an "
                          "unquoted 0.10 as the number 0.1); quote it, e.g. '0.10'")
    return str(value).strip()


def recorded_release(field: str, value) -> str:
    """A recorded vLLM release as "X.Y" or "X.Y.Z" (a leading "v" and a dev/post/rc/local suffix
    dropped); a number (`version_text`) or anything else that is not a release is refused naming `field`."""
    text = version_text(field, value)
    m = _RELEASE.fullmatch(text) if isinstance(value, str) else None
    if m is None:
        raise ConfigError(f"{field}: {value!r} is not a vLLM release; expected X.Y or X.Y.Z (e.g. '0.11' or "
                          "'v0.11.0', a .devN/.postN suffix allowed)")
    return ".".join(g for g in m.groups() if g is not None)


def release_parts(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release `recorded_release` accepts (no patch: 0)."""
    parts = [int(x) for x in recorded_release("engine_version", version).split(".")]
    return (*parts, 0)[:3]


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

    def __post_init__(self):
        # a loader reads the run's spelling with `recorded_release` (naming its file); here it is plain
        v = self.engine_version
        if v is not None and (not isinstance(v, str) or recorded_release("engine_version", v) != v):
            raise ConfigError(f"engine_version: expected X.Y or X.Y.Z, got {v!r}")


def engine_version(server: ServerArgs) -> str:
    """The vLLM preset version closest to the run's engine (unknown: the preset's default)."""
    v = server.engine_version
    if v is None:
        return "0.19"
    major, minor, _ = release_parts(v)
    if f"{major}.{minor}" in SUPPORTED_VERSIONS:
        return f"{major}.{minor}"
    if major > 0:  # a release after every preset: the newest
        return SUPPORTED_VERSIONS[-1]
    # the v1 presets start at 0.11; older engines (v0) use the 'continuous' policy instead
    return min(SUPPORTED_VERSIONS, key=lambda s: abs(int(s.split(".")[1]) - minor))


def release(server: ServerArgs) -> tuple[int, int, int] | None:
    """The run's recorded engine release as (major, minor, patch), or None (unrecorded)."""
    return release_parts(server.engine_version) if server.engine_version else None


def kv_offloading_backend(server: ServerArgs) -> str | None:
    """The KV offloading backend the run's engine ran ("native", "lmcache"), or None: off. Until 0.14
    vLLM's --kv-offloading-backend defaulted to None and offloading was on only with it set (its
    `_post_init_kv_transfer_config` returned early, whatever the size); from 0.14 it defaults to
    "native" and the size alone turns offloading on (unknown release: the assumed preset's, 0.14+)."""
    if not server.kv_offloading_size:
        return None
    if server.kv_offloading_backend:
        return server.kv_offloading_backend
    r = release(server)
    return None if r is not None and r < (0, 14, 0) else "native"


# vLLM 0.8.0 made the v1 engine the default. Its 0.8.0-0.11.0 releases forced chunked prefill on for
# generative models whatever the flag said (EngineArgs._set_default_args_v1, "V1 always uses chunked
# prefills", in those sdists); 0.11.1 on honour enable_chunked_prefill=False (policies.config).
V1_DEFAULT_FROM = (0, 8, 0)
V1_UNCHUNKED_FROM = (0, 11, 1)


def v0_engine(server: ServerArgs) -> bool:
    """Was the run's engine vLLM v0? Chunked prefill off on a release before 0.8.0, or on an
    unrecorded one (v1 chunks by default, so such a run is taken for v0's era). Otherwise v1."""
    if server.enable_chunked_prefill:
        return False
    r = release(server)
    return r is None or r < V1_DEFAULT_FROM


def v1_engine(server: ServerArgs) -> bool:
    """Was the run's engine vLLM v1 (the default from 0.8.0)? An unrecorded release: v1 unless it
    is taken for v0's era (`v0_engine`)."""
    r = release(server)
    return r >= V1_DEFAULT_FROM if r is not None else not v0_engine(server)


def v1_chunks_prompts(server: ServerArgs) -> bool:
    """Did the run's v1 engine split prompts? Yes unless it turned chunked prefill off on a release
    that honours that (0.11.1 on; before, v1 chunked anyway)."""
    if server.enable_chunked_prefill:
        return True
    r = release(server)
    return r is None or r < V1_UNCHUNKED_FROM


def async_scheduling(server: ServerArgs) -> bool:
    """--async-scheduling as the run's engine had it: the recorded value, else its release's default
    (`policies.presets.async_scheduling_default`; unknown version: the assumed preset's); v0 engines: off."""
    if server.async_scheduling is not None:
        return server.async_scheduling
    if v0_engine(server):
        return False
    return async_scheduling_default(server.engine_version or DEFAULT_VLLM_VERSION)  # X.Y[.Z]: __post_init__


def reserve_full_isl(server: ServerArgs) -> bool:
    """vLLM's `scheduler_reserve_full_isl` as the run's engine had it: its release's default
    (`policies.presets.reserve_full_isl_default`, on from 0.19; unknown version: the assumed preset's);
    v0 engines (whole prompts): off. A run recording it off is listed as not modelled."""
    if v0_engine(server):
        return False
    return reserve_full_isl_default(server.engine_version or DEFAULT_VLLM_VERSION)


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
    # the benchmark client's recorded arguments: name -> (value, the file), guidellm's report's
    # (`fidelity.engine_settings.client_rows`; inference-perf's are in `profile`)
    client_args: dict = field(default_factory=dict)
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


def measured_table(rows: dict[str, list | np.ndarray], file: Path | str | None = None) -> pd.DataFrame:
    """The common requests table (missing columns take their defaults), sorted by arrival, arrival
    times relative to the first one. Rows no run can measure are refused naming `file`, the file
    they were read from, and the row (`check_rows`)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    n = len(df)
    check_rows(df, file)
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


def read_table(path: Path, columns: tuple[str, ...], numeric: tuple[str, ...] = ()) -> pd.DataFrame:
    """A run's CSV file with the `columns` it must have, its `numeric` ones read as numbers (a blank
    cell: NaN); an empty or unreadable file, a missing column or a cell that is not a number is
    refused in one line naming the file (and the columns, or the column and row)."""
    import pandas as pd

    expected = ", ".join(columns)
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: empty; expected a CSV with the columns {expected}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable CSV ({str(exc).strip()}); expected the columns {expected}") from None
    missing = [c for c in columns if c not in df]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; expected the columns {expected}")
    for col in numeric:
        v = pd.to_numeric(df[col], errors="coerce")
        bad = v.isna() & df[col].notna()
        if bad.any():
            label = bad.idxmax()  # rows are the file's: 1 is the first after the header
            raise ConfigError(f"{path}: row {label + 1}: {col}: expected a number, got {df.at[label, col]!r}")
        df[col] = v
    return df


def check_rows(df: pd.DataFrame, file: Path | str | None = None) -> None:
    """Refuse the first row of a measured table that no run can have: a missing or fractional token
    count, a missing arrival, a negative TTFT or E2E (a missing one is NaN: not measured), a
    request id seen twice. The line names `file` and the row (its number in the file where the
    table's index is the file's rows: 1 is the first after a CSV's header)."""
    import pandas as pd

    def refuse(bad: pd.Series, col: str, expected: str) -> None:
        if bad.any():
            label = bad.idxmax()  # the first bad row
            row = label + 1 if isinstance(label, (int, np.integer)) else label
            rid = f" (req_id {df.at[label, 'req_id']!r})" if "req_id" in df and col != "req_id" else ""
            value = df.at[label, col]
            value = value.item() if isinstance(value, np.generic) else value
            got = "a blank cell (NaN)" if isinstance(value, float) and math.isnan(value) else repr(value)
            raise ConfigError(f"{file or 'requests'}: row {row}{rid}: {col}: {expected}, got {got}")

    for col in ("num_prompt_tokens", "num_output_tokens", "arrival_time", "ttft_s", "e2e_s"):
        if col in df:
            v = pd.to_numeric(df[col], errors="coerce").astype(float)
            if col.startswith("num_"):
                refuse(~np.isfinite(v) | (v < 0) | (v != v.round()), col, "expected a whole number of tokens >= 0")
            elif col == "arrival_time":
                refuse(~np.isfinite(v), col, "expected a time in seconds")
            else:  # NaN: not measured (a failed stream's TTFT, say); a negative latency is impossible
                refuse(v < 0, col, "a latency cannot be negative")
    if "req_id" in df:
        ids = df["req_id"].astype(str)
        refuse(ids.duplicated(), "req_id", "an earlier row has the same id (one request measured twice)")


def tpot(ttft: pd.Series, e2e: pd.Series, num_output_tokens: pd.Series) -> pd.Series:
    """vLLM's TPOT: (E2E - TTFT) / (output tokens - 1), NaN for one-token answers."""
    n = num_output_tokens.astype(float)
    return ((e2e - ttft) / (n - 1)).where(n > 1)

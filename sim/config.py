"""The simulator's configuration: one frozen `Config` of frozen sections, loaded from TOML.

Sections are frozen dataclasses validated on construction, errors naming `section.key` (listed on
`Config`).

`load_config(path_or_dict, overrides)` reads TOML (or a dict), applies `--set section.key=value`
overrides (values parsed as TOML scalars; a bare word is a string), rejects unknown sections and keys
with the allowed ones listed, and builds the sections. Sections of other commands (`[serve]`) are
accepted and left alone, so one file serves `simulate`, `run`, `serve` and `validate`; a note says so.
`Config.notes` holds such lines (what one setting did to another), and `config_to_toml` writes the
resolved config back (saved beside every result) with its notes as comments. Sweeps use
`dataclasses.replace` or more overrides.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path, PurePath
from typing import Any, Mapping, Sequence

from policies import ConfigError, SchedulerConfig, SpeculativeConfig
from policies.config import (OFFLOAD_BACKENDS, check_cache_knobs, check_choice, check_keys,
                             check_number)
from records.metrics import SLOConfig
from sim.cluster.autoscaler import AutoscalingConfig
from sim.cluster.config import ClusterConfig, DisaggregationConfig
from sim.frontend import FrontendConfig
from sim.workload import WorkloadConfig
from specs import HardwareConfig, ModelConfig


@dataclass(frozen=True)
class CacheSection:
    """The paged KV cache knobs a user sets; block counts come from `hardware` (memory or given).

It resolves to the one cache config, `policies.CacheConfig` (`sim.build.build_cache_config`), whose
knobs it shares (`check_cache_knobs`); the offload tier is given here in GiB and GB/s.

    `offload_size_gb` > 0 adds a CPU tier of the prefix cache of that many GiB over the replica's
    GPUs (vLLM's `kv_offloading_size`; `policies.kv_offload`), `offload_backend` "native" (vLLM's
    OffloadingConnector: asynchronous copies) or "lmcache" (synchronous, 256-token chunks),
    `offload_bandwidth_gbps` the host link's GB/s per direction per GPU (None: the GPU's PCIe,
    `hardware.pcie_bandwidth_gbps` if set).
    """

    block_size: int = 16
    watermark: float = 0.0  # fraction of GPU blocks kept free when admitting (vLLM v0 used 0.01)
    # None: the policy's default (policies.CacheConfig: on for 'vllm', off for the others)
    enable_prefix_caching: bool | None = None
    offload_size_gb: float = 0.0
    offload_backend: str = "native"
    offload_bandwidth_gbps: float | None = None

    def __post_init__(self) -> None:
        check_cache_knobs(self.block_size, self.watermark, self.enable_prefix_caching)
        check_number("cache.offload_size_gb", self.offload_size_gb, 0.0)
        check_choice("cache.offload_backend", self.offload_backend, OFFLOAD_BACKENDS)
        if self.offload_bandwidth_gbps is not None:
            check_number("cache.offload_bandwidth_gbps", self.offload_bandwidth_gbps, 0.0, strict_min=True)


@dataclass(frozen=True)
class SimSection:
    """The run: stop the clock at `max_sim_time_s` (None = run until every request has ended).

    Requests still live at the limit end as ABORTED and stay in the results. Randomness lives in
    the workload only, so `workload.seed` is the run's seed.
    """

    max_sim_time_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_sim_time_s is not None:
            check_number("sim.max_sim_time_s", self.max_sim_time_s, 0.0, strict_min=True,
                         hint="leave it unset to run until every request has ended")


def section_types() -> dict[str, type]:
    """Section name -> dataclass. model/hardware/workload types live in their own packages."""
    return {
        "model": ModelConfig, "hardware": HardwareConfig, "scheduler": SchedulerConfig,
        "cache": CacheSection, "workload": WorkloadConfig, "slo": SLOConfig, "sim": SimSection,
        "cluster": ClusterConfig, "disaggregation": DisaggregationConfig,
        "frontend": FrontendConfig, "autoscaling": AutoscalingConfig, "speculative": SpeculativeConfig,
    }


@dataclass(frozen=True)
class Config:
    """A whole simulation: every section, resolved. Build it with `load_config` or directly.

    - `model`     the model (catalog name or HF config.json)       -> specs.ModelConfig
    - `hardware`  GPU type, tensor parallelism, memory, KV blocks   -> specs.HardwareConfig
    - `scheduler` policy and limits (vLLM names)                    -> policies.SchedulerConfig
    - `cache`     paged-KV knobs the user sets: block size, watermark, prefix caching -> CacheSection
                  (the GPU/CPU block counts come from `hardware`, derived from memory unless given)
    - `workload`  arrivals and lengths                              -> sim.workload.WorkloadConfig
    - `slo`       latency targets for goodput                       -> records.metrics.SLOConfig
    - `sim`       the run itself: a simulated-time limit            -> SimSection
    - `cluster`, `disaggregation`  several replicas behind a router, prefill/decode pools -> sim.cluster.config
    - `frontend`  the HTTP front end's delays (ingress, per-token egress); off by default -> sim.frontend.FrontendConfig
    - `autoscaling`  replicas added and drained as a load metric moves; off by default -> sim.cluster.autoscaler
    - `speculative`  speculative decoding (ngram / draft / mtp); off by default -> policies.SpeculativeConfig
    """

    model: Any = None
    hardware: Any = None
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheSection = field(default_factory=CacheSection)
    workload: Any = None
    slo: SLOConfig = field(default_factory=SLOConfig)
    sim: SimSection = field(default_factory=SimSection)
    cluster: Any = None  # sim.cluster.config.ClusterConfig (several replicas behind a router)
    disaggregation: Any = None  # sim.cluster.config.DisaggregationConfig (prefill/decode pools)
    frontend: FrontendConfig = field(default_factory=FrontendConfig)  # HTTP front-end delays (zero: off)
    autoscaling: Any = None  # sim.cluster.autoscaler.AutoscalingConfig (replicas that follow the load)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)  # speculative decoding (off)
    # what one setting did to another, one line each (printed by the commands, kept in config.toml
    # as comments); not a setting: configs that differ only in notes are equal
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        # sections left out get their defaults (model/hardware/workload types are imported lazily)
        types = section_types()
        for name in ("model", "hardware", "workload", "cluster", "disaggregation", "autoscaling"):
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, types[name]())
            elif not isinstance(value, types[name]):
                raise ConfigError(f"{name}: expected a {types[name].__name__}, got {type(value).__name__}")
        if self.scheduler.policy == "vllm" and self.hardware.num_gpu_blocks == 1:  # named as the user set it
            raise ConfigError("hardware.num_gpu_blocks: must be >= 2 under scheduler.policy = vllm, got 1 "
                              "(vLLM v1 keeps one block as its null block)")


# --- loading ------------------------------------------------------------------------------------
def parse_value(raw: str) -> Any:
    """A `--set` value as a TOML scalar (`512`, `0.5`, `true`, `"x"`, `[1, 2]`); a bare word stays a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw.strip()


def apply_override(data: dict, override: str) -> None:
    """Apply one `section.key=value` (deeper keys `a.b.c=v` set nested tables) to `data` in place."""
    if "=" not in override:
        raise ConfigError(f"--set: expected section.key=value, got {override!r}")
    path, raw = override.split("=", 1)
    keys = [k.strip() for k in path.strip().split(".")]
    if len(keys) < 2 or not all(keys):
        raise ConfigError(f"--set: expected section.key=value, got {override!r}")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(keys[:-1])}: is not a table, cannot set {keys[-1]!r} in it")
        node = child
    node[keys[-1]] = parse_value(raw)


def _plain(value: Any) -> Any:
    """`value` with what Python code hands a config turned into what a TOML file would hold: numpy
    scalars (a pandas cell, `np.float64(5.0)`) into Python numbers, paths into strings, tuples into
    lists. A numpy float passes a number check but is written back as `np.float64(5.0)`, no TOML."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar (an array is no value)
        return value.item() if getattr(value, "ndim", 0) == 0 else value
    return value


def _read(source: str | Path | Mapping) -> tuple[dict, Path | None]:
    if isinstance(source, Mapping):
        return _plain(copy.deepcopy(dict(source))), None
    if not isinstance(source, (str, PurePath)):
        raise ConfigError(f"config: expected a TOML file's path or a dict of sections, got {type(source).__name__}")
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"config: file not found: {path}")
    try:
        with path.open("rb") as f:
            return tomllib.load(f), path.parent
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {path} is not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config: {path} is not a UTF-8 TOML file") from None


# sections other commands read from the same file: accepted, not used here (section -> its command)
OTHER_COMMANDS_SECTIONS = {"serve": "servesim serve"}


# keys holding file paths: relative paths in a config file are relative to that file
PATH_KEYS = {("workload", "trace"), ("workload", "profile"), ("model", "name"), ("hardware", "profile")}


def _build_section(name: str, cls: type, values: Any) -> Any:
    if not isinstance(values, Mapping):
        raise ConfigError(f"{name}: expected a table of keys, got {values!r}")
    check_keys(name, values, cls)
    try:
        return cls(**values)
    except TypeError as exc:  # a wrongly typed value a section did not check itself
        raise ConfigError(f"{name}: {exc}") from None


def load_config(source: str | Path | Mapping, overrides: Sequence[str] = ()) -> Config:
    """Read a TOML file (or a dict), apply `overrides` ("section.key=value"), validate, build a Config."""
    if isinstance(overrides, str):  # a lone string would be read letter by letter
        raise ConfigError(f"overrides: expected a list of 'section.key=value' strings, got one string {overrides!r}; "
                          "wrap it in a list")
    data, base = _read(source)
    from_file = copy.deepcopy(data) if base is not None else None  # to tell file paths from --set ones
    for override in overrides:
        apply_override(data, override)
    types = section_types()
    unknown = [k for k in data if k not in types and k not in OTHER_COMMANDS_SECTIONS]
    if unknown:
        allowed = ", ".join([*types, *OTHER_COMMANDS_SECTIONS])
        raise ConfigError(f"{unknown[0]}: unknown section; allowed sections: {allowed}")
    notes = tuple(f"[{k}] is read by `{OTHER_COMMANDS_SECTIONS[k]}` only; this command does not use it"
                  for k in data if k in OTHER_COMMANDS_SECTIONS)
    if base is not None:
        for section, key in PATH_KEYS:
            value = data.get(section, {}).get(key) if isinstance(data.get(section), Mapping) else None
            # only paths written in the file are relative to it; --set paths are relative to the cwd
            if (isinstance(value, str) and value and not Path(value).is_absolute()
                    and value == from_file.get(section, {}).get(key) and (base / value).exists()):
                data[section][key] = str(base / value)
    sections = {name: _build_section(name, cls, data.get(name, {})) for name, cls in types.items()}
    if "max_model_len" not in data.get("scheduler", {}):
        # as vLLM: the model's context length unless given
        model_len = getattr(sections["model"].spec(), "max_position_embeddings", None)
        if isinstance(model_len, int) and model_len >= 2:
            sections["scheduler"] = dataclasses.replace(sections["scheduler"], max_model_len=model_len)
    return Config(**sections, notes=notes)


# --- writing ------------------------------------------------------------------------------------
def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_str(key)


def _toml_str(s: str) -> str:
    """A TOML basic string: backslash, quote and every control character escaped."""
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """A Python value (numpy scalars and paths included) as TOML writes it: an override's right side."""
    return _toml_value(_plain(value))


def _toml_value(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, Path):
        return _toml_str(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + items + " }" if items else "{}"
    if dataclasses.is_dataclass(value):
        return _toml_value(_as_dict(value, top=False))
    raise ConfigError(f"config: cannot write {type(value).__name__} value {value!r} as TOML")


# init fields that are bookkeeping, not settings (LengthDist.field: its config path for error messages)
NOT_SETTINGS = ("field",)


def _as_dict(obj: Any, top: bool = True) -> dict:
    """A dataclass's init fields (shallow; nested dataclasses become inline tables)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)
            if f.init and (top or f.name not in NOT_SETTINGS)}


def config_to_toml(config: Config) -> str:
    """The resolved config as TOML text that `load_config` reads back to an equal Config.

    None values are left out (they mean "default / derived"); `config.notes` become comment lines.
    """
    lines = ["# servesim resolved configuration"]
    lines += [f"# note: {n}" for n in config.notes]
    for f in fields(config):
        if f.name == "notes":
            continue
        section = getattr(config, f.name)
        lines.append(f"\n[{f.name}]")
        for key, value in _as_dict(section).items():
            if value is None:
                continue
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"

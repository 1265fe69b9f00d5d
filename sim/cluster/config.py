"""The `cluster` and `disaggregation` config sections.

`[cluster]` (`ClusterConfig`): colocated replicas behind a router, `num_replicas` copies of the
top-level config or heterogeneous groups. `[disaggregation]` (`DisaggregationConfig`): a prefill
pool and a decode pool, the KV moved over a link. A pool (`PoolConfig`) is `count` replicas built
from the top-level config with its `hardware` and `scheduler` sections overridden (`gpu` and `tp`
are shortcuts for `hardware.gpu` / `hardware.tp`). Each class shows its section in TOML.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from policies import ConfigError
from policies.config import check_choice, check_int, check_keys, check_number
from sim.cluster.link import LINK_PRESETS
from sim.cluster.router import ROUTERS

POOL_SECTIONS = ("hardware", "scheduler", "cache")
FIRST_TOKEN = ("after_transfer", "prefill")


def _check_pool(values: Mapping[str, Any], where: str) -> None:
    check_int(f"{where}.count", values.get("count", 1), 1)
    check_int(f"{where}.tp", values.get("tp"), 1, allow_none=True)
    gpu = values.get("gpu")
    if gpu is not None and not isinstance(gpu, str):
        raise ConfigError(f"{where}.gpu: expected a GPU name, got {gpu!r}")
    for name in POOL_SECTIONS:
        if not isinstance(values.get(name, {}), Mapping):
            raise ConfigError(f"{where}.{name}: expected a table of {name} keys, got {values[name]!r}")


# every replica is a simulated engine with its own scheduler and KV pool: more than this many is no
# fleet a planner asks about, and would take hours to build before the first request
MAX_REPLICAS = 10_000

@dataclass(frozen=True)
class PoolConfig:
    """`count` identical replicas: the top-level config with these section overrides applied."""

    count: int = 1
    gpu: str | None = None
    tp: int | None = None
    hardware: Mapping[str, Any] = field(default_factory=dict)
    scheduler: Mapping[str, Any] = field(default_factory=dict)
    cache: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_pool(_init_values(self), "pool")

    def section_overrides(self) -> dict[str, dict[str, Any]]:
        """{section: {key: value}} to apply to the top-level config."""
        out = {name: dict(getattr(self, name)) for name in POOL_SECTIONS}
        if self.gpu is not None:
            out["hardware"]["gpu"] = self.gpu
        if self.tp is not None:
            out["hardware"]["tp"] = self.tp
        return {k: v for k, v in out.items() if v}

    @classmethod
    def build(cls, value: Any, where: str) -> "PoolConfig":
        """A pool from a TOML table (errors name `where`, e.g. `disaggregation.prefill.count`)."""
        if isinstance(value, PoolConfig):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table like {{count = 1, gpu = \"H100-SXM\", tp = 1}}, got {value!r}")
        check_keys(where, value, cls)
        _check_pool(value, where)
        return cls(**value)


def _init_values(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.init}


@dataclass(frozen=True)
class ClusterConfig:
    """Colocated replicas behind one router (`num_replicas` copies, or heterogeneous `replicas` groups).

    ```toml
    [cluster]
    num_replicas = 4
    router = "least_tokens"       # round_robin | least_tokens | power_of_two | prefix_aware
    # heterogeneous replicas: groups, each overriding the top-level sections (replaces num_replicas)
    replicas = [{count = 2, gpu = "H100-SXM", tp = 1}, {count = 1, gpu = "A100-80GB", tp = 2}]
    ```
    """

    num_replicas: int = 1
    router: str = "round_robin"
    replicas: tuple = ()  # of PoolConfig (TOML: a list of tables)
    max_imbalance: float = 2.0  # prefix_aware: skip replicas this many times busier than the least busy
    seed: int = 0  # power_of_two's random choices

    def __post_init__(self) -> None:
        check_int("cluster.num_replicas", self.num_replicas, 1, maximum=MAX_REPLICAS)
        check_choice("cluster.router", self.router, ROUTERS)
        check_number("cluster.max_imbalance", self.max_imbalance, 1.0)
        check_int("cluster.seed", self.seed, 0)
        if isinstance(self.replicas, Mapping) or not isinstance(self.replicas, (list, tuple)):
            raise ConfigError(f"cluster.replicas: expected a list of tables, got {self.replicas!r}")
        groups = tuple(PoolConfig.build(g, f"cluster.replicas[{i}]") for i, g in enumerate(self.replicas))
        object.__setattr__(self, "replicas", groups)
        total = sum(g.count for g in groups)
        if groups and self.num_replicas not in (1, total):
            raise ConfigError(f"cluster.num_replicas: {self.num_replicas} disagrees with the {total} replicas "
                              f"that cluster.replicas lists; leave it out or set it to {total}")
        if groups:
            object.__setattr__(self, "num_replicas", total)

    def groups(self) -> tuple[PoolConfig, ...]:
        return self.replicas or (PoolConfig(count=self.num_replicas),)


@dataclass(frozen=True)
class DisaggregationConfig:
    """Prefill/decode disaggregation: two pools and the link the KV cache crosses between them.

    ```toml
    [disaggregation]
    enabled = true
    link = "nvlink"               # nvlink | infiniband | roce | pcie | ethernet
    link_bandwidth_gbps = 100.0   # optional: replaces the preset's GB/s per GPU
    first_token = "after_transfer"   # or "prefill" (DistServe: TTFT excludes the transfer)
    prefill = {count = 1, tp = 2}
    decode = {count = 2, tp = 1, scheduler = {max_num_seqs = 256}}
    ```
    """

    enabled: bool = False
    prefill: Any = field(default_factory=dict)
    decode: Any = field(default_factory=dict)
    link: str = "nvlink"
    link_bandwidth_gbps: float | None = None  # GB/s per GPU, replaces the preset's
    link_latency_s: float | None = None
    prefill_router: str = "least_tokens"
    decode_router: str = "least_tokens"
    # who samples the first token the client gets: "after_transfer" (vLLM's P/D proxy drops the
    # prefill instance's token and streams the decode instance's, which recomputes the last prompt
    # position: TTFT = prefill + KV transfer + the decode side's first step) or "prefill" (DistServe
    # returns the prefill instance's token at once; the decode instance starts from it)
    first_token: str = "after_transfer"

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"disaggregation.enabled: expected true or false, got {self.enabled!r}")
        object.__setattr__(self, "prefill", PoolConfig.build(self.prefill, "disaggregation.prefill"))
        object.__setattr__(self, "decode", PoolConfig.build(self.decode, "disaggregation.decode"))
        check_choice("disaggregation.link", self.link, tuple(LINK_PRESETS))
        if self.link_bandwidth_gbps is not None:
            check_number("disaggregation.link_bandwidth_gbps", self.link_bandwidth_gbps, 0.0, strict_min=True)
        if self.link_latency_s is not None:
            check_number("disaggregation.link_latency_s", self.link_latency_s, 0.0)
        check_choice("disaggregation.first_token", self.first_token, FIRST_TOKEN)
        check_choice("disaggregation.prefill_router", self.prefill_router, ROUTERS)
        check_choice("disaggregation.decode_router", self.decode_router, ROUTERS)

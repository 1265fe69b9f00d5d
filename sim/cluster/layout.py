"""A config's layout: which replicas it has, on how many GPUs, at what price.

Colocated: `cluster` groups (or `num_replicas` copies of the top-level config). Disaggregated:
the `disaggregation.prefill` and `.decode` pools. Each replica gets its own resolved `Config`, so
heterogeneous replicas build their own latency model and KV geometry.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from policies import ConfigError
from sim.cluster.autoscaler import AutoscalingConfig
from sim.cluster.config import ClusterConfig, DisaggregationConfig, PoolConfig


def cluster_section(config: Any) -> ClusterConfig:
    return getattr(config, "cluster", None) or ClusterConfig()


def disagg_section(config: Any) -> DisaggregationConfig:
    return getattr(config, "disaggregation", None) or DisaggregationConfig()


def is_disaggregated(config: Any) -> bool:
    return disagg_section(config).enabled


def is_cluster(config: Any) -> bool:
    """True when `simulate` must run more than one replica (or a disaggregated pair of pools, or an
    autoscaled set)."""
    cluster = cluster_section(config)
    return (is_disaggregated(config) or cluster.num_replicas > 1 or bool(cluster.replicas)
            or autoscaling_section(config).enabled)


def check_disaggregated(config: Any) -> None:
    """Refuse what a disaggregated layout would leave unused: its replicas are the pools'
    (`disaggregation.prefill` / `.decode` `count`), not `[cluster]`'s, and the autoscaler scales
    colocated replicas only."""
    if not is_disaggregated(config):
        return
    cluster = cluster_section(config)
    if cluster.num_replicas > 1 or cluster.replicas:
        key = "cluster.replicas" if cluster.replicas else "cluster.num_replicas"
        raise ConfigError(f"{key}: with disaggregation.enabled the replicas are the pools' "
                          "(disaggregation.prefill.count, disaggregation.decode.count); leave [cluster] at one replica")
    if autoscaling_section(config).enabled:
        raise ConfigError("autoscaling.enabled: the autoscaler scales colocated replicas; with "
                          "disaggregation.enabled set the pools' counts instead")


def apply_pool(config: Any, pool: PoolConfig, where: str) -> Any:
    """`config` with the pool's section overrides applied (errors name the pool)."""
    changes = {}
    for section, values in pool.section_overrides().items():
        current = getattr(config, section)
        try:
            changes[section] = dataclasses.replace(current, **values)
        except TypeError as exc:
            allowed = ", ".join(f.name for f in dataclasses.fields(current) if f.init)
            raise ConfigError(f"{where}.{section}: {exc}; allowed keys: {allowed}") from None
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return dataclasses.replace(config, **changes) if changes else config


def autoscaling_section(config: Any) -> AutoscalingConfig:
    return getattr(config, "autoscaling", None) or AutoscalingConfig()


def replica_configs(config: Any) -> list[tuple[str, Any]]:
    """(name, config) of every colocated replica: '0', '1', ... in group order (with autoscaling:
    `max_replicas` copies of the one replica type, of which the autoscaler runs some)."""
    out: list[tuple[str, Any]] = []
    cluster = cluster_section(config)
    scaling = autoscaling_section(config)
    if scaling.enabled:
        groups = cluster.groups()
        if len(groups) > 1:
            raise ConfigError(f"autoscaling: scales one replica type; cluster.replicas has {len(groups)} groups")
        resolved = apply_pool(config, groups[0], "cluster.replicas[0]")
        return [(str(i), resolved) for i in range(scaling.max_replicas)]
    for g, group in enumerate(cluster.groups()):
        resolved = apply_pool(config, group, f"cluster.replicas[{g}]")
        out.extend((str(len(out)), resolved) for _ in range(group.count))
    return out


def pool_configs(config: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(prefill replicas, decode replicas), named 'p0', 'p1', ... and 'd0', 'd1', ..."""
    d = disagg_section(config)
    prefill = apply_pool(config, d.prefill, "disaggregation.prefill")
    decode = apply_pool(config, d.decode, "disaggregation.decode")
    return ([(f"p{i}", prefill) for i in range(d.prefill.count)],
            [(f"d{i}", decode) for i in range(d.decode.count)])


def all_replica_configs(config: Any) -> list[tuple[str, Any]]:
    if is_disaggregated(config):
        prefill, decode = pool_configs(config)
        return prefill + decode
    return replica_configs(config)


def num_gpus(config: Any) -> int:
    """GPUs the layout occupies: the sum of every replica's tensor-parallel degree."""
    hardware = getattr(config, "hardware", None)
    if hardware is None:
        return 1
    return sum(int(c.hardware.tp) for _, c in all_replica_configs(config))


def cost_per_hour(config: Any, prices: dict[str, float] | None = None) -> float:
    """USD per hour of the layout: per-GPU price (from `prices` by GPU name, else the hardware section's)."""
    total = 0.0
    for _, c in all_replica_configs(config):
        hw = c.hardware
        if prices and hw.gpu in prices:
            total += prices[hw.gpu] * hw.tp
        else:
            total += hw.cost_per_hour
    return total

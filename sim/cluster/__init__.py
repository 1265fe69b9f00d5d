"""Several replicas in one simulation: routers, colocated clusters, prefill/decode disaggregation.

`sim.runner.simulate` hands a config to `sim.cluster.runner.simulate_cluster` when its layout has
more than one replica (`[cluster]`) or separate prefill and decode pools (`[disaggregation]`).
"""
from sim.cluster.config import ClusterConfig, DisaggregationConfig, PoolConfig
from sim.cluster.link import LINK_PRESETS, Link
from sim.cluster.router import ROUTERS, make_router

__all__ = ["ClusterConfig", "DisaggregationConfig", "PoolConfig", "LINK_PRESETS", "Link", "ROUTERS", "make_router"]

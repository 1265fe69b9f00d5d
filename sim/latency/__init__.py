"""Latency models: `step_time(plan) -> seconds` for one `BatchPlan`.

`RooflineLatencyModel` (datasheet FLOP/s and bandwidths, always available), `ConstantLatencyModel`
(tests), and `ProfiledLatencyModel` (measured per-op curves, `sim.latency.profiled`, imported lazily;
`sim.latency.eager.EagerLatencyModel` when the profile has `meta.eager_launch`).
`build_latency_model(config)` or `build_latency_model(model, hardware, cache_block_size)` picks one
from `hardware.latency`.
"""
from __future__ import annotations

from policies import ConfigError
from sim.latency.base import ConstantLatencyModel, LatencyModel
from sim.latency.eager import EagerLatencyModel
from sim.latency.profiled import ProfiledLatencyModel
from sim.latency.roofline import RooflineConstants, RooflineLatencyModel
from specs import ModelConfig

__all__ = ["LatencyModel", "ConstantLatencyModel", "RooflineConstants", "RooflineLatencyModel",
           "build_latency_model"]


def build_latency_model(model, hardware=None, cache_block_size: int | None = None,
                        constants: RooflineConstants | None = None) -> LatencyModel:
    """The latency model a config asks for.

    Either `build_latency_model(config)` (a `sim.config.Config`: its model, hardware and cache
    sections) or `build_latency_model(model, hardware, cache_block_size)` with a `ModelSpec` or
    `ModelConfig` and a `HardwareConfig`.
    """
    if hardware is None:  # a whole Config
        config = model
        model, hardware = config.model, config.hardware
        cache = getattr(config, "cache", None)
        cache_block_size = cache_block_size or getattr(cache, "block_size", 16)
    spec = model.spec() if isinstance(model, ModelConfig) else model
    block_size = cache_block_size or 16
    if hardware.latency == "profiled":
        lm = ProfiledLatencyModel.from_file(hardware.profile, model=spec, block_size=block_size)
        if "eager_launch" in lm.profile.meta:  # an eager engine: kernels overlap the host's launch path
            lm = EagerLatencyModel(lm.profile, block_size=block_size)
        if lm.tp != hardware.tp:  # a profile times one rank of one TP layout: its GEMM shards and all-reduces
            raise ConfigError(f"hardware.tp: the profile {hardware.profile} was made for tensor parallel "
                              f"{lm.tp}, but hardware.tp = {hardware.tp}; import or calibrate one for tp={hardware.tp}")
        return lm
    if constants is None and getattr(hardware, "enforce_eager", False):
        constants = RooflineConstants.eager()
    ep_link = getattr(hardware, "ep_link_bandwidth_gbps", None)
    return RooflineLatencyModel(spec, hardware.gpu_spec(), hardware.tp, block_size, constants,
                                pcie_bandwidth=hardware.pcie_bandwidth, ep=getattr(hardware, "ep", 1),
                                ep_link_bandwidth=ep_link * 1e9 if ep_link is not None else None)

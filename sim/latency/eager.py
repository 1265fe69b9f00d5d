"""Step time of an eager engine (no CUDA graphs): the GPU and the host's kernel launches overlap.

An eager engine issues each layer's kernels from Python while the GPU runs the ones already
issued. A step then takes

    max(device time, launch path) + host work outside the forward pass

where the device time is what `ProfiledLatencyModel` adds up from the op curves (kernels and
all-reduces), the launch path is `profile.meta["eager_launch"]["launch_s"]` (layers x op calls a
layer x host time per call, `calibrate.importers.eager_launch`), and the host work outside the
forward (scheduling, input preparation, sampling, output handling; the GPU idles meanwhile) is
the profile's `step_overhead` over sequences plus `prefill_overhead` for steps with prompts.
With CUDA graphs the launch path is one graph replay and this reduces to `ProfiledLatencyModel`.
Small or heavily sharded steps wait for the host, large ones for the GPU; an additive host term
would charge both.
"""
from __future__ import annotations

import math
from typing import Any

from policies import BatchPlan, ConfigError
from sim.latency.base import HOST_PARTS
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel


def launch_seconds(profile: Profile) -> float:
    """The launch path of one step from `profile.meta["eager_launch"]` (0 when absent)."""
    raw = profile.meta.get("eager_launch")
    if raw is None:
        return 0.0
    if not isinstance(raw, dict):
        raise ConfigError("profile.meta.eager_launch: expected an object with launch_s")
    v = raw.get("launch_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"profile.meta.eager_launch.launch_s: expected seconds >= 0, got {v!r}")
    return float(v)


class EagerLatencyModel(ProfiledLatencyModel):
    """`ProfiledLatencyModel` whose kernels overlap the host's launch path (see the module docstring)."""

    def __init__(self, profile: Profile, model: Any = None, block_size: int = 16) -> None:
        super().__init__(profile, model=model, block_size=block_size)
        self.launch_s = launch_seconds(profile)

    def breakdown(self, plan: BatchPlan, *args, **kwargs) -> dict[str, float]:
        """The profiled components plus `launch_wait`: the time the GPU waits for launches."""
        parts = super().breakdown(plan, *args, **kwargs)
        device = sum(v for k, v in parts.items() if k not in HOST_PARTS)
        parts["launch_wait"] = max(self.launch_s - device, 0.0) if not plan.is_empty else 0.0
        return parts

    def step_time(self, plan: BatchPlan) -> float:
        return float(sum(self.breakdown(plan).values()))

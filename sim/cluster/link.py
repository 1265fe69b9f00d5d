"""The link a request's KV cache crosses from a prefill replica to a decode replica.

Transfer time = latency + bytes / bandwidth (bandwidth per direction, bytes per second). Presets
are per-GPU figures; a transfer between tensor-parallel replicas moves each GPU's KV shard over
its own link at once, so the pair's bandwidth is the preset times min(prefill TP, decode TP).

Presets (per GPU, one direction): NVLink 3 on A100 (600 GB/s bidirectional -> 300 GB/s),
InfiniBand NDR 400 Gb/s (50 GB/s), RoCE 200 Gb/s (25 GB/s), PCIe Gen4 x16 (~25 GB/s usable of
32 GB/s), 100 Gb Ethernet (12.5 GB/s, the Splitwise simulator's slow case).
"""
from __future__ import annotations

from dataclasses import dataclass

from policies import ConfigError
from policies.config import check_choice

GB = 1e9

# name -> (bandwidth bytes/s per direction per GPU, latency seconds)
LINK_PRESETS: dict[str, tuple[float, float]] = {
    "nvlink": (300 * GB, 5e-6),
    "infiniband": (50 * GB, 10e-6),
    "roce": (25 * GB, 20e-6),
    "pcie": (25 * GB, 10e-6),
    "ethernet": (12.5 * GB, 50e-6),
}


@dataclass(frozen=True)
class Link:
    """A KV transfer link: `bandwidth` in bytes/s, `latency` in seconds."""

    bandwidth: float
    latency: float = 0.0
    name: str = "custom"

    def __post_init__(self) -> None:
        if isinstance(self.bandwidth, bool) or not isinstance(self.bandwidth, (int, float)) or not self.bandwidth > 0:
            raise ConfigError(f"disaggregation.link_bandwidth_gbps: must be > 0, got {self.bandwidth!r}")
        if isinstance(self.latency, bool) or not isinstance(self.latency, (int, float)) or self.latency < 0:
            raise ConfigError(f"disaggregation.link_latency_s: must be >= 0, got {self.latency!r}")

    @classmethod
    def preset(cls, name: str, bandwidth_gbps: float | None = None, latency_s: float | None = None,
               num_parallel: int = 1) -> "Link":
        """A preset (optionally with its bandwidth in GB/s or latency replaced), `num_parallel` lanes wide."""
        check_choice("disaggregation.link", name, tuple(LINK_PRESETS))
        bw, lat = LINK_PRESETS[name]
        if bandwidth_gbps is not None:
            bw = bandwidth_gbps * GB
        if latency_s is not None:
            lat = latency_s
        return cls(bw * max(1, num_parallel), lat, name)

    def transfer_time(self, num_bytes: float) -> float:
        """Seconds to move `num_bytes` (0 bytes cost nothing, not even the latency)."""
        if num_bytes <= 0:
            return 0.0
        return self.latency + num_bytes / self.bandwidth

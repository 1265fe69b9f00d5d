"""`GPUSpec` and the GPU catalog: datasheet peak rates, memory and interconnects.

Figures are dense (no 2:4 sparsity) tensor-core peaks from the vendor datasheets cited beside each
entry. Link bandwidths are stored PER DIRECTION (datasheets quote NVLink and PCIe bidirectional
totals: 900 GB/s NVLink on H100 is 450 GB/s each way), since a ring all-reduce or a swap copy
streams one way per link. `memory_bytes` is the total torch reports (`torch.cuda.mem_get_info()[1]`, a little under
nvidia-smi's figure), which is what vLLM's `gpu_memory_utilization` multiplies.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from policies.config import ConfigError, check_number

GB = 1e9
GiB = 2**30
TFLOPS = 1e12


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator's peak compute, memory and links (bytes, bytes/s, FLOP/s)."""

    name: str
    flops_bf16: float  # dense BF16/FP16 tensor FLOP/s (FP32 accumulate)
    flops_fp8: float  # dense FP8 tensor FLOP/s (equal to flops_bf16 where the GPU has no FP8)
    hbm_bandwidth: float  # bytes/s
    memory_bytes: int
    nvlink_bandwidth: float  # bytes/s per direction per GPU; 0 = no NVLink (TP goes over PCIe)
    pcie_bandwidth: float  # bytes/s per direction (host <-> GPU)
    price_per_hour: float  # USD per GPU-hour, a rough on-demand cloud price for comparisons only

    def __post_init__(self) -> None:
        for f in ("flops_bf16", "flops_fp8", "hbm_bandwidth", "memory_bytes", "pcie_bandwidth"):
            check_number(f"hardware.gpu.{f}", getattr(self, f), 0.0, strict_min=True)
        check_number("hardware.gpu.nvlink_bandwidth", self.nvlink_bandwidth, 0.0)
        check_number("hardware.gpu.price_per_hour", self.price_per_hour, 0.0)

    @property
    def interconnect_bandwidth(self) -> float:
        """Bandwidth one GPU's TP collectives get: NVLink, or PCIe when the card has none."""
        return self.nvlink_bandwidth or self.pcie_bandwidth

    def peak_flops(self, dtype_bytes: int) -> float:
        return self.flops_fp8 if dtype_bytes == 1 else self.flops_bf16


GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TFLOPS with sparsity -> 989.4 dense,
    # FP8 3,958 sparse -> 1,979 dense, HBM3 3.35 TB/s, 80 GB, NVLink 900 GB/s, PCIe Gen5 128 GB/s.
    # torch total_memory: 79.19 GiB (nvidia-smi shows 81,559 MiB; the driver keeps the rest).
    GPUSpec("H100-SXM", 989.4 * TFLOPS, 1978.9 * TFLOPS, 3.35e12, int(79.19 * GiB), 450 * GB, 64 * GB, 3.00),
    # H800 SXM5 (China variant of H100): same SMs and HBM3 (3.35 TB/s, 80 GB); NVLink cut to
    # 400 GB/s (NVIDIA H800 product brief).
    GPUSpec("H800", 989.4 * TFLOPS, 1978.9 * TFLOPS, 3.35e12, int(79.19 * GiB), 200 * GB, 64 * GB, 2.50),
    # NVIDIA H200 datasheet (SXM): BF16 1,979 sparse -> 989.4 dense, FP8 1,979 dense, HBM3e 4.8 TB/s,
    # 141 GB, NVLink 900 GB/s, PCIe Gen5 128 GB/s. torch total_memory ~139.8 GiB.
    GPUSpec("H200", 989.4 * TFLOPS, 1978.9 * TFLOPS, 4.8e12, int(139.8 * GiB), 450 * GB, 64 * GB, 3.80),
    # NVIDIA A100 datasheet (SXM 80GB): BF16 312 TFLOPS dense, no FP8, HBM2e 2,039 GB/s, 80 GB,
    # NVLink 600 GB/s, PCIe Gen4 64 GB/s. torch total_memory ~79.15 GiB.
    GPUSpec("A100-80G", 312 * TFLOPS, 312 * TFLOPS, 2.039e12, int(79.15 * GiB), 300 * GB, 32 * GB, 1.80),
    # NVIDIA A100 datasheet (SXM 40GB): BF16 312 TFLOPS, HBM2 1,555 GB/s, 40 GB, NVLink 600 GB/s.
    GPUSpec("A100-40G", 312 * TFLOPS, 312 * TFLOPS, 1.555e12, int(39.39 * GiB), 300 * GB, 32 * GB, 1.30),
    # NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse), FP8 733 dense, GDDR6 864 GB/s,
    # 48 GB, no NVLink, PCIe Gen4 x16 64 GB/s. torch total_memory ~44.5 GiB.
    GPUSpec("L40S", 362.05 * TFLOPS, 733 * TFLOPS, 0.864e12, int(44.53 * GiB), 0.0, 32 * GB, 1.00),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: FP16/BF16 tensor with FP32
    # accumulate 165.2 TFLOPS dense, FP8 (FP32 accumulate) 330.3 dense, GDDR6X 1,008 GB/s, 24 GB,
    # no NVLink, PCIe Gen4 x16. torch total_memory 25,250,627,584 B (../shared llmservingsim meta.json).
    GPUSpec("RTX-4090", 165.2 * TFLOPS, 330.3 * TFLOPS, 1.008e12, 25_250_627_584, 0.0, 32 * GB, 0.40),
    # NVIDIA RTX PRO 6000 Blackwell (workstation) datasheet: 96 GB GDDR7 at 1,792 GB/s, PCIe Gen5 x16,
    # no NVLink. Dense BF16 ~504 TFLOPS and FP8 ~1,007 are derived from the Blackwell whitepaper's
    # per-SM tensor rate (188 SMs, 2.6 GHz boost); approximate. torch total_memory ~95 GiB.
    GPUSpec("RTX-PRO-6000", 503.8 * TFLOPS, 1007.6 * TFLOPS, 1.792e12, int(94.97 * GiB), 0.0, 64 * GB, 1.50),
)}

_ALIASES = {
    "h100": "H100-SXM", "h100sxm5": "H100-SXM", "h10080g": "H100-SXM", "h10080gb": "H100-SXM",
    "a100": "A100-80G", "a10080gb": "A100-80G", "a100sxm80g": "A100-80G", "a10040gb": "A100-40G",
    "h200sxm": "H200", "h800sxm": "H800", "4090": "RTX-4090", "geforcertx4090": "RTX-4090",
    "rtxpro6000blackwell": "RTX-PRO-6000", "l40": "L40S",
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_LOOKUP = {_key(n): n for n in GPUS} | {_key(a): n for a, n in _ALIASES.items()}


def gpu_names() -> list[str]:
    return list(GPUS)


def get_gpu(name: str) -> GPUSpec:
    """A catalog GPU by case-insensitive name or alias (`h100`, `A100-80GB`, `rtx4090`...)."""
    hit = _LOOKUP.get(_key(name)) if isinstance(name, str) else None
    if hit is None:
        raise ConfigError(f"hardware.gpu: unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return GPUS[hit]

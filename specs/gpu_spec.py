"""`GPUSpec` and the GPU catalog: datasheet peak rates, memory, interconnects and power.

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
    """One accelerator's peak compute, memory, links and power (bytes, bytes/s, FLOP/s, W).

    `board_power_w` is the datasheet's board power (TDP/TBP): what a GPU draws flat out.
    `idle_power_w` is what it draws powered on with nothing to run, from the source in `source`
    (datasheets rarely give it; where none is published it is an estimate, said so there).
    """

    name: str
    flops_bf16: float  # dense BF16/FP16 tensor FLOP/s (FP32 accumulate)
    flops_fp8: float  # dense FP8 tensor FLOP/s (equal to flops_bf16 where the GPU has no FP8)
    hbm_bandwidth: float  # bytes/s
    memory_bytes: int
    nvlink_bandwidth: float  # bytes/s per direction per GPU; 0 = no NVLink (TP goes over PCIe)
    pcie_bandwidth: float  # bytes/s per direction (host <-> GPU)
    price_per_hour: float  # USD per GPU-hour, a rough on-demand cloud price for comparisons only
    board_power_w: float = 700.0
    idle_power_w: float = 100.0
    vendor: str = "NVIDIA"
    source: str = ""  # where the figures come from (datasheet, whitepaper), for the planner's tables

    def __post_init__(self) -> None:
        for f in ("flops_bf16", "flops_fp8", "hbm_bandwidth", "memory_bytes", "pcie_bandwidth", "board_power_w"):
            check_number(f"hardware.gpu.{f}", getattr(self, f), 0.0, strict_min=True)
        check_number("hardware.gpu.nvlink_bandwidth", self.nvlink_bandwidth, 0.0)
        check_number("hardware.gpu.price_per_hour", self.price_per_hour, 0.0)
        check_number("hardware.gpu.idle_power_w", self.idle_power_w, 0.0)
        if self.idle_power_w >= self.board_power_w:
            raise ConfigError(f"hardware.gpu.idle_power_w: {self.idle_power_w} W must be below the board power "
                              f"{self.board_power_w} W")

    @property
    def interconnect_bandwidth(self) -> float:
        """Bandwidth one GPU's TP collectives get: NVLink, or PCIe when the card has none."""
        return self.nvlink_bandwidth or self.pcie_bandwidth

    def peak_flops(self, dtype_bytes: int) -> float:
        return self.flops_fp8 if dtype_bytes == 1 else self.flops_bf16


# Idle power: NVIDIA and AMD publish board power, not idle draw. Where no figure is cited, idle is an
# estimate of what nvidia-smi / amd-smi show for a powered-on part with no work (about 10-20% of board
# power on data-centre GPUs), said "idle estimated" in `source`.
GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TFLOPS with sparsity -> 989.4 dense,
    # FP8 3,958 sparse -> 1,979 dense, HBM3 3.35 TB/s, 80 GB, NVLink 900 GB/s, PCIe Gen5 128 GB/s, up to 700 W.
    # torch total_memory: 79.19 GiB (nvidia-smi shows 81,559 MiB; the driver keeps the rest).
    GPUSpec("H100-SXM", 989.4 * TFLOPS, 1978.9 * TFLOPS, 3.35e12, int(79.19 * GiB), 450 * GB, 64 * GB, 3.00,
            700, 75, source="NVIDIA H100 datasheet (SXM5); idle estimated"),
    # H800 SXM5 (China variant of H100): same SMs and HBM3 (3.35 TB/s, 80 GB); NVLink cut to
    # 400 GB/s (NVIDIA H800 product brief); 700 W.
    GPUSpec("H800", 989.4 * TFLOPS, 1978.9 * TFLOPS, 3.35e12, int(79.19 * GiB), 200 * GB, 64 * GB, 2.50,
            700, 75, source="NVIDIA H800 product brief; idle estimated"),
    # NVIDIA H20 (China variant of Hopper, product brief): FP8 296 TFLOPS and BF16 148 TFLOPS dense,
    # HBM3 96 GB at 4.0 TB/s, NVLink 900 GB/s, PCIe Gen5 x16, 400 W.
    GPUSpec("H20", 148 * TFLOPS, 296 * TFLOPS, 4.0e12, int(95.0 * GiB), 450 * GB, 64 * GB, 1.50,
            400, 50, source="NVIDIA H20 product brief; idle estimated"),
    # NVIDIA H200 datasheet (SXM): BF16 1,979 sparse -> 989.4 dense, FP8 1,979 dense, HBM3e 4.8 TB/s,
    # 141 GB, NVLink 900 GB/s, PCIe Gen5 128 GB/s, up to 700 W. torch total_memory ~139.8 GiB.
    GPUSpec("H200", 989.4 * TFLOPS, 1978.9 * TFLOPS, 4.8e12, int(139.8 * GiB), 450 * GB, 64 * GB, 3.80,
            700, 75, source="NVIDIA H200 datasheet (SXM); idle estimated"),
    # NVIDIA DGX B200 datasheet: 8 GPUs, 72 PFLOPS FP8 and 36 PFLOPS BF16 with sparsity (-> 4.5 / 2.25
    # PFLOPS dense per GPU), 1,440 GB HBM3e at 64 TB/s (180 GB and 8 TB/s per GPU), NVLink 5 1.8 TB/s
    # per GPU, PCIe Gen5; HGX B200 board power up to 1,000 W per GPU.
    GPUSpec("B200", 2250 * TFLOPS, 4500 * TFLOPS, 8.0e12, int(178.0 * GiB), 900 * GB, 64 * GB, 6.00,
            1000, 120, source="NVIDIA DGX B200 datasheet (per GPU); idle estimated"),
    # NVIDIA GB200 NVL72 datasheet, per GPU (72 Blackwell GPUs): FP8 720 PFLOPS and BF16 360 PFLOPS
    # with sparsity (-> 5.0 / 2.5 PFLOPS dense per GPU), 13.4 TB HBM3e at 576 TB/s (186 GB, 8 TB/s per
    # GPU), NVLink 5 1.8 TB/s per GPU; ~1,200 W per GPU (a 2,700 W superchip holds two GPUs and a Grace
    # CPU). Host link: NVLink-C2C to Grace, 900 GB/s total (450 GB/s per direction, shared by 2 GPUs).
    GPUSpec("GB200", 2500 * TFLOPS, 5000 * TFLOPS, 8.0e12, int(184.0 * GiB), 900 * GB, 225 * GB, 8.00,
            1200, 150, source="NVIDIA GB200 NVL72 datasheet (per GPU); idle estimated"),
    # NVIDIA A100 datasheet (SXM 80GB): BF16 312 TFLOPS dense, no FP8, HBM2e 2,039 GB/s, 80 GB,
    # NVLink 600 GB/s, PCIe Gen4 64 GB/s, 400 W. torch total_memory ~79.15 GiB.
    GPUSpec("A100-80G", 312 * TFLOPS, 312 * TFLOPS, 2.039e12, int(79.15 * GiB), 300 * GB, 32 * GB, 1.80,
            400, 50, source="NVIDIA A100 datasheet (SXM 80GB); idle estimated"),
    # NVIDIA A100 datasheet (SXM 40GB): BF16 312 TFLOPS, HBM2 1,555 GB/s, 40 GB, NVLink 600 GB/s, 400 W.
    GPUSpec("A100-40G", 312 * TFLOPS, 312 * TFLOPS, 1.555e12, int(39.39 * GiB), 300 * GB, 32 * GB, 1.30,
            400, 50, source="NVIDIA A100 datasheet (SXM 40GB); idle estimated"),
    # NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse), FP8 733 dense, GDDR6 864 GB/s,
    # 48 GB, no NVLink, PCIe Gen4 x16 64 GB/s, 350 W. torch total_memory ~44.5 GiB.
    GPUSpec("L40S", 362.05 * TFLOPS, 733 * TFLOPS, 0.864e12, int(44.53 * GiB), 0.0, 32 * GB, 1.00,
            350, 35, source="NVIDIA L40S datasheet; idle estimated"),
    # NVIDIA L40 datasheet: BF16 181.05 TFLOPS dense (362.1 sparse), FP8 362 dense, GDDR6 864 GB/s,
    # 48 GB, no NVLink, PCIe Gen4 x16, 300 W: the L40S's memory with half its tensor rate.
    GPUSpec("L40", 181.05 * TFLOPS, 362 * TFLOPS, 0.864e12, int(44.53 * GiB), 0.0, 32 * GB, 0.90,
            300, 30, source="NVIDIA L40 datasheet; idle estimated"),
    # NVIDIA A10 datasheet: BF16 125 TFLOPS dense (250 sparse; 72 SMs at full-rate FP32 accumulate),
    # no FP8, GDDR6 600 GB/s, 24 GB, PCIe Gen4 x16, 150 W.
    GPUSpec("A10", 125 * TFLOPS, 125 * TFLOPS, 0.6e12, int(22.1 * GiB), 0.0, 32 * GB, 0.75,
            150, 20, source="NVIDIA A10 datasheet; idle estimated"),
    # AWS's A10G (G5 instances; AWS publishes no datasheet): GA102 with 80 SMs at 1.71 GHz, whose
    # BF16/FP16 tensor rate with FP32 accumulate is the GeForce half rate, 80 x 512 FLOP/clk x 1.71 GHz
    # ~ 70 TFLOPS dense (cli99/llm-analysis gpu_configs/a10g-pcie-24gb.json: 70), not the A10's 125;
    # GDDR6 600 GB/s, 24 GB, PCIe Gen4 x16; board power as the A10's (not published).
    GPUSpec("A10G", 70 * TFLOPS, 70 * TFLOPS, 0.6e12, int(22.1 * GiB), 0.0, 32 * GB, 1.00,
            150, 20, source="A10G (AWS G5): SM count x GeForce-rate tensor throughput; memory as A10; "
                            "power and idle estimated"),
    # NVIDIA H100 datasheet (PCIe): BF16 1,513 TFLOPS with sparsity -> 756 dense, FP8 1,513 dense,
    # HBM2e 2.0 TB/s, 80 GB, PCIe Gen5 128 GB/s, 350 W. Its NVLink bridge joins two cards only and
    # most PCIe servers have none: TP goes over PCIe here.
    GPUSpec("H100-PCIe", 756 * TFLOPS, 1513 * TFLOPS, 2.0e12, int(79.19 * GiB), 0.0, 64 * GB, 2.40,
            350, 50, source="NVIDIA H100 datasheet (PCIe); idle estimated"),
    # NVIDIA A100 datasheet (PCIe 80GB): BF16 312 TFLOPS dense, no FP8, HBM2e 1,935 GB/s, 80 GB,
    # PCIe Gen4 64 GB/s, 300 W; its NVLink bridge joins two cards only: TP goes over PCIe here.
    GPUSpec("A100-80G-PCIe", 312 * TFLOPS, 312 * TFLOPS, 1.935e12, int(79.15 * GiB), 0.0, 32 * GB, 1.60,
            300, 40, source="NVIDIA A100 datasheet (PCIe 80GB); idle estimated"),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: FP16/BF16 tensor with FP32
    # accumulate 165.2 TFLOPS dense, FP8 (FP32 accumulate) 330.3 dense, GDDR6X 1,008 GB/s, 24 GB,
    # no NVLink, PCIe Gen4 x16, 450 W. torch total_memory 25,250,627,584 B (a measured run's meta.json).
    GPUSpec("RTX-4090", 165.2 * TFLOPS, 330.3 * TFLOPS, 1.008e12, 25_250_627_584, 0.0, 32 * GB, 0.40,
            450, 25, source="NVIDIA Ada whitepaper (RTX 4090); idle estimated"),
    # NVIDIA RTX PRO 6000 Blackwell (workstation) datasheet: 96 GB GDDR7 at 1,792 GB/s, PCIe Gen5 x16,
    # no NVLink, 600 W. Dense BF16 ~504 TFLOPS and FP8 ~1,007 are derived from the Blackwell whitepaper's
    # per-SM tensor rate (188 SMs, 2.6 GHz boost); approximate. torch total_memory ~95 GiB.
    GPUSpec("RTX-PRO-6000", 503.8 * TFLOPS, 1007.6 * TFLOPS, 1.792e12, int(94.97 * GiB), 0.0, 64 * GB, 1.50,
            600, 40, source="NVIDIA RTX PRO 6000 Blackwell datasheet; rates derived; idle estimated"),
    # AMD Instinct MI300X datasheet: FP16/BF16 1,307.4 TFLOPS dense (2,614.9 sparse), FP8 2,614.9 dense,
    # HBM3 192 GB at 5.3 TB/s, Infinity Fabric 896 GB/s aggregate peer bandwidth (448 per direction),
    # PCIe Gen5 x16 128 GB/s, 750 W.
    GPUSpec("MI300X", 1307.4 * TFLOPS, 2614.9 * TFLOPS, 5.3e12, int(191.5 * GiB), 448 * GB, 64 * GB, 2.50,
            750, 140, vendor="AMD", source="AMD Instinct MI300X datasheet; idle estimated"),
    # AMD Instinct MI325X datasheet: the MI300X compute (1,307.4 / 2,614.9 TFLOPS BF16 / FP8 dense) with
    # HBM3E 256 GB at 6.0 TB/s, Infinity Fabric 896 GB/s aggregate, PCIe Gen5 x16, 1,000 W.
    GPUSpec("MI325X", 1307.4 * TFLOPS, 2614.9 * TFLOPS, 6.0e12, int(255.0 * GiB), 448 * GB, 64 * GB, 3.20,
            1000, 160, vendor="AMD", source="AMD Instinct MI325X datasheet; idle estimated"),
    # AMD Instinct MI355X datasheet: FP16/BF16 2.5 PFLOPS and FP8 5.0 PFLOPS dense (2x with sparsity),
    # HBM3E 288 GB at 8.0 TB/s, Infinity Fabric 1,075 GB/s aggregate (7 links x 153.6), PCIe Gen5 x16,
    # 1,400 W (liquid cooled).
    GPUSpec("MI355X", 2516.6 * TFLOPS, 5033.2 * TFLOPS, 8.0e12, int(287.0 * GiB), 537.6 * GB, 64 * GB, 5.00,
            1400, 200, vendor="AMD", source="AMD Instinct MI355X datasheet; idle estimated"),
)}

_ALIASES = {
    "h100": "H100-SXM", "h100sxm5": "H100-SXM", "h10080g": "H100-SXM", "h10080gb": "H100-SXM",
    "a100": "A100-80G", "a10080gb": "A100-80G", "a100sxm80g": "A100-80G", "a10040gb": "A100-40G",
    "h200sxm": "H200", "h800sxm": "H800", "4090": "RTX-4090", "geforcertx4090": "RTX-4090",
    "rtxpro6000blackwell": "RTX-PRO-6000", "b200sxm": "B200", "hgxb200": "B200",
    "gb200nvl72": "GB200", "mi300": "MI300X", "instinctmi300x": "MI300X",
    "h100pcie80gb": "H100-PCIe", "a100pcie": "A100-80G-PCIe", "a10080gbpcie": "A100-80G-PCIe",
    "instinctmi325x": "MI325X", "instinctmi355x": "MI355X", "h20sxm": "H20",
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_LOOKUP = {_key(n): n for n in GPUS} | {_key(a): n for a, n in _ALIASES.items()}


def gpu_names() -> list[str]:
    return list(GPUS)


def get_gpu(name: str, field: str = "hardware.gpu") -> GPUSpec:
    """A catalog GPU by case-insensitive name or alias (`h100`, `A100-80GB`, `rtx4090`...); an unknown
    one is refused naming `field`, the setting it was given as."""
    hit = _LOOKUP.get(_key(name)) if isinstance(name, str) else None
    if hit is None:
        raise ConfigError(f"{field}: unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return GPUS[hit]

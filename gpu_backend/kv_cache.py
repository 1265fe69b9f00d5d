"""`KVCache`: the paged K/V tensors, indexed by the `BlockManager`'s block ids.

One tensor per layer for K and one for V, each `[num_blocks, block_size, num_kv_heads, head_dim]`,
all views into a single `[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]` buffer so
a swap copies every layer's blocks in one indexed copy. Token slot `s` of a layer is
`k.view(-1, Hkv, D)[s]` with `s = block_id * block_size + offset`.

CPU swap space has the same layout with `num_cpu_blocks` blocks (pinned memory on CUDA so the
copies can be asynchronous). `swap_out`/`swap_in` take the `(src, dst)` block pairs of a `BatchPlan`.
The KV offload tier (`policies.kv_offload`) is a third buffer of the same layout, `num_offload_blocks`
blocks in host memory: `offload_load` / `offload_store` take a plan's `offload_load_blocks` and
`offload_store_blocks` pairs.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from gpu_backend.model_config import ModelConfig
from policies import ConfigError


class KVCache:
    """Per-layer paged K and V tensors on the device, plus the CPU swap space."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int, num_cpu_blocks: int = 0,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 num_offload_blocks: int = 0) -> None:
        if num_blocks < 1:
            raise ValueError(f"cache.num_gpu_blocks: must be >= 1, got {num_blocks}")
        self.num_blocks, self.block_size, self.num_cpu_blocks = num_blocks, block_size, num_cpu_blocks
        self.device = torch.device(device)
        shape = (config.num_hidden_layers, 2, num_blocks, block_size, config.num_key_value_heads, config.head_dim)
        check_memory(self.device, math.prod(shape[:2] + shape[3:]) * dtype.itemsize,
                     num_blocks, num_cpu_blocks, num_offload_blocks, ENGINE_FIELDS)
        self.buffer = torch.zeros(shape, dtype=dtype, device=self.device)  # [L, 2, N, B, Hkv, D]
        self.k = [self.buffer[i, 0] for i in range(config.num_hidden_layers)]  # each [N, B, Hkv, D]
        self.v = [self.buffer[i, 1] for i in range(config.num_hidden_layers)]
        cpu_shape = shape[:2] + (num_cpu_blocks,) + shape[3:]
        pin = self.device.type == "cuda"
        self.cpu_buffer = torch.zeros(cpu_shape, dtype=dtype, pin_memory=pin)  # [L, 2, Ncpu, B, Hkv, D]
        self.num_offload_blocks = num_offload_blocks
        offload_shape = shape[:2] + (num_offload_blocks,) + shape[3:]
        self.offload_buffer = torch.zeros(offload_shape, dtype=dtype, pin_memory=pin)  # [L, 2, Noff, B, Hkv, D]

    @property
    def bytes_per_block(self) -> int:
        return self.buffer[:, :, 0].numel() * self.buffer.element_size()

    def fill_(self, value: float) -> None:
        """Overwrite every slot (tests fill NaN sentinels to catch stray reads and writes)."""
        self.buffer.fill_(value)
        self.cpu_buffer.fill_(value)
        self.offload_buffer.fill_(value)

    def swap_out(self, pairs) -> None:
        """Copy GPU blocks to CPU swap space: `pairs` of (gpu_block, cpu_block)."""
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs], device=self.device)
        dst = torch.tensor([p[1] for p in pairs])
        self.cpu_buffer[:, :, dst] = self.buffer[:, :, src].to("cpu")

    def swap_in(self, pairs) -> None:
        """Copy CPU swap blocks back to the device: `pairs` of (cpu_block, gpu_block)."""
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs])
        dst = torch.tensor([p[1] for p in pairs], device=self.device)
        blocks = self.cpu_buffer[:, :, src]
        if self.device.type == "cuda":
            blocks = blocks.pin_memory().to(self.device, non_blocking=True)
        self.buffer[:, :, dst] = blocks

    def offload_store(self, pairs) -> None:
        """Copy GPU blocks to the offload tier: `pairs` of (gpu_block, offload_block)."""
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs], device=self.device)
        dst = torch.tensor([p[1] for p in pairs])
        self.offload_buffer[:, :, dst] = self.buffer[:, :, src].to("cpu")

    def offload_load(self, pairs) -> None:
        """Copy offload-tier blocks into GPU blocks: `pairs` of (offload_block, gpu_block)."""
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs])
        dst = torch.tensor([p[1] for p in pairs], device=self.device)
        blocks = self.offload_buffer[:, :, src]
        if self.device.type == "cuda":
            blocks = blocks.pin_memory().to(self.device, non_blocking=True)
        self.buffer[:, :, dst] = blocks

    def copy_blocks(self, pairs) -> None:
        """Device-side block copies (copy-on-write): `pairs` of (src_block, dst_block)."""
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs], device=self.device)
        dst = torch.tensor([p[1] for p in pairs], device=self.device)
        self.buffer[:, :, dst] = self.buffer[:, :, src]

    @staticmethod
    def default_num_blocks(config: ModelConfig, block_size: int, dtype: torch.dtype, device: str | torch.device,
                           max_bytes: int | None = None) -> int:
        """A pool that fits: 90% of free GPU memory on CUDA, or `max_bytes` (default 256 MiB) on CPU."""
        bytes_per_block = config.kv_bytes_per_token(torch.tensor([], dtype=dtype).element_size()) * block_size
        device = torch.device(device)
        if max_bytes is None:
            if device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(device)
                max_bytes = int(free * 0.9)
            else:
                max_bytes = 256 * 2**20
        return max(1, max_bytes // bytes_per_block)


#: the fields `check_memory` names: a servesim config's (`calibrate.engine_config`), or an `EngineConfig`'s
CONFIG_FIELDS = ("hardware.num_gpu_blocks", "hardware.swap_space_gb", "cache.offload_size_gb")
ENGINE_FIELDS = ("cache.num_gpu_blocks", "cache.num_cpu_blocks", "cache.num_offload_blocks")


def check_memory(device: torch.device, block_bytes: int, num_gpu_blocks: int, num_cpu_blocks: int = 0,
                 num_offload_blocks: int = 0, fields: tuple[str, str, str] = CONFIG_FIELDS) -> None:
    """Refuse KV blocks the machine has no room for, naming the field (`fields`: the GPU pool's, the
    swap space's, the offload tier's), before torch tries to allocate them (its error is an allocator
    traceback, or the kernel's OOM killer midway through zeroing them). The KV cache goes on
    `device`; swap space and the offload tier in host memory (with the KV cache on a CPU device).
    The model's weights are not counted."""
    device = torch.device(device)
    host = available_memory("cpu")
    room = host if device.type == "cpu" else available_memory(device)
    need = num_gpu_blocks * block_bytes
    if need > room:
        raise ConfigError(f"{fields[0]}: {num_gpu_blocks} KV blocks of {block_bytes} bytes need "
                          f"{_bytes(need)} but {device.type} memory has {_bytes(room)} available; at most "
                          f"{room // block_bytes} fit")
    left, beside = (host - need, ["the KV cache"]) if device.type == "cpu" else (host, [])
    for field, what, blocks in ((fields[1], "swap space", num_cpu_blocks),
                                (fields[2], "offload tier", num_offload_blocks)):
        need = blocks * block_bytes
        if need > left:
            raise ConfigError(f"{field}: {blocks} KV blocks of {block_bytes} bytes need {_bytes(need)} of host memory "
                              f"but {_bytes(max(left, 0))} are available"
                              + (f" beside {' and '.join(beside)}" if beside else ""))
        left -= need
        beside.append(f"the {what}")


def _bytes(n: int) -> str:
    """`n` bytes, exact and in GiB: "327680000000 bytes (305.2 GiB)"."""
    return f"{n} bytes ({n / 2**30:.1f} GiB)"


def available_memory(device: str | torch.device) -> int:
    """Bytes a new allocation can take on `device` now: a CUDA device's free memory, or for the CPU
    (host memory: CPU KV, swap space, offload tier) the kernel's MemAvailable, which counts the
    page cache it would give back (free pages alone where /proc/meminfo is missing)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

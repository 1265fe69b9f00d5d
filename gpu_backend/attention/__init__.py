"""Paged attention backends, chosen automatically.

Every backend has `forward(q [T,Hq,D], k [T,Hkv,D], v [T,Hkv,D], k_cache, v_cache, meta, scale) -> [T,Hq,D]`:
it writes the new keys/values at `meta.slot_mapping`, then attends each query to its sequence's
cached context (bottom-right causal). `flash` (flash-attn varlen with block tables) when CUDA and
flash-attn are present; `torch` (gather by block table + SDPA) everywhere else. Same outputs within
dtype tolerance.
"""
from __future__ import annotations

import torch

from gpu_backend.attention.flash_backend import FlashAttentionBackend
from gpu_backend.attention.torch_backend import TorchAttentionBackend
from policies import ConfigError

BACKENDS = ("auto", "torch", "flash")


def flash_available() -> bool:
    """True when CUDA is up and `flash_attn` imports."""
    if not torch.cuda.is_available():
        return False
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def select_backend(device: str | torch.device, name: str = "auto"):
    """The backend object for `device`: `name` is auto, torch or flash."""
    if name not in BACKENDS:
        raise ConfigError(f"engine.attention_backend: {name!r} is not allowed; choose one of {', '.join(BACKENDS)}")
    device = torch.device(device)
    if name == "auto":
        name = "flash" if device.type == "cuda" and flash_available() else "torch"
    if name == "flash":
        if device.type != "cuda" or not flash_available():
            raise ConfigError("engine.attention_backend: 'flash' needs a CUDA device and the flash-attn package")
        return FlashAttentionBackend()
    return TorchAttentionBackend()

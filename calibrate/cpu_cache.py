"""The CPU's last-level cache, and whether a model's weights fit in it (a validation diagnostic).

A CPU decode step reads every weight once. Weights that fit the last-level cache are read from it,
and then how much of the cache other tenants of a shared host leave decides the step's time: on the
shared 2-core development VM the tiny model's identical decode steps moved by 8-27% within a minute,
those of a model three times the cache by 2-4% (examples/small-llama/README.md). Linux describes
the caches this machine sees, not who else shares them, so the diagnostic warns; it cannot tell.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

def cpu_model() -> str:
    """The CPU's model name as Linux reports it (/proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: where Linux describes cpu0's caches, one `index*` folder per cache
SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


@dataclass(frozen=True)
class CpuCache:
    """One data (or unified) cache of the CPU: its level, size and the CPUs that this machine sees share it."""

    level: int
    size_bytes: int
    shared_cpus: str

    @property
    def name(self) -> str:
        """The cache as a line names it: "32 MiB L3"."""
        return f"{self.size_bytes / 2 ** 20:.0f} MiB L{self.level}"

    def holds(self, num_bytes: int) -> bool:
        """Whether `num_bytes` fit in this cache."""
        return num_bytes <= self.size_bytes

    def weights_note(self, weight_bytes: int) -> str | None:
        """A warning line when `weight_bytes` fit in this cache, else None."""
        if not self.holds(weight_bytes):
            return None
        return (f"the model's weights ({weight_bytes / 2 ** 20:.0f} MiB) fit in this CPU's "
                f"{self.name} cache: where other tenants share that "
                "cache (a cloud VM) its steps' times move with what they leave of it, whatever the "
                "calibration saw; examples/small-llama's weights do not fit (its README)")

    def as_dict(self, weight_bytes: int) -> dict:
        """details.json's `last_level_cache`: the cache and whether `weight_bytes` fit in it."""
        return {"level": self.level, "size_bytes": self.size_bytes, "shared_cpus": self.shared_cpus,
                "weight_bytes": int(weight_bytes), "weights_fit": self.holds(weight_bytes),
                "note": self.weights_note(weight_bytes)}


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size: "48K", "32768K", "1M" or a plain number of bytes."""
    text = text.strip()
    unit = _UNITS.get(text[-1:].upper())
    if unit is None:
        return int(text)
    return int(text[:-1]) * unit


def last_level_cache(root: Path = SYSFS_CACHES) -> CpuCache | None:
    """The highest-level data or unified cache under `root`; None where Linux does not describe one."""
    best = None
    for index in sorted(Path(root).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue  # a cache Linux half-describes is no evidence either way
        if kind == "Instruction":
            continue
        if best is None or level > best.level:
            best = CpuCache(level, size, shared)
    return best


def weight_bytes(model) -> int:
    """Bytes of a torch module's parameters and buffers: what one step streams at least once."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)

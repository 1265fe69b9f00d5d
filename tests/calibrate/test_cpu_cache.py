"""calibrate.cpu_cache: reading the last-level cache from a sysfs tree, and the weights-fit note."""
from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.cpu_cache import CpuCache, last_level_cache, parse_size, weight_bytes


def sysfs(root: Path, caches: list[tuple[int, str, str, str]]) -> Path:
    """A fake `cpu0/cache` folder: one index* per (level, type, size, shared_cpu_list)."""
    for i, (level, kind, size, shared) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        for name, value in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(value + "\n")
    return root


def test_sizes_parse_in_bytes():
    assert parse_size("48K") == 48 * 1024
    assert parse_size("32768K\n") == 32 * 2 ** 20
    assert parse_size("1M") == 2 ** 20
    assert parse_size("4096") == 4096


def test_the_highest_data_cache_is_the_last_level(tmp_path):
    root = sysfs(tmp_path, [(1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"),
                            (2, "Unified", "1024K", "0"), (3, "Unified", "32768K", "0-1")])
    assert last_level_cache(root) == CpuCache(3, 32 * 2 ** 20, "0-1")


def test_an_instruction_cache_or_a_half_described_one_is_not_read(tmp_path):
    root = sysfs(tmp_path, [(1, "Data", "48K", "0"), (2, "Instruction", "64M", "0")])
    (root / "index2").mkdir()
    (root / "index2" / "level").write_text("3\n")  # no size: ignored, not a crash
    assert last_level_cache(root) == CpuCache(1, 48 * 1024, "0")


def test_no_description_is_none(tmp_path):
    assert last_level_cache(tmp_path / "absent") is None


def test_the_note_warns_only_when_the_weights_fit():
    cache = CpuCache(3, 32 * 2 ** 20, "0-1")
    note = cache.weights_note(13 * 2 ** 20)
    assert note is not None and "13 MiB" in note and "32 MiB L3" in note and "small-llama" in note
    assert cache.weights_note(107 * 10 ** 6) is None
    d = cache.as_dict(107 * 10 ** 6)
    assert d["weights_fit"] is False and d["note"] is None and d["weight_bytes"] == 107 * 10 ** 6


def test_weight_bytes_counts_parameters_and_buffers_by_dtype():
    torch = pytest.importorskip("torch")
    m = torch.nn.Linear(4, 3, bias=True)  # 15 float32 parameters
    m.register_buffer("table", torch.zeros(10, dtype=torch.float16))
    assert weight_bytes(m) == 15 * 4 + 10 * 2

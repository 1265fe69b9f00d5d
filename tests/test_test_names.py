"""The test tree's own rule: no two test modules share a file name.

pytest imports each test module by its base name from the root of the tree (no packages), so a
second `test_runs.py` in another folder fails the whole run to collect ("import file mismatch")
when both are selected, as the default run does.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_name():
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert shared == {}, f"rename one of each: {shared}"

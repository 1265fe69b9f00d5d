"""policies.config helpers: the one unknown-key check every config section uses."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from policies import CacheConfig, ConfigError
from policies.config import check_keys


@dataclass(frozen=True)
class _Section:
    alpha: int = 1
    beta: int = 2
    derived: int = field(default=0, init=False)  # not a setting: never an allowed key


def test_known_keys_pass_and_the_first_unknown_one_is_named_with_the_allowed_list():
    check_keys("sec", {"alpha": 1, "beta": 2}, _Section)
    check_keys("sec", {}, ["a"])
    with pytest.raises(ConfigError) as info:
        check_keys("sec", {"alpha": 1, "gamma": 3, "delta": 4}, _Section)
    assert str(info.value) == "sec.gamma: unknown key; allowed keys: alpha, beta"


def test_init_false_fields_are_not_keys_and_plain_lists_work_as_allowed():
    with pytest.raises(ConfigError, match=r"^sec\.derived: unknown key; allowed keys: alpha, beta$"):
        check_keys("sec", {"derived": 1}, _Section)
    with pytest.raises(ConfigError, match=r"^a\.b\.z: unknown key; allowed keys: x, y$"):
        check_keys("a.b", ["z"], ("x", "y"))


def test_a_real_config_class_lists_its_fields_in_declaration_order():
    with pytest.raises(ConfigError) as info:
        check_keys("cache", {"blocksize": 16}, CacheConfig)
    message = str(info.value)
    assert message.startswith("cache.blocksize: unknown key; allowed keys: block_size, num_gpu_blocks")
    assert "\n" not in message

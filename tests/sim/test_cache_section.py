"""`[cache]` section: `enable_prefix_caching` left out means the policy's default (vLLM: on)."""
from __future__ import annotations

import tomllib

import pytest

from policies import ConfigError
from policies.schedulers import make_scheduler
from sim.config import CacheSection, config_to_toml, load_config
from sim.runner import build_cache_config


def prefix_caching_of(overrides: list[str]) -> bool:
    config = load_config({"model": {"name": "Llama-2-7B"}}, overrides)
    return make_scheduler(config.scheduler, build_cache_config(config)).block_manager.enable_prefix_caching


@pytest.mark.parametrize("policy, expected", [("vllm", True), ("chunked", False), ("continuous", False)])
def test_unset_prefix_caching_is_the_policys_default(policy, expected):
    assert CacheSection().enable_prefix_caching is None
    assert prefix_caching_of([f"scheduler.policy={policy}"]) is expected


@pytest.mark.parametrize("policy", ["vllm", "chunked"])
@pytest.mark.parametrize("value", [True, False])
def test_an_explicit_setting_wins(policy, value):
    assert prefix_caching_of([f"scheduler.policy={policy}", f"cache.enable_prefix_caching={str(value).lower()}"]) \
        is value


@pytest.mark.parametrize("value", [None, True, False])
def test_toml_round_trip_keeps_unset_unset(value):
    cache = {} if value is None else {"enable_prefix_caching": value}
    config = load_config({"scheduler": {"policy": "vllm"}, "cache": cache})
    text = config_to_toml(config)
    assert ("enable_prefix_caching" in tomllib.loads(text)["cache"]) is (value is not None)
    again = load_config(tomllib.loads(text))
    assert again == config and again.cache.enable_prefix_caching is value


def test_a_non_boolean_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="^cache.enable_prefix_caching: expected true or false"):
        load_config({"cache": {"enable_prefix_caching": "yes"}})

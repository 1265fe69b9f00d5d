"""The vllm preset table and the package's standard-library-only rule."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from policies import CacheConfig, ConfigError, SchedulerConfig
from policies.presets import VLLM_V0_VERSIONS, VLLM_VERSIONS


@pytest.mark.parametrize("version", sorted(VLLM_VERSIONS))
def test_vllm_preset_reads_the_table(version):
    for usage in ("api_server", "llm", "config"):
        for large in (False, True):
            cfg = SchedulerConfig.preset("vllm", version=version, usage=usage, large_gpu=large)
            row = VLLM_VERSIONS[version]
            assert cfg.max_num_batched_tokens == row["max_num_batched_tokens"][usage][int(large)]
            assert cfg.max_num_seqs == row["max_num_seqs"][usage][int(large)]
            assert (cfg.policy, cfg.preemption, cfg.queue) == ("vllm", "recompute", "fcfs")
            assert cfg.max_num_batched_tokens >= cfg.max_num_seqs  # vLLM validates this


def test_vllm_preset_overrides_and_errors():
    cfg = SchedulerConfig.preset("vllm", max_model_len=8192, queue="priority")
    assert cfg.max_model_len == 8192 and cfg.queue == "priority"
    with pytest.raises(ConfigError, match="^scheduler.version"):
        SchedulerConfig.preset("vllm", version="0.1")
    with pytest.raises(ConfigError, match="^scheduler.usage"):
        SchedulerConfig.preset("vllm", usage="nope")
    with pytest.raises(ConfigError, match="^scheduler.preset"):
        SchedulerConfig.preset("sglang")
    with pytest.raises(ConfigError, match="^scheduler.bogus"):
        SchedulerConfig.preset("vllm", bogus=1)
    cache = CacheConfig.preset("vllm", num_gpu_blocks=100)
    assert cache.enable_prefix_caching and cache.watermark == 0.0 and cache.block_size == 16


def test_policies_imports_only_the_standard_library():
    root = Path(__file__).resolve().parents[2] / "policies"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                assert top == "policies" or top in sys.stdlib_module_names, f"{path.name} imports {mod}"


def test_policies_share_their_mechanisms():
    """The policy classes only order the shared steps; nothing is re-implemented per policy."""
    from policies.chunked_scheduler import ChunkedScheduler, VllmScheduler
    from policies.continuous_scheduler import ContinuousScheduler

    for cls in (ChunkedScheduler, VllmScheduler, ContinuousScheduler):
        own = {k for k, v in vars(cls).items() if callable(v) and not k.startswith("__")}
        assert own <= {"_schedule_pass"}, f"{cls.__name__} defines {own}"


@pytest.mark.parametrize("version", sorted(VLLM_V0_VERSIONS))
def test_v0_versions_are_the_continuous_policy_with_that_eras_limits(version):
    row = VLLM_V0_VERSIONS[version]
    for max_model_len in (1024, 2048, 8192):
        cfg = SchedulerConfig.preset("vllm", version=version, max_model_len=max_model_len)
        assert (cfg.policy, cfg.preemption, cfg.queue) == ("continuous", "recompute", "fcfs")
        assert cfg.max_num_batched_tokens == max(2048, max_model_len)  # v0: max(max_model_len, 2048)
        assert (cfg.max_num_seqs, cfg.max_paddings) == (row["max_num_seqs"], row["max_paddings"])
    assert SchedulerConfig.preset("vllm", version=version, max_num_batched_tokens=16384).max_num_batched_tokens == 16384



# The boundary read from vLLM's release sdists (PyPI): v0.13.0's vllm/config/scheduler.py has
# `async_scheduling: bool = False`; v0.14.0's has `Field(default=None)`, resolved to True by
# VllmConfig.__post_init__ (vllm-project/vllm#27614).
@pytest.mark.parametrize("version", ["0.11", "0.12.0", "0.13", "0.13.0"])
def test_async_scheduling_off_by_default_before_v0_14(version):
    from policies.presets import async_scheduling_default
    assert async_scheduling_default(version) is False


@pytest.mark.parametrize("version", ["0.14", "0.14.0", "0.15", "0.19", "1.0"])
def test_async_scheduling_on_by_default_from_v0_14(version):
    from policies.presets import async_scheduling_default
    assert async_scheduling_default(version) is True


def test_async_scheduling_default_rejects_a_bad_version():
    from policies.presets import async_scheduling_default
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        async_scheduling_default("latest")


# scheduler_reserve_full_isl (vllm-project/vllm#37307): not in v0.18.0's vllm/config/scheduler.py,
# `scheduler_reserve_full_isl: bool = True` in v0.19.0's (release sdists on PyPI)
@pytest.mark.parametrize("version, on", [("0.11", False), ("0.15", False), ("0.18.1", False), ("0.19", True),
                                         ("0.19.1", True), ("1.0", True)])
def test_reserve_full_isl_on_by_default_from_v0_19(version, on):
    from policies.presets import reserve_full_isl_default
    assert reserve_full_isl_default(version) is on
    if version in VLLM_VERSIONS:
        assert SchedulerConfig.preset("vllm", version=version).reserve_full_isl is on


# vllm/engine/arg_utils.py (EngineArgs._set_default_args) of the v0.11.0 and v0.19.0 sdists: on a GPU
# of >= 70 GiB that is not an A100, max_num_seqs = 1024 for the API server and the LLM class
@pytest.mark.parametrize("version", ["0.11", "0.19"])
def test_large_gpus_run_1024_sequences_by_default(version):
    for usage in ("api_server", "llm"):
        assert SchedulerConfig.preset("vllm", version=version, usage=usage, large_gpu=True).max_num_seqs == 1024
        assert SchedulerConfig.preset("vllm", version=version, usage=usage).max_num_seqs == 256

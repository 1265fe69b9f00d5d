"""Named engine presets: vLLM v1's default scheduler and cache settings, per version, in one table.

vLLM's scheduler limits depend on how it is started (ENGINE-SEMANTICS.md §1.1,
`EngineArgs.get_batch_defaults`): the API server (`vllm serve`, what `bench serve` measures) and the
offline `LLM` class get different token budgets, and GPUs with >= 70 GiB that are not A100s get
larger ones. `usage="config"` gives the bare `SchedulerConfig` dataclass defaults (2048 tokens,
128 sequences) that vLLM's own unit tests use. Versions of the v0 engine ("0.2"-"0.4",
`VLLM_V0_VERSIONS`) give the `continuous` policy with that era's limits and padded prompt batches.

The numbers per version are a first reading and are meant to be tuned in ONE place, this table
(the fidelity work compares them with real runs). Behaviour common to every v1 version: chunked
prefill, prefix caching on, recompute-only preemption of the newest running request (priority: the
largest (priority, arrival)), no watermark, a full prefix hit recomputes the last token, block 16.
"""
from __future__ import annotations

from dataclasses import fields

from policies.config import CacheConfig, ConfigError, SchedulerConfig

USAGES = ("api_server", "llm", "config")

# version -> usage -> (small GPU, large GPU) values. "large" = >= 70 GiB and not an A100.
VLLM_VERSIONS: dict[str, dict[str, dict[str, tuple[int, int]]]] = {
    "0.11": {
        "max_num_batched_tokens": {"api_server": (2048, 8192), "llm": (8192, 16384), "config": (2048, 2048)},
        "max_num_seqs": {"api_server": (256, 256), "llm": (256, 256), "config": (128, 128)},
    },
    "0.15": {
        "max_num_batched_tokens": {"api_server": (2048, 8192), "llm": (8192, 16384), "config": (2048, 2048)},
        "max_num_seqs": {"api_server": (256, 1024), "llm": (256, 1024), "config": (128, 128)},
    },
    "0.19": {
        "max_num_batched_tokens": {"api_server": (2048, 8192), "llm": (8192, 16384), "config": (2048, 2048)},
        "max_num_seqs": {"api_server": (256, 1024), "llm": (256, 1024), "config": (128, 128)},
    },
}
DEFAULT_VLLM_VERSION = "0.19"

# vLLM v0 without chunked prefill (the `continuous` policy: whole prompts, prefill-only steps), per
# version: 256 sequences; the budget max(max_model_len, 2048) (`scheduler_preset` applies the
# floor); `max_paddings` = 256 in 0.2.2-0.3, whose prefill ran padded rectangular batches (the
# padded size counted against the budget), 0 (unpadded) once prompts were flattened (0.4).
# [INFERENCE: read from vLLM's EngineArgs of those releases from memory, not re-checked here.]
# DistServe's A100 vLLM runs show no padding cap (see fidelity.runs), so they do not use this.
VLLM_V0_VERSIONS: dict[str, dict[str, int]] = {
    "0.2": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_paddings": 256},
    "0.3": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_paddings": 256},
    "0.4": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_paddings": 0},
}

VLLM_CACHE = {"block_size": 16, "watermark": 0.0, "enable_prefix_caching": True}


def _check_overrides(section: str, cls, overrides: dict) -> None:
    names = {f.name for f in fields(cls)}
    for key in overrides:
        if key not in names:
            raise ConfigError(f"{section}.{key}: unknown field; choose one of {', '.join(sorted(names))}")


def scheduler_preset(name: str, version: str | None = None, usage: str = "api_server",
                     large_gpu: bool = False, **overrides) -> SchedulerConfig:
    """`SchedulerConfig` reproducing engine `name`'s defaults (only 'vllm' so far)."""
    if name != "vllm":
        raise ConfigError(f"scheduler.preset: {name!r} is not allowed; choose one of vllm")
    version = DEFAULT_VLLM_VERSION if version is None else str(version)
    if version in VLLM_V0_VERSIONS:
        return _v0_preset(version, overrides)
    if version not in VLLM_VERSIONS:
        allowed = ", ".join([*VLLM_V0_VERSIONS, *VLLM_VERSIONS])
        raise ConfigError(f"scheduler.version: {version!r} is not allowed; choose one of {allowed}")
    if usage not in USAGES:
        raise ConfigError(f"scheduler.usage: {usage!r} is not allowed; choose one of {', '.join(USAGES)}")
    _check_overrides("scheduler", SchedulerConfig, overrides)
    row = VLLM_VERSIONS[version]
    values = {key: row[key][usage][1 if large_gpu else 0] for key in row}
    values.update(policy="vllm", queue="fcfs", preemption="recompute", long_prefill_token_threshold=0)
    values.update(overrides)
    return SchedulerConfig(**values)


def _v0_preset(version: str, overrides: dict) -> SchedulerConfig:
    """vLLM v0 (no chunked prefill) as the `continuous` policy, from `VLLM_V0_VERSIONS`."""
    _check_overrides("scheduler", SchedulerConfig, overrides)
    values = dict(VLLM_V0_VERSIONS[version], policy="continuous", queue="fcfs", preemption="recompute")
    values.update(overrides)
    max_model_len = values.get("max_model_len", SchedulerConfig.max_model_len)
    if "max_num_batched_tokens" not in overrides:  # v0's default: max(max_model_len, 2048)
        values["max_num_batched_tokens"] = max(values["max_num_batched_tokens"], max_model_len)
    return SchedulerConfig(**values)


def cache_preset(name: str, **overrides) -> CacheConfig:
    """`CacheConfig` with engine `name`'s cache defaults; pass `num_gpu_blocks` etc. as overrides."""
    if name != "vllm":
        raise ConfigError(f"cache.preset: {name!r} is not allowed; choose one of vllm")
    _check_overrides("cache", CacheConfig, overrides)
    return CacheConfig(**{**VLLM_CACHE, **overrides})

"""Named engine presets: vLLM v1's default scheduler and cache settings, per version, in one table.

vLLM's scheduler limits depend on how it is started (ENGINE-SEMANTICS.md §1.1,
`EngineArgs.get_batch_defaults`): the API server (`vllm serve`, what `bench serve` measures) and the
offline `LLM` class get different token budgets, and GPUs with >= 70 GiB that are not A100s get
larger ones. `usage="config"` gives the bare `SchedulerConfig` dataclass defaults (2048 tokens,
128 sequences) that vLLM's own unit tests use. Versions of the v0 engine ("0.2"-"0.4",
`VLLM_V0_VERSIONS`) give the `continuous` policy with that era's limits and padded prompt batches.

The numbers per version are a first reading and are meant to be tuned in ONE place, this table
(the fidelity work compares them with real runs); `SchedulerConfig.preset` and `CacheConfig.preset`
turn a row into a config. Behaviour common to every v1 version: chunked
prefill, prefix caching on, recompute-only preemption of the newest running request (priority: the
largest (priority, arrival)), no watermark, a full prefix hit recomputes the last token, block 16.
Behaviour that changed with the release: async scheduling (`async_scheduling_default`) and the
whole-sequence admission check (`reserve_full_isl_default`).
"""
from __future__ import annotations

USAGES = ("api_server", "llm", "config")

# version -> usage -> (small GPU, large GPU) values. "large" = >= 70 GiB and not an A100.
VLLM_VERSIONS: dict[str, dict[str, dict[str, tuple[int, int]]]] = {
    "0.11": {
        "max_num_batched_tokens": {"api_server": (2048, 8192), "llm": (8192, 16384), "config": (2048, 2048)},
        "max_num_seqs": {"api_server": (256, 1024), "llm": (256, 1024), "config": (128, 128)},
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
# version: 256 sequences; the budget max(max_model_len, 2048) (`SchedulerConfig.preset` applies the
# floor); `max_paddings` = 256 in 0.2.2-0.3, whose prefill ran padded rectangular batches (the
# padded size counted against the budget), 0 (unpadded) once prompts were flattened (0.4).
# (Checked against the v0.2.3, v0.3.3 and v0.4.3 sdists: EngineArgs max_num_seqs = 256, max_paddings =
# 256 up to 0.3.3 and gone in 0.4; SchedulerConfig max_num_batched_tokens = max(max_model_len, 2048).)
# Runs of a v0 release that was not recorded need not match these rows (their padding cap, their
# budget): fidelity sets such runs' limits from what the runs themselves show.
VLLM_V0_VERSIONS: dict[str, dict[str, int]] = {
    "0.2": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_paddings": 256},
    "0.3": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_paddings": 256},
    "0.4": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_paddings": 0},
}

VLLM_CACHE = {"block_size": 16, "watermark": 0.0, "enable_prefix_caching": True}

# vLLM's async scheduling (plan step n+1 while step n runs) became the default in v0.14.0
# (vllm-project/vllm#27614): `SchedulerConfig.async_scheduling` is False in the v0.13.0 sdist and
# `Field(default=None)` in v0.14.0, where `VllmConfig.__post_init__` resolves None to True unless
# pipeline_parallel_size > 1, a speculative method other than EAGLE/MTP, disable_padded_drafter_batch,
# or an executor other than mp / uni / external_launcher (e.g. ray) turns it off.
ASYNC_SCHEDULING_DEFAULT_FROM = (0, 14)


# vLLM's `SchedulerConfig.scheduler_reserve_full_isl` (vllm-project/vllm#37307, on by default): a
# waiting request is admitted only if the blocks of its whole known sequence (prompt + tokens already
# generated, less its prefix hits) are free, not just its first chunk's. Absent from the v0.18.0
# sdist's vllm/config/scheduler.py, `scheduler_reserve_full_isl: bool = True` in v0.19.0's.
RESERVE_FULL_ISL_DEFAULT_FROM = (0, 19)


def _major_minor(version: str) -> tuple[int, int]:
    try:
        major, minor = (int(x) for x in str(version).split(".")[:2])
    except ValueError:
        raise ValueError(f"engine version: {version!r} is not MAJOR.MINOR (e.g. '0.13', '0.14.1')") from None
    return major, minor


def async_scheduling_default(version: str) -> bool:
    """vLLM's default --async-scheduling for a release "MAJOR.MINOR[...]" (before the exceptions above)."""
    return _major_minor(version) >= ASYNC_SCHEDULING_DEFAULT_FROM


def reserve_full_isl_default(version: str) -> bool:
    """vLLM's default `scheduler_reserve_full_isl` for a release "MAJOR.MINOR[...]" (v1 engines)."""
    return _major_minor(version) >= RESERVE_FULL_ISL_DEFAULT_FROM

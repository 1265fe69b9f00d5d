"""Frozen configs of the scheduling layer, validated on construction.

Every error names the field and what is allowed, so a CLI can print it as one line. Sweeps use
`dataclasses.replace`. `SchedulerConfig.preset("vllm")` gives vLLM v1's defaults.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, fields, is_dataclass

from policies.presets import (DEFAULT_VLLM_VERSION, USAGES, VLLM_CACHE, VLLM_V0_VERSIONS, VLLM_VERSIONS,
                              reserve_full_isl_default)


class ConfigError(ValueError):
    """A config field holds a value that is not allowed. The message names the field."""

    @classmethod
    def at(cls, field_name: str, msg: str) -> "ConfigError":
        """`field_name: msg`, the one-line form every config error takes."""
        return cls(f"{field_name}: {msg}")


def check_keys(section: str, given: Iterable, allowed: Iterable[str] | type) -> None:
    """Refuse a table key that is not allowed: `section.key: unknown key; allowed keys: a, b, ...`.

    `given` is the table (its keys are checked, in order); `allowed` is a list of names or a
    dataclass, whose init fields are the allowed keys. The first unknown key is named.
    """
    if isinstance(allowed, type) and is_dataclass(allowed):
        allowed = [f.name for f in fields(allowed) if f.init]
    allowed = list(allowed)
    for key in given:
        if key not in allowed:
            raise ConfigError(f"{section}.{key}: unknown key; allowed keys: {', '.join(allowed)}")


def check_choice(field: str, value: object, allowed: tuple, hint: str = "") -> None:
    """One line naming `field`, `value` and the `allowed` ones (then `hint`, in brackets) unless allowed."""
    if value not in allowed:
        raise ConfigError(f"{field}: {value!r} is not allowed; choose one of {', '.join(map(str, allowed))}"
                          + (f" ({hint})" if hint else ""))


def check_int(field: str, value: object, minimum: int | None = None, allow_none: bool = False,
              maximum: int | None = None) -> None:
    """Refuse anything but an integer in [`minimum`, `maximum`] (None: unbounded; `allow_none`: None too).

    `maximum` is for counts that size arrays: a huge one is refused here, naming the field, rather
    than by numpy ("Maximum allowed dimension exceeded") or the allocator.
    """
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{field}: must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{field}: must be <= {maximum:,}, got {value:,}")


def check_number(field: str, value: object, minimum: float | None = None, maximum: float | None = None,
                 strict_min: bool = False, hint: str = "") -> None:
    """Refuse anything but a finite number in the bounds (`strict_min`: > `minimum`, else >=).

    NaN is never a number here: every comparison with it is false, so it would pass the bounds and
    then run as nothing (a NaN rate makes no requests) or fail far away ("cannot convert float NaN
    to integer"). Infinity (TOML's `inf`, or `1e400`, which overflows to it) and an integer too
    large for a float are refused too: every field checked here is a rate, count, duration, size,
    price or fraction, and a setting that may be unbounded says so by being left unset (None).
    `hint` (e.g. "leave it unset for no limit") follows such a refusal.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{field}: expected a number, got {value!r}")
    tail = f" ({hint})" if hint else ""
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"{field}: expected a number, got nan{tail}")
    if isinstance(value, float) and math.isinf(value):
        raise ConfigError(f"{field}: expected a finite number, got {value:g}{tail}")
    if isinstance(value, int) and abs(value) > sys.float_info.max:  # no float holds it: inf in disguise
        raise ConfigError(f"{field}: expected a finite number, got an integer of {len(str(abs(value)))} digits{tail}")
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise ConfigError(f"{field}: must be {'>' if strict_min else '>='} {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{field}: must be <= {maximum}, got {value}")


def _check_overrides(section: str, cls, overrides: dict) -> None:
    names = {f.name for f in fields(cls)}
    for key in overrides:
        if key not in names:
            raise ConfigError(f"{section}.{key}: unknown field; choose one of {', '.join(sorted(names))}")


POLICIES = ("static", "continuous", "chunked", "vllm")
OFFLOAD_BACKENDS = ("native", "lmcache")  # vLLM's kv_offloading_backend
QUEUES = ("fcfs", "priority")
PREEMPTIONS = ("recompute", "swap", "hybrid")
SPEC_METHODS = ("ngram", "draft", "mtp")  # vLLM's speculative_config methods modelled here


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding (vLLM's `speculative_config`); off while `method` is None.

    Each decode proposes up to `num_speculative_tokens` (k) draft tokens; the next step verifies
    them with the target model (1 + k query tokens, all counted against the token budget) and keeps
    the accepted prefix plus one token of its own. `method`: "ngram" (prompt lookup: the tokens
    after the earliest match of the last `prompt_lookup_max`..`prompt_lookup_min` tokens),
    "draft" (a smaller `draft_model`, a catalog name or HF config.json, run k times per step) or
    "mtp" (the target's multi-token-prediction layer, run k times). `acceptance_rate`: what the
    simulator draws acceptances from, per draft position (one number for every position, or a
    list of k numbers; position i counts only if positions before it were accepted); the engine
    measures acceptance instead and needs none.
    """

    method: str | None = None
    num_speculative_tokens: int | None = None
    acceptance_rate: float | tuple[float, ...] | None = None
    draft_model: str | None = None
    prompt_lookup_min: int = 5  # vLLM's defaults when neither is given
    prompt_lookup_max: int = 5

    def __post_init__(self) -> None:
        if self.method is None:
            for name in ("num_speculative_tokens", "acceptance_rate", "draft_model"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"speculative.{name}: set without speculative.method; choose a method: "
                                      f"{', '.join(SPEC_METHODS)}")
            return
        check_choice("speculative.method", self.method, SPEC_METHODS)
        k = self.num_speculative_tokens
        if k is None:
            raise ConfigError(f"speculative.num_speculative_tokens: required with method {self.method!r}; "
                              "give an integer >= 1 (draft tokens per step)")
        check_int("speculative.num_speculative_tokens", k, 1)
        rate = self.acceptance_rate
        if isinstance(rate, list):
            rate = tuple(rate)
            object.__setattr__(self, "acceptance_rate", rate)
        if isinstance(rate, tuple):
            if len(rate) != k:
                raise ConfigError(f"speculative.acceptance_rate: a list of {len(rate)} numbers but "
                                  f"num_speculative_tokens = {k}; give one number, or {k} numbers in [0, 1]")
            for i, a in enumerate(rate):
                check_number(f"speculative.acceptance_rate[{i}]", a, 0.0, 1.0)
        elif rate is not None:
            check_number("speculative.acceptance_rate", rate, 0.0, 1.0)
        if self.method == "draft":
            if not isinstance(self.draft_model, str) or not self.draft_model:
                raise ConfigError("speculative.draft_model: required with method 'draft'; give a catalog model "
                                  "name or a HF config.json path")
        elif self.draft_model is not None:
            raise ConfigError(f"speculative.draft_model: only method 'draft' runs a draft model "
                              f"(method is {self.method!r}); remove it or choose method draft")
        check_int("speculative.prompt_lookup_min", self.prompt_lookup_min, 1)
        check_int("speculative.prompt_lookup_max", self.prompt_lookup_max, 1)
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise ConfigError(f"speculative.prompt_lookup_max: {self.prompt_lookup_max} is below "
                              f"prompt_lookup_min = {self.prompt_lookup_min}; give a value >= it")

    @property
    def enabled(self) -> bool:
        return self.method is not None

    @property
    def k(self) -> int:
        """Draft tokens per step (0 when off)."""
        return self.num_speculative_tokens if self.method is not None else 0

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots a running request reserves past its scheduled tokens: k for "mtp" and "draft",
        whose proposer writes the drafts' KV (vLLM's `Scheduler.num_lookahead_tokens`, set for EAGLE/MTP
        and draft models); 0 for "ngram" (and when off)."""
        return self.k if self.method in ("mtp", "draft") else 0

    def rates(self) -> tuple[float, ...]:
        """The acceptance probability of each of the k draft positions (needs `acceptance_rate`)."""
        rate = self.acceptance_rate
        if rate is None:
            raise ConfigError("speculative.acceptance_rate: the simulator needs it to draw acceptances; give a "
                              f"number in [0, 1] or a list of {self.k} numbers")
        return tuple(float(a) for a in rate) if isinstance(rate, tuple) else (float(rate),) * self.k


def check_cache_knobs(block_size: object, watermark: object, enable_prefix_caching: object) -> None:
    """The knobs `CacheConfig` shares with the `[cache]` section that resolves to it, checked once."""
    check_int("cache.block_size", block_size, 1)
    check_number("cache.watermark", watermark, 0.0, 0.5)
    if enable_prefix_caching is not None and not isinstance(enable_prefix_caching, bool):
        raise ConfigError(f"cache.enable_prefix_caching: expected true or false, got {enable_prefix_caching!r}")


@dataclass(frozen=True)
class CacheConfig:
    """Paged KV cache geometry: how many blocks of how many tokens, on GPU and in CPU swap space.

    `num_offload_blocks` > 0 adds a CPU tier of the prefix cache (`policies.kv_offload.OffloadTier`,
    vLLM's KV offloading): `offload_backend` "native" or "lmcache", `offload_s_per_block` the host
    link's seconds per block (0 for an engine, whose copies are real), `offload_block_bytes` one
    block's bytes over the replica's GPUs (for the records).
    """

    block_size: int = 16
    num_gpu_blocks: int = 4096
    num_cpu_blocks: int = 0
    watermark: float = 0.0  # fraction of GPU blocks kept free when admitting new requests (vLLM v0: 0.01)
    enable_prefix_caching: bool | None = None  # None: the policy's default (on for 'vllm', off otherwise)
    num_offload_blocks: int = 0
    offload_backend: str = "native"
    offload_s_per_block: float = 0.0
    offload_block_bytes: int = 0

    def __post_init__(self) -> None:
        check_cache_knobs(self.block_size, self.watermark, self.enable_prefix_caching)
        check_int("cache.num_gpu_blocks", self.num_gpu_blocks, 1)
        check_int("cache.num_cpu_blocks", self.num_cpu_blocks, 0)
        check_int("cache.num_offload_blocks", self.num_offload_blocks, 0)
        check_choice("cache.offload_backend", self.offload_backend, OFFLOAD_BACKENDS)
        check_number("cache.offload_s_per_block", self.offload_s_per_block, 0.0)
        check_int("cache.offload_block_bytes", self.offload_block_bytes, 0)

    @classmethod
    def preset(cls, name: str, **overrides) -> "CacheConfig":
        """A named engine's cache defaults (`vllm`: block 16, prefix caching on, no watermark);
        pass `num_gpu_blocks` etc. as overrides."""
        if name != "vllm":
            raise ConfigError(f"cache.preset: {name!r} is not allowed; choose one of vllm")
        _check_overrides("cache", cls, overrides)
        return cls(**{**VLLM_CACHE, **overrides})


@dataclass(frozen=True)
class SchedulerConfig:
    """Which policy runs, and its limits (vLLM names)."""

    policy: str = "chunked"
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    max_model_len: int = 4096
    queue: str = "fcfs"
    preemption: str = "recompute"
    hybrid_swap_threshold: int = 64  # hybrid: swap if the request generated >= this many tokens, else recompute
    long_prefill_token_threshold: int = 0  # 0 = off; else clamp one request's prefill chunk to this
    static_max_batch_size: int | None = None  # static: batch size (defaults to max_num_seqs)
    # continuous (vLLM 0.2.2-0.3's padded prompt batches): 0 = off; else a prompt batch is padded to
    # its longest prompt, its padded size counts against the budget and its padding may not exceed this
    max_paddings: int = 0
    # vLLM's --async-scheduling: step n+1 is planned while step n runs, so a request that arrives
    # during step n joins step n+2 (sim.replica.Replica; a step's host work overlaps the previous step's GPU time)
    async_scheduling: bool = False
    # vLLM's scheduler_reserve_full_isl (on by default from 0.19): admit a waiting request only if the
    # blocks of its whole known sequence (prompt + generated tokens, less prefix hits) are free now,
    # not just those of its first chunk; off, a long prompt is admitted on its first chunk, may run
    # the pool dry part-way and be preempted (policies that split prompts only)
    reserve_full_isl: bool = False
    # vLLM's enable_chunked_prefill, for policy 'vllm' (the others are chunked or whole-prompt by
    # name). False: v1's scheduler without chunking (honoured from vLLM 0.11.1; 0.8.0-0.11.0 forced
    # chunking on for generative models): decodes first, then whole prompts in the same step while
    # they fit the budget left; the first that does not waits, and the ones behind it (0.12+: the
    # scheduler stops there; 0.11.1-0.11.2 skipped it and went on, not modelled)
    enable_chunked_prefill: bool = True

    def __post_init__(self) -> None:
        check_choice("scheduler.policy", self.policy, POLICIES)
        for name in ("async_scheduling", "reserve_full_isl", "enable_chunked_prefill"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"scheduler.{name}: expected true or false, got {getattr(self, name)!r}")
        check_int("scheduler.max_num_batched_tokens", self.max_num_batched_tokens, 1)
        check_int("scheduler.max_num_seqs", self.max_num_seqs, 1)
        check_int("scheduler.max_model_len", self.max_model_len, 2)
        check_choice("scheduler.queue", self.queue, QUEUES)
        check_choice("scheduler.preemption", self.preemption, PREEMPTIONS)
        check_int("scheduler.hybrid_swap_threshold", self.hybrid_swap_threshold, 0)
        check_int("scheduler.long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        check_int("scheduler.static_max_batch_size", self.static_max_batch_size, 1, allow_none=True)
        check_int("scheduler.max_paddings", self.max_paddings, 0)
        # a knob only one policy reads is refused under the others, not silently ignored
        if self.static_max_batch_size is not None and self.policy != "static":
            raise ConfigError(f"scheduler.static_max_batch_size: only policy 'static' uses a fixed batch size "
                              f"(policy is {self.policy!r}); remove it, or choose policy static "
                              f"(the others batch up to max_num_seqs)")
        if self.max_paddings and self.policy != "continuous":
            raise ConfigError(f"scheduler.max_paddings: only policy 'continuous' pads prompt batches "
                              f"(policy is {self.policy!r}); set 0 or choose policy continuous")
        if self.reserve_full_isl and self.policy not in ("chunked", "vllm"):
            raise ConfigError(f"scheduler.reserve_full_isl: only policies that split prompts (chunked, vllm) admit "
                              f"on a first chunk (policy is {self.policy!r}, which admits whole prompts); set false")
        # vLLM refuses a budget below its sequence limit in every release (SchedulerConfig._verify_args
        # in the 0.2.0-0.11.0 sdists, verify_max_model_len in 0.19.0); its engine arguments lower an
        # unset max_num_seqs to the budget first (as `preset` does), but a given one is refused
        if self.policy in ("vllm", "continuous") and self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(f"scheduler.max_num_batched_tokens: {self.max_num_batched_tokens} is below "
                              f"max_num_seqs = {self.max_num_seqs}, which vLLM refuses; give "
                              f"max_num_batched_tokens >= max_num_seqs, or lower max_num_seqs")
        if not self.enable_chunked_prefill:
            if self.policy != "vllm":
                raise ConfigError(f"scheduler.enable_chunked_prefill: only policy 'vllm' takes it (policy is "
                                  f"{self.policy!r}: 'chunked' splits prompts, 'continuous' and 'static' never do); "
                                  "remove it, or choose policy vllm")
            # vLLM refuses this at config time in every release that honours the flag (verify_max_model_len)
            if self.max_num_batched_tokens < self.max_model_len:
                raise ConfigError(f"scheduler.max_num_batched_tokens: {self.max_num_batched_tokens} is below "
                                  f"max_model_len = {self.max_model_len} with enable_chunked_prefill false, which "
                                  "vLLM refuses (a whole prompt must fit one step); give max_num_batched_tokens "
                                  ">= max_model_len, or lower max_model_len")
            if self.long_prefill_token_threshold:
                raise ConfigError("scheduler.long_prefill_token_threshold: splits prompts, which "
                                  "enable_chunked_prefill false does not model; set 0")
        if self.policy == "vllm" and self.preemption != "recompute":
            raise ConfigError(f"scheduler.preemption: {self.preemption!r} is not allowed with policy 'vllm' "
                              "(vLLM v1 only recomputes); choose recompute, or policy 'chunked' for swap/hybrid")

    @classmethod
    def preset(cls, name: str, version: str | None = None, usage: str = "api_server", large_gpu: bool = False,
               **overrides) -> "SchedulerConfig":
        """A named engine's scheduler defaults, e.g. `SchedulerConfig.preset("vllm", version="0.11")`
        (only 'vllm' so far; its v0 versions give the `continuous` policy).

        See `policies.presets` for the table of versions and usage contexts.
        """
        if name != "vllm":
            raise ConfigError(f"scheduler.preset: {name!r} is not allowed; choose one of vllm")
        version = DEFAULT_VLLM_VERSION if version is None else str(version)
        if version in VLLM_V0_VERSIONS:
            return cls._v0_preset(version, overrides)
        if version not in VLLM_VERSIONS:
            allowed = ", ".join([*VLLM_V0_VERSIONS, *VLLM_VERSIONS])
            raise ConfigError(f"scheduler.version: {version!r} is not allowed; choose one of {allowed}")
        if usage not in USAGES:
            raise ConfigError(f"scheduler.usage: {usage!r} is not allowed; choose one of {', '.join(USAGES)}")
        _check_overrides("scheduler", cls, overrides)
        row = VLLM_VERSIONS[version]
        values = {key: row[key][usage][1 if large_gpu else 0] for key in row}
        values.update(policy="vllm", queue="fcfs", preemption="recompute", long_prefill_token_threshold=0,
                      reserve_full_isl=reserve_full_isl_default(version))
        values.update(overrides)
        if "max_num_seqs" not in overrides:  # vLLM's EngineArgs: an unset max_num_seqs is at most the budget
            values["max_num_seqs"] = min(values["max_num_seqs"], values["max_num_batched_tokens"])
        return cls(**values)

    @classmethod
    def _v0_preset(cls, version: str, overrides: dict) -> "SchedulerConfig":
        """vLLM v0 (no chunked prefill) as the `continuous` policy, from `VLLM_V0_VERSIONS`."""
        _check_overrides("scheduler", cls, overrides)
        values = dict(VLLM_V0_VERSIONS[version], policy="continuous", queue="fcfs", preemption="recompute")
        values.update(overrides)
        max_model_len = values.get("max_model_len", cls.max_model_len)
        if "max_num_batched_tokens" not in overrides:  # v0's default: max(max_model_len, 2048)
            values["max_num_batched_tokens"] = max(values["max_num_batched_tokens"], max_model_len)
        return cls(**values)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

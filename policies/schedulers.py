"""The scheduling policies by name: `make_scheduler(config, cache)` builds `config.policy`'s scheduler
(`scheduler_class(policy)` is its class).

The factory sits above `policies.scheduler` and its subclasses (each subclass imports the base), so
that the base class never imports its own subclasses.
"""
from __future__ import annotations

from policies.chunked_scheduler import ChunkedScheduler, VllmScheduler
from policies.config import CacheConfig, SchedulerConfig, SpeculativeConfig
from policies.continuous_scheduler import ContinuousScheduler
from policies.scheduler import Scheduler
from policies.static_scheduler import StaticScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {"static": StaticScheduler, "continuous": ContinuousScheduler,
                                          "chunked": ChunkedScheduler, "vllm": VllmScheduler}


def scheduler_class(policy: str) -> type[Scheduler]:
    """The Scheduler subclass of `policy` ('static', 'continuous', 'chunked' or 'vllm')."""
    if policy not in SCHEDULERS:
        raise ValueError(f"scheduler.policy: {policy!r} is not allowed; choose one of {', '.join(SCHEDULERS)}")
    return SCHEDULERS[policy]


def make_scheduler(config: SchedulerConfig, cache: CacheConfig, speculative: SpeculativeConfig | None = None
                   ) -> Scheduler:
    """The scheduler for `config.policy` ('static', 'continuous', 'chunked' or 'vllm'), with
    speculative decoding when `speculative` is enabled (chunked and vllm only)."""
    cls = scheduler_class(config.policy)
    if speculative is not None and speculative.enabled:
        return cls(config, cache, speculative)
    return cls(config, cache)

"""Engine-agnostic scheduling: requests, the paged KV block manager, batch plans and policies.

Standard library only: the same objects drive the SimPy simulator (`sim`) and the torch engine
(`gpu_backend`).
"""
from policies.batch_plan import BatchPlan, ScheduledSeq, StepResult
from policies.config import CacheConfig, ConfigError, SchedulerConfig, SpeculativeConfig
from policies.request import FinishReason, IllegalTransition, Request, RequestState
from policies.block_manager import BlockManager
from policies.scheduler import Scheduler
from policies.schedulers import make_scheduler

__all__ = [
    "BatchPlan", "ScheduledSeq", "StepResult", "CacheConfig", "ConfigError", "SchedulerConfig",
    "SpeculativeConfig", "FinishReason", "IllegalTransition", "Request", "RequestState", "BlockManager", "Scheduler",
    "make_scheduler",
]

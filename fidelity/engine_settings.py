"""Every engine setting a run records, either modelled or listed as not modelled: never silently dropped.

`settings_table(run)` has one row per setting the run's files record (`RealRun.recorded_args`:
exp-config.yaml, LLMServingSim's meta.json engine kwargs, what vllm.log reports) and per server
argument its loader inferred (`RealRun.inferred_args`): `setting`, `value`, `status` (`modelled`,
`not modelled`, `no effect`, `inferred`, `assumed`: not recorded, the value simulated), `note`
(where servesim uses it, or why not), and per argument the benchmark client records (`client_rows`:
inference-perf's `api` section, guidellm's report `args`). A setting servesim does not know is listed
as not modelled, by name. `simulate --from-run` prints the not-modelled ones as
notes and writes `settings.csv`; `reproduce` writes every run's rows to `settings.csv`, names the
not-modelled ones per run in `report.csv` (`not_modelled`) and in report.md.
"""
from __future__ import annotations

from dataclasses import fields

from fidelity.runs import (DEFAULT_GPU, RealRun, async_scheduling, engine_version, kv_offloading_backend,
                           recorded_bool, v0_engine)
from policies import ConfigError

MODELLED = "modelled"
NOT_MODELLED = "not modelled"
NO_EFFECT = "no effect"  # listed, with the reason it cannot change a text model's timing
INFERRED = "inferred"
ASSUMED = "assumed"  # not recorded: the value servesim simulates with (the engine's default or the loader's)

# ServerArgs field -> the names a run may record it under
ALIASES = {
    "tensor_parallel_size": ("tensor_parallel_size", "tensor_parallelism", "tp"),
    "data_parallel_size": ("data_parallel_size", "dp"), "engine_version": ("engine_version", "vllm_version"),
    "num_gpu_blocks": ("num_gpu_blocks", "num_kv_tokens"), "gpu": ("gpu", "hardware", "device_name"),
    "kv_cache_dtype": ("kv_cache_dtype", "cache_dtype"),
}

# vLLM argument (as the runs spell it) -> where servesim uses it
USED: dict[str, str] = {
    "model": "model.name: layer shapes from the model catalog or the model's config.json",
    "tensor_parallelism": "hardware.tp", "tensor_parallel_size": "hardware.tp", "tp": "hardware.tp",
    "data_parallel_size": "that many engines, requests dealt round-robin", "dp": "that many engines",
    "enable_expert_parallel": "experts sharded over the data-parallel ranks (MoE all-to-all)",
    "max_model_len": "scheduler.max_model_len: longer requests are rejected",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens: the token budget of a step",
    "max_num_seqs": "scheduler.max_num_seqs",
    "enable_chunked_prefill": "scheduler.policy: vllm (off from vLLM 0.11.1: its enable_chunked_prefill = false; "
                              "0.8-0.11.0 chunk anyway) or continuous (whole prompts, v0)",
    "enable_prefix_caching": "cache.enable_prefix_caching: hashed full blocks, LRU eviction",
    "block_size": "cache.block_size",
    "num_gpu_blocks": "hardware.num_gpu_blocks: the engine's own KV capacity",
    "num_kv_tokens": "hardware.num_gpu_blocks = tokens / block_size (the engine's own KV capacity)",
    "gpu_memory_utilization": "hardware.gpu_memory_utilization: the KV pool vLLM's profiling rule leaves",
    "kv_cache_dtype": "model.kv_cache_dtype: fp8 halves the KV bytes per token, and aiconfigurator's attention "
                      "is read over an fp8 cache; auto = the model dtype",
    "kv_offloading_size": "cache.offload_size_gb: a CPU tier of the prefix cache (policies.kv_offload)",
    "kv_offloading_backend": "cache.offload_backend",
    "scheduler_reserve_full_isl": "scheduler.reserve_full_isl: a waiting request is admitted only while its whole "
                                  "prompt's blocks are free (on by default from vLLM 0.19)",
    "max_paddings": "scheduler.max_paddings: a padded prompt batch stops admitting past this padding (v0.2.2-0.3)",
    "vllm_version": "the vllm preset's version (its default limits)",
    "engine_version": "the vllm preset's version (its default limits)",
    "gpu": "hardware.gpu", "hardware": "hardware.gpu",
    "engine_use_ray": "the v0 engine as a Ray actor: a remote step() a step returning every scheduled request's "
                      "prompt and output (--fit source: counted per unit, fidelity.ray_serving_path; fitted "
                      "modes: within the fitted host terms)",
    "worker_use_ray": "the v0 worker as a Ray actor: a remote execute_model a step carrying every scheduled "
                      "request's token ids (--fit source: counted per unit, fidelity.ray_serving_path; fitted "
                      "modes: within the fitted host terms)",
    "entrypoint": "vllm.entrypoints.api_server streams each request's prompt + text as JSON every step "
                  "(with engine_use_ray, fidelity.ray_serving_path); the API front end's terms otherwise",
}
# known vLLM arguments servesim does not model, and why (the simulation runs as if at the default)
UNUSED: dict[str, str] = {
    "async_scheduling": "a vLLM v0 engine (no chunked prefill) has no async scheduling: simulated without it",
    "enforce_eager": "eager launches vs CUDA graphs: the GPU data's own launch mode applies",
    "cpu_offload_gb": "weights offloaded to CPU memory are not modelled",
    "quantization": "weight quantization is not modelled: weights at the model dtype",
    "speculative_config": "speculative decoding is not modelled here",
    "num_scheduler_steps": "multi-step scheduling (v0) is not modelled",
    "enable_lora": "LoRA adapters are not modelled",
    "pipeline_parallel_size": "pipeline parallelism is not modelled by --from-run",
    "max_num_partial_prefills": "concurrent partial prefills limit: not modelled",
    "long_prefill_token_threshold": "long-prefill threshold: not modelled",
    "scheduling_policy": "queue order: fcfs assumed",
}
# settings that cannot change a text model's timing (listed, with why)
NO_TIMING: dict[str, str] = {
    "swap_space": "the CPU swap pool: vLLM preempts a single-sequence request by recompute (v0 swaps only groups "
                  "of several sequences, beam search or n > 1; v1 never swaps), as simulated, so it stays unused",
    "disable_log_stats": "logging only",
    "seed": "the sampling seed (the lengths come from the run)",
    "app": "the campaign's label of the run, not an engine setting",
    "runner_type": "generate: a text-generation engine, as simulated",
    "is_multimodal_model": "a text model", "encoder_cache_size": "multimodal encoders only",
    "max_num_encoder_input_tokens": "multimodal encoders only", "disable_chunked_mm_input": "multimodal only",
    "is_attention_free": "an attention model", "sliding_window": "none: full attention",
    "kv_cache_memory_bytes": "unset: the pool follows gpu_memory_utilization",
    "num_gpu_blocks_override": "unset: the engine's own count applies", "num_cpu_blocks": "unset",
    "user_specified_block_size": "the block size itself is modelled",
    "prefix_caching_hash_algo": "the hash function, not what is cached",
    "calculate_kv_scales": "fp8 scale calibration, once at start",
    "kv_cache_dtype_skip_layers": "none skipped", "cpu_kvcache_space_bytes": "CPU backends only",
    "kv_sharing_fast_prefill": "cross-layer KV sharing models only",
    "scheduler_cls": "unset: vLLM's own scheduler, as simulated",
    "disable_hybrid_kv_cache_manager": "one KV cache group for a plain attention model",
    "max_long_partial_prefills": "with max_num_partial_prefills 1: no effect",
    "max_num_scheduled_tokens": "unset: max_num_batched_tokens applies",
}
NO_TIMING_PREFIXES = ("mamba_",)  # state-space layers only
MORE_USED = {
    "policy": "fcfs: the queue order simulated", "scheduling_policy": "fcfs: the queue order simulated",
    "stream_interval": "1: every token streamed as it is made", "cache_dtype": USED["kv_cache_dtype"],
    "max_num_partial_prefills": "1: one partial prefill at a time, as simulated",
    "long_prefill_token_threshold": "0: no long-prefill cap, as simulated",
}
def _off(value) -> bool:
    """A recorded flag that is off: false, 0, a string spelling false ("false", "no", "0": `recorded_bool`;
    bool("false") is True), or empty."""
    try:
        return not recorded_bool("flag", value)
    except ConfigError:
        return not value


# settings whose modelled meaning depends on the value: (test, note when it fails)
VALUE_LIMITS = {
    "dtype": (lambda v: str(v).lower() in ("auto", "bfloat16", "bf16", "float16", "fp16", "half"),
              "weights of 2 bytes are assumed; other dtypes are not modelled"),
    "kv_cache_dtype": (lambda v: v is None or str(v).lower() == "auto" or str(v).lower().startswith("fp8"),
                       "only auto and fp8 KV caches are modelled"),
    "async_scheduling": (_off, ""),
    "scheduler_reserve_full_isl": (lambda v: not _off(v), "off: admission on a first chunk's blocks is not modelled "
                                   "for a vLLM 0.19+ run (the release's default, on, is simulated)"),
    "enforce_eager": (_off, ""),
    "pipeline_parallel_size": (lambda v: v in (None, 1), ""),
    "cpu_offload_gb": (lambda v: not v, ""),
    "policy": (lambda v: str(v).lower() == "fcfs", "only fcfs is modelled for a run"),
    "scheduling_policy": (lambda v: str(v).lower() == "fcfs", "only fcfs is modelled for a run"),
    "stream_interval": (lambda v: v in (None, 1), "streaming every n-th token is not modelled"),
    "cache_dtype": (lambda v: v is None or str(v).lower() == "auto" or str(v).lower().startswith("fp8"),
                    "only auto and fp8 KV caches are modelled"),
    "max_num_partial_prefills": (lambda v: v in (None, 1), "concurrent partial prefills are not modelled"),
    "long_prefill_token_threshold": (lambda v: not v, "a long-prefill cap is not modelled"),
    "num_scheduler_steps": (lambda v: v in (None, 1), ""),
    "enable_lora": (_off, ""),
    "quantization": (lambda v: v in (None, "none"), ""),
    "speculative_config": (lambda v: not v, ""),
}
VALUE_NOTES = {"dtype": "weights and activations of 2 bytes (bf16/fp16)"}


# unrecorded settings whose absence still sets what is simulated: (value shown, note)
ASSUMED_DEFAULTS = {
    "engine_version": lambda run: (engine_version(run.server), "the vllm preset of that version (its default "
                                   "limits, v1 chunked prefill) is simulated"),
    "gpu_memory_utilization": lambda run: (0.9, "vLLM's default; the KV pool its profiling rule leaves"),
    "kv_cache_dtype": lambda run: ("auto", "the model dtype"),
    "kv_offloading_size": lambda run: ("off", "no CPU tier of the prefix cache"),
    "async_scheduling": lambda run: (async_scheduling(run.server), "the engine release's default (vLLM >= 0.14: on, "
                                     "vllm-project/vllm#27614; before: off); v0 engines: off"),
}


ASYNC_MODELLED = ("scheduler.async_scheduling: step n+1 planned while step n runs, so an arrival during step n "
                  "joins step n+2, and a step's host terms run beside the previous step's GPU time (a step takes "
                  "max(GPU, host), the first after an idle wait GPU + host)")


V0_RELEASE_NOTE = ("a vLLM v0 engine (scheduler.policy continuous); the release picks its KV profiling rule "
                   "(hardware.memory_profiling: v0-peak up to 0.2.4, else v0), max_paddings' default and, before "
                   "0.2.6, an eager engine without CUDA graphs where the GPU data is aiconfigurator's kernels "
                   "(GPU model aiconfigurator-eager, fidelity.eager_host)")


OFFLOAD_WITHOUT_BACKEND = ("off: before vLLM 0.14 the size alone enabled no offloading (--kv-offloading-backend "
                           "defaulted to None and had to be set); no CPU tier simulated")


def classify(name: str, value) -> tuple[str, str]:
    """(status, note) of one recorded setting."""
    if name in VALUE_LIMITS:
        ok, why = VALUE_LIMITS[name]
        if not ok(value):
            return NOT_MODELLED, UNUSED.get(name) or why
        note = USED.get(name) or MORE_USED.get(name) or VALUE_NOTES.get(name)
        return MODELLED, note or f"at its default ({value!r}): what the simulation assumes"
    if name in USED:
        return MODELLED, USED[name]
    if name in UNUSED:
        return NOT_MODELLED, UNUSED[name]
    if name in NO_TIMING or name.startswith(NO_TIMING_PREFIXES):
        return NO_EFFECT, NO_TIMING.get(name, "state-space layers only")
    return NOT_MODELLED, "servesim does not know this setting"


def settings_table(run: RealRun) -> list[dict]:
    """One row per recorded or inferred setting of `run` (see the module doc)."""
    rows = []
    for name, (value, where) in sorted(run.recorded_args.items()):
        status, note = (NOT_MODELLED, run.unmodelled_args[name]) if name in run.unmodelled_args else \
            classify(name, value)
        if name == "async_scheduling" and not _off(value) and async_scheduling(run.server):  # passed on, or the release default
            status, note = MODELLED, ASYNC_MODELLED
        if name == "kv_offloading_size" and not _off(value) and kv_offloading_backend(run.server) is None:
            status, note = NO_EFFECT, OFFLOAD_WITHOUT_BACKEND
        if name in ALIASES["engine_version"] and v0_engine(run.server):
            note = V0_RELEASE_NOTE
        rows.append({"run": run.name, "setting": name, "value": value, "status": status, "note": note,
                     "recorded_in": where})
    for name, (default, why) in sorted(run.inferred_args.items()):
        rows.append({"run": run.name, "setting": name, "value": getattr(run.server, name, None), "status": INFERRED,
                     "note": f"not recorded: {why}; --fit source uses the engine default {default!r}",
                     "recorded_in": ""})
    for f in fields(run.server):  # what the simulation assumes where the run records nothing
        names = ALIASES.get(f.name, (f.name,))
        value = getattr(run.server, f.name)
        if f.name == "gpu" and value is None and not any(n in run.recorded_args for n in names):
            rows.append({"run": run.name, "setting": "gpu", "value": DEFAULT_GPU, "status": ASSUMED,
                         "note": "not recorded: servesim's default GPU (--set hardware.gpu=NAME)", "recorded_in": ""})
            continue
        if f.name in ASSUMED_DEFAULTS and value is None and not any(n in run.recorded_args for n in names):
            shown, note = ASSUMED_DEFAULTS[f.name](run)
            rows.append({"run": run.name, "setting": f.name, "value": shown, "status": ASSUMED,
                         "note": "not recorded: " + note, "recorded_in": ""})
            continue
        if value is None or f.name in run.inferred_args or any(n in run.recorded_args for n in names):
            continue
        rows.append({"run": run.name, "setting": f.name, "value": value, "status": ASSUMED,
                     "note": "not recorded: " + (USED.get(f.name) or "as simulated"), "recorded_in": ""})
    return rows + client_rows(run)


# the client's request settings (inference-perf's `api` section): the simulation's requests are
# streamed completions, each token handed to the client as the step that made it ends
CLIENT_API = {
    "type": ("completion", "a chat request's template tokens are not in the generated prompts"),
    "streaming": (True, "unstreamed, the client's TTFT is the whole response's; the simulated one is the "
                        "first streamed token's"),
}


_LOAD = "the load: its sends replayed where the run measured them, else regenerated as guidellm drives them " \
        "(fidelity.sources.guidellm)"
_TEXT = lambda v: v in (None, "text_completions")  # noqa: E731
_WARM = "warm-up and cool-down requests are sent but not reported: not replayed"
# guidellm's recorded arguments (its report's, by 0.4-0.7's names and 0.2-0.3's): (test, status and note
# when it passes, note when it fails: not modelled)
GUIDELLM_ARGS = {
    **{name: (lambda v: True, MODELLED, _LOAD, "") for name in (
        "profile", "rate", "max_requests", "max_number", "random_seed", "data", "rampup", "strategy",
        "strategy_index")},
    **{name: (lambda v: True, NO_EFFECT, why, "") for name, why in {
        "target": "the server's address", "model": "the served model (the server's arguments name it)",
        "processor": "the tokenizer the client counts with", "processor_args": "the client's tokenizer",
        "data_args": "how the data is loaded", "data_samples": "how the data is loaded",
        "data_column_mapper": "how the data is loaded", "data_collator": "how the data is loaded",
        "data_sampler": "the order of synthetic rows drawn alike", "data_num_workers": "the client's data loaders",
        "dataloader_kwargs": "the client's data loaders", "outputs": "the report's files",
        "output_dir": "the report's files", "output_path": "the report's files",
        "sample_requests": "how many requests the report keeps (a sample: its load regenerated, said in the notes)",
        "prefer_response_metrics": "token counts from the server's usage rather than the client's tokenizer",
    }.items()},
    **{name: (_TEXT, MODELLED, "text completions: the generated prompts are what the server tokenizes",
              CLIENT_API["type"][1]) for name in ("data_request_formatter", "request_type")},  # the formatter, by either name
    "backend": (lambda v: v in (None, "openai_http"), NO_EFFECT, "HTTP requests to the OpenAI-compatible server",
                "another backend than openai_http"),
    "backend_kwargs": (_off, NO_EFFECT, "unset", "extra backend arguments are not read"),
    "backend.timeout": (lambda v: v is None, NO_EFFECT, "unset",
                        "httpx's timeout on each read (the connection, every streamed chunk): a request that waits "
                        "longer for its first or next chunk fails in the client; no guidellm timeout is simulated "
                        "(fidelity.client_timeout)"),
    **{name: (_off, NO_EFFECT, "unset", _WARM) for name in (
        "warmup", "cooldown", "warmup_number", "warmup_duration", "cooldown_number", "cooldown_duration")},
    **{name: (_off, NO_EFFECT, "unset: a benchmark ends at its request count",
              "a benchmark's time limit is not regenerated (a replay sends what was sent)")
       for name in ("max_seconds", "max_duration")},
    **{name: (_off, NO_EFFECT, "unset", "a benchmark stopped on errors or over-saturation is not modelled")
       for name in ("max_errors", "max_error_rate", "max_global_error_rate", "over_saturation")},
}


def guidellm_row(run: RealRun, name: str, value, where: str) -> dict:
    """The row of one recorded guidellm argument (`GUIDELLM_ARGS`; one it does not list: not modelled)."""
    ok, status, note, why = GUIDELLM_ARGS.get(name, (lambda v: False, "", "", "servesim does not know this "
                                                    "guidellm argument"))
    if not ok(value):
        status, note = NOT_MODELLED, why
    return {"run": run.name, "setting": f"guidellm.{name}", "value": value, "status": status, "note": note,
            "recorded_in": where}


def client_rows(run: RealRun) -> list[dict]:
    """Rows for the client's recorded request settings (inference-perf's `CLIENT_API`, guidellm's
    `GUIDELLM_ARGS`): modelled where they are what the simulation sends, else not modelled, with why."""
    rows = [guidellm_row(run, name, value, where) for name, (value, where) in sorted(run.client_args.items())]
    api = (run.profile or {}).get("api")
    if not isinstance(api, dict):
        return rows
    where = run.profile_file.name if run.profile_file is not None else "the client's profile"
    for key, (simulated, why) in CLIENT_API.items():
        if api.get(key) is None:
            continue
        value = api[key]
        same = (recorded_bool(f"api.{key}", value) == simulated) if isinstance(simulated, bool) else value == simulated
        rows.append({"run": run.name, "setting": f"api.{key}", "value": value,
                     "status": MODELLED if same else NOT_MODELLED,
                     "note": "the simulated requests are streamed completions" if same else why, "recorded_in": where})
    return rows


def not_modelled(run: RealRun) -> list[str]:
    """`name=value` of each recorded setting servesim does not model."""
    return [f"{r['setting']}={r['value']}" for r in settings_table(run) if r["status"] == NOT_MODELLED]

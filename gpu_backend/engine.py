"""`Engine`: the one loop in wall-clock time, with the same `Scheduler` the simulator uses.

    plan = scheduler.schedule(now)            # policies
    result = runner.execute(plan)             # real forward pass; duration measured
    finished = scheduler.update(plan, result, now + duration)

Its public API (stable; `gpu_backend.serve` builds on it) is listed on `Engine`: a thread-safe
ingress (`add_request`, `abort`) that reaches the scheduler only at step boundaries, per-token
callbacks on the engine thread, a background loop (`start` / `stop`) or steps on the caller's
thread (`step`, `run_workload`), and `result()`: the `requests` and `steps` tables and summary
in the simulator's format (`records.results`, `records.metrics`), with measured times. A server
calls `stream_records()` first, so that finished requests and steps leave memory
(`records.stream`), and writes the same tables with `write_records(dir)`.
"""
from __future__ import annotations

import heapq
import logging
import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from gpu_backend.attention import select_backend
from gpu_backend.clock import CLOCKS, make_clock
from gpu_backend.heap import pin_heap
from gpu_backend.kv_cache import KVCache
from gpu_backend.model import LlamaModel, build_model
from gpu_backend.model_config import ModelConfig
from gpu_backend.model_runner import ModelRunner
from gpu_backend.sampling_params import GREEDY, request_seed
from policies import (BatchPlan, CacheConfig, ConfigError, FinishReason, Request, ScheduledSeq, SchedulerConfig,
                      SpeculativeConfig)
from policies.config import check_choice, check_int
from policies.schedulers import make_scheduler
from policies.speculative import NgramProposer
from records.metrics import summarize
from records.results import (Recorder, end_unfinished, pooled_itls, record_step, requests_table, steps_table,
                             write_results)
from records.spool_folder import SpoolFolder
from records.stream import StreamingRecorder

STUCK = "the scheduler could not place it and nothing else was left to run"  # the simulator's words too
DTYPES = {"auto": None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# stream_records: finished requests, and steps, held until this many are written out together. Far
# fewer than records.stream's batch-run sizes: a batch is written on the engine thread, between two
# steps, and these take about 3 ms each on the tiny CPU model's server (8,192 steps took 35-85 ms:
# a stall every minute or so that every running request's next token would have waited for); a
# long request's token times are kilobytes, too
STREAM_REQUEST_BATCH = 256
STREAM_STEP_BATCH = 1024


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs when there is no `sim` Config: model, scheduler, cache, runtime.

    `weights` is a safetensors file or folder (None = random weights from `weights_seed`, fixed so
    that the model does not change with the workload); `seed` drives sampling and the synthetic
    prompt ids of count-only workloads; `dtype` "auto" is float32 on CPU and bfloat16 on CUDA.
    `speculative`: n-gram speculative decoding (method "ngram" only: no draft weights), verified
    greedily, for greedy requests (a sampled request gets no drafts).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    weights: str | None = None
    dtype: str = "auto"
    attention_backend: str = "auto"
    seed: int = 0
    weights_seed: int = 0
    slo: object | None = None  # a records.metrics.SLOConfig for goodput, if any
    max_time_s: float | None = None  # run_workload: abort what is still live after this long
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    # the engine's clock (`gpu_backend.clock`): "uncontended" leaves out the time the engine's thread
    # waited for a core on a shared CPU (validate's replays); "wall" for everything that serves
    clock: str = "wall"

    def __post_init__(self) -> None:
        check_choice("engine.dtype", self.dtype, tuple(DTYPES))
        check_choice("engine.clock", self.clock, CLOCKS)
        if self.speculative.enabled and self.speculative.method != "ngram":
            raise ConfigError(f"speculative.method: the engine proposes by n-gram lookup only (no draft or MTP "
                              f"weights), got {self.speculative.method!r}; choose ngram")
        check_int("engine.seed", self.seed, 0)
        check_int("engine.weights_seed", self.weights_seed, 0)
        if self.scheduler.max_model_len > self.model.max_position_embeddings:
            raise ConfigError(f"scheduler.max_model_len: {self.scheduler.max_model_len} exceeds the model's "
                              f"max_position_embeddings={self.model.max_position_embeddings}")


def check_device(device: str | torch.device) -> torch.device:
    """`device` as a torch device, refused in one line where this torch cannot run on it (a CUDA
    device asked of a CPU-only torch): before anything is built there, so no assertion deep in torch."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):  # torch's own words list a dozen backends this engine never runs on
        raise ConfigError(f"--device: {device!r} is not a device; choose one of cpu, cuda") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device: {device.type} is not a device the engine runs on; choose one of cpu, cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device: cuda was asked for but torch sees no CUDA device; choose one of cpu")
    return device


def resolve_dtype(name: str, device: str | torch.device) -> torch.dtype:
    dtype = DTYPES[name]
    if dtype is None:
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return dtype


def build_engine_model(config: EngineConfig, device: str | torch.device = "cpu") -> LlamaModel:
    """The model an engine of `config` runs: its weights (or seeded random ones) in its dtype on `device`."""
    return build_model(config.model, device, resolve_dtype(config.dtype, device), config.weights, config.weights_seed)


@dataclass(frozen=True)
class RequestOutput:
    """What `on_output` receives: new tokens of one request, and whether (and why) it ended."""

    req_id: int | str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    time: float


@dataclass
class EngineResult:
    """The engine's run, in the simulator's format: `requests`, `steps`, `summary` (+ raw requests)."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    config_toml: str | None = None
    raw_requests: list[Request] = field(default_factory=list, repr=False)

    def save(self, out_dir: str | Path, plot: bool = True) -> Path:
        """Write summary.json, requests.csv, steps.csv (+ config.toml, timeline.png) like `simulate`."""
        return write_results(out_dir, self.requests, self.steps, self.summary, self.config_toml, plot=plot)


class Engine:
    """The real engine: one scheduler, one model runner, the one loop in wall-clock time.

    Public API (stable; `gpu_backend.serve` builds on it):

    - `Engine(config, device="cpu", model=None)`: `config` is an `EngineConfig` (a servesim TOML config
      becomes one in `calibrate.engine_config`); `model` replaces the built model (tests share weights).
    - `engine.now()`: seconds on the engine clock (give new requests `arrival_time=engine.now()`).
    - `engine.add_request(request, on_output=None)`: thread-safe. The request goes to an ingress list
      under a short lock and reaches the scheduler at the next step boundary (the lock is never held
      across a step). `request.prompt_token_ids` must be token ids of this model's vocabulary;
      `request.sampling` a `SamplingParams` (None = greedy).
    - `on_output(RequestOutput(req_id, new_token_ids, finished, finish_reason, time))` is called **on
      the engine thread**, once per new token and once when the request ends (finished=True; aborted
      and rejected requests get exactly one such call with no tokens). Keep it short (hand off to a
      queue / `loop.call_soon_threadsafe`).
    - `engine.abort(req_id)`: thread-safe cancellation; the request's blocks are freed at the next step
      boundary and it ends FINISHED / aborted.
    - `engine.reject_reason(request)`: thread-safe; why the scheduler would reject the request on
      arrival (it can never fit), or None: a front end answers such a request at once.
    - `engine.start()` / `engine.stop()`: run the loop on a background thread (for a server). If a step
      raises there, `engine.error` holds the exception and every live request ends aborted (callbacks
      get their final output), so no client waits forever; a request added after that ends aborted at
      once, its final output given on the caller's thread.
    - `engine.step() -> bool`: one iteration on the caller's thread (False when there was nothing to run).
    - `engine.run_workload(workload, progress=True) -> EngineResult`: real-time replay of a `sim`
      workload on the caller's thread: requests are admitted at their arrival times (at the first step
      boundary after; one the scheduler could never serve is rejected at its arrival, as a front end
      refuses it), closed-loop follow-ups come from `workload.on_finish`.
    - `engine.stats()`: running / waiting / swapped counts, KV usage, preemptions, steps (for /metrics).
    - `engine.result()`: the `requests` and `steps` tables and the summary, exactly as the simulator's
      (`records.results`, `records.metrics`), with measured times; `EngineResult.save(out_dir)`. Safe from any
      thread while the engine runs: it reads between steps.
    - `engine.stream_records(spool_parent=None)`: before the first request, for an engine that runs
      until stopped (a server): from then on finished requests and steps leave memory in batches,
      written to a working folder (in `spool_parent`, else the system's temporary folder; those of
      processes killed before they removed theirs are swept first, `records.spool_folder`), so memory
      holds what is live, not what has finished (`records.stream`); `result()` is then refused.
      `engine.close_records()` removes that folder (after the last `write_records`, the engine stopped).
    - `engine.write_records(out_dir, plot=True) -> Path`: summary.json, requests.csv, steps.csv (+
      config.toml, Parquet, timeline.png) of everything so far, requests still live as unfinished
      rows: `result().save(out_dir)`, or the streamed records' copy (the same columns and values;
      rows in the order requests ended). Safe from any thread while the engine runs.
    """

    def __init__(self, config, device: str | torch.device = "cpu", model: LlamaModel | None = None) -> None:
        if not isinstance(config, EngineConfig):
            raise ConfigError(f"engine config: expected an EngineConfig, got {type(config).__name__}; build one "
                              "from a servesim config with calibrate.engine_config.engine_config_from_sim")
        self.config_toml = None  # the servesim config's TOML, saved beside the results when set
        self.config = config
        self.device = check_device(device)
        if self.device.type == "cpu":
            pin_heap()  # steady step times, as the calibration measured them (gpu_backend.heap)
        if model is None:
            model = build_engine_model(config, self.device)
        self.model = model.to(self.device)
        self.model_config = model.config
        dtype = next(model.parameters()).dtype
        self.kv_cache = KVCache(self.model_config, config.cache.num_gpu_blocks, config.cache.block_size,
                                config.cache.num_cpu_blocks, dtype, self.device, config.cache.num_offload_blocks)
        self.backend = select_backend(self.device, config.attention_backend)
        # read on the thread that builds the engine: an "uncontended" clock is that thread's (start() refuses it)
        self.clock = make_clock(config.clock)
        self.runner = ModelRunner(self.model, self.kv_cache, self.backend, config.seed, clock=self.clock)
        self.scheduler = make_scheduler(config.scheduler, config.cache, config.speculative)
        spec = config.speculative
        if spec.enabled:  # real drafts: prompt lookup over each greedy request's tokens
            ngram = NgramProposer(spec.k, spec.prompt_lookup_min, spec.prompt_lookup_max)
            self.scheduler.proposer = lambda req: ngram(req) if (req.sampling or GREEDY).is_greedy else ()
        self.recorder = Recorder()
        self._spool: SpoolFolder | None = None  # stream_records' working folder
        self.on_finish: list[Callable[[Request, float], None]] = []  # hooks run on the engine thread
        self.step_hooks: list[Callable] = []  # called with (plan, result) after each step (tests, tracing)
        self.last_step = None  # the `StepRecord` of the latest step, for hooks

        self._lock = threading.Lock()
        # held while a step (or an abort of everything) changes requests and records, so that
        # result() from another thread (the server's /admin/dump) reads a consistent snapshot
        self._state_lock = threading.RLock()
        self._ingress: list[tuple[Request, Callable | None]] = []
        self._aborts: list[int | str] = []
        self._wakeup = threading.Event()
        self._callbacks: dict[int | str, Callable] = {}
        self._live: dict[int | str, Request] = {}  # admitted and not yet finished
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.error: Exception | None = None  # set when the background loop died on an exception
        self._t0 = self.clock()
        self.num_steps = 0
        self.num_preemptions = 0
        self.schedule_time_s = 0.0  # host time in scheduler.schedule + update, summed

    # --- ingress (any thread) ----------------------------------------------------------------------
    def now(self) -> float:
        return self.clock() - self._t0

    def add_request(self, request: Request, on_output: Callable[[RequestOutput], None] | None = None) -> None:
        """Queue `request` for the next step boundary (thread-safe); see the class docstring."""
        ids = request.prompt_token_ids
        if ids is None:
            raise ValueError(f"request {request.req_id}: prompt_token_ids is None; the engine needs token ids")
        vocab = self.model_config.vocab_size
        if len(ids) and (min(ids) < 0 or max(ids) >= vocab):
            raise ValueError(f"request {request.req_id}: prompt_token_ids must lie in [0, {vocab}) (the model's vocab)")
        if request.sampling is None:
            request.sampling = GREEDY
        with self._lock:  # the error handler drains the ingress under this lock: nothing slips past it
            error = self.error
            if error is None:
                # a second live request of one id would take over the first's stream, and the
                # scheduler refuses it at the next step, on the loop (which then dies): refused here
                if request.req_id in self._live or any(r.req_id == request.req_id for r, _ in self._ingress):
                    raise ValueError(f"request {request.req_id!r}: a request of this id is still live; "
                                     "give each live request its own req_id")
                self._ingress.append((request, on_output))
        if error is not None:  # the loop is dead: end it now rather than leave its client waiting
            now = self.now()
            request.finish(FinishReason.ABORTED, now, f"engine error: {error!r}")
            with self._state_lock:
                self.recorder.add_request(request, "0")
                self._record_end(request, now)
            if on_output is not None:
                on_output(RequestOutput(request.req_id, [], True, request.finish_reason.value, now))
            return
        self._wakeup.set()

    def abort(self, req_id: int | str) -> None:
        """Cancel a request (thread-safe): its blocks are freed at the next step boundary."""
        with self._lock:
            self._aborts.append(req_id)
        self._wakeup.set()

    def reject_reason(self, request: Request) -> str | None:
        """Why the scheduler would reject `request` on arrival (it can never be served here), or None.

        Thread-safe: it reads only the fixed limits (max_model_len, the KV pool's size and watermark),
        so a front end can refuse such a request before it answers anything (`policies.Scheduler`)."""
        return self.scheduler.reject_reason(request)

    # --- the loop -------------------------------------------------------------------------------------
    def _emit(self, request: Request, tokens: list[int], now: float) -> None:
        cb = self._callbacks.get(request.req_id)
        finished = request.is_finished
        if cb is not None:
            reason = request.finish_reason.value if finished and request.finish_reason else None
            try:
                cb(RequestOutput(request.req_id, tokens, finished, reason, now))
            except Exception:  # one client's broken callback must not stop the engine for the others
                logging.getLogger(__name__).exception("on_output of request %r failed; not called again",
                                                      request.req_id)
                self._callbacks.pop(request.req_id, None)
        if finished:
            self._callbacks.pop(request.req_id, None)
            self._live.pop(request.req_id, None)
            for hook in self.on_finish:
                hook(request, now)
            self._record_end(request, now)  # last: the request's row is final

    def _record_end(self, request: Request, now: float) -> None:
        """A request has ended: a streamed recorder writes it out with its next batch."""
        if self._spool is not None:
            self.recorder.on_finish(request, now)

    def _track(self, request: Request, cb: Callable | None) -> None:
        """Record a request taken from the ingress and remember it until it ends."""
        self.recorder.add_request(request, "0")
        self._live[request.req_id] = request
        if cb is not None:
            self._callbacks[request.req_id] = cb

    def _admit(self) -> None:
        with self._lock:  # the one short critical section: swap the lists
            ingress, self._ingress = self._ingress, []
            aborts, self._aborts = self._aborts, []
        now = self.now()
        for request, cb in ingress:
            self._track(request, cb)
            self.scheduler.add_request(request, now)
            if request.is_finished:  # rejected at once (too long, can never fit)
                self._emit(request, [], now)
        for req_id in aborts:
            request = self._live.get(req_id)
            if request is None or request.is_finished:
                continue
            self.scheduler.abort_request(req_id, now)
            if not request.is_finished:  # defensive: a scheduler that did not know it
                request.finish(FinishReason.ABORTED, now)
            self._emit(request, [], now)

    def step(self) -> bool:
        """One iteration: admit arrivals and aborts, schedule, execute, update. False if nothing ran."""
        with self._state_lock:
            return self._step()

    def _step(self, until: float | None = None) -> bool:
        """`step`; with `until` (run_workload's time limit), a step that ends at or after it delivers
        nothing (`_cut_step`)."""
        self._admit()
        start = self.now()
        t = self.clock()
        plan = self.scheduler.schedule(start)
        self.schedule_time_s += self.clock() - t
        if plan.is_empty:
            self._emit_ended(start)
            return False
        record = record_step(plan, start, 0.0, self.scheduler)  # queues and KV read while the step runs, as in sim
        # a verify step may add several tokens to a request: what each sampling request had before
        before = [(s.request, len(s.request.output_token_ids)) for s in plan.seqs
                  if s.samples and not s.is_padding] if plan.spec_token_ids else None
        result = self.runner.execute(plan)
        end = self.now()
        if until is not None and end >= until:
            self._cut_step(plan, record, until)
            return True
        t = self.clock()
        self.scheduler.update(plan, result, end)
        self.schedule_time_s += self.clock() - t
        self.num_steps += 1
        self.num_preemptions += len(plan.preempted) + len(plan.swapped_out)
        if before is not None:
            for r, n in before:
                self._emit(r, r.output_token_ids[n:], end)
        else:
            for seq in plan.seqs:
                if seq.samples and not seq.is_padding:
                    r = seq.request
                    self._emit(r, r.output_token_ids[-1:], end)
        self._emit_ended(end)
        # the whole iteration: scheduling, swaps, batch assembly, forward, sampling, the update and the
        # outputs. The next step cannot start before the outputs are out, so a token's gap to the next
        # is all of it, which is what a simulated step's duration stands for (left out, 24-60 us a
        # step went missing from every simulated TPOT on the tiny CPU model)
        record.duration = self.now() - start
        self.recorder.add_step(record)
        self.last_step = record
        for hook in self.step_hooks:  # outside the step's time: tracing and measurement, not serving
            hook(plan, result)
        return True

    def _cut_step(self, plan: BatchPlan, record, until: float) -> None:
        """The step in flight at the run's time limit `until`: it ran to its end (a forward pass is not
        interrupted), but its tokens came after the benchmark's client had stopped counting (guidellm
        cancels what is pending at its time limit, and a token it never received is not in its
        results), so the scheduler never takes them in (no update) and every live request is aborted
        at the limit with what it had before it, as the simulator stops its clock there. The step's
        row is kept, cut at the limit, only if its plan preempted or swapped (the requests count
        those already), as the simulator's `Replica.end_step` keeps it."""
        self.num_steps += 1
        self.num_preemptions += len(plan.preempted) + len(plan.swapped_out)
        if record.num_preempted or record.num_swap_out_blocks or record.num_swap_in_blocks:
            record.duration = until - record.start
            self.recorder.add_step(record)

    def _emit_ended(self, now: float) -> None:
        """Final outputs for requests the scheduler ended without sampling (e.g. rejected at schedule time)."""
        for request in [r for r in self._live.values() if r.is_finished]:
            self._emit(request, [], now)

    def has_unfinished(self) -> bool:
        with self._lock:
            pending = bool(self._ingress or self._aborts)
        return pending or self.scheduler.has_unfinished()

    def run_until_done(self, max_steps: int | None = None) -> None:
        """Step on this thread until every added request has ended (tests, offline batches)."""
        for _ in itertools.count() if max_steps is None else range(max_steps):
            if not self.has_unfinished():
                return
            if not self.step() and not self._ingress:
                self._end_stuck(STUCK)
                return

    def _end_stuck(self, why: str, at: float | None = None) -> None:
        """Abort every live request (the simulator's `end_unfinished`) at `at` (None: now) and give each
        its final output, also one that had finished in a step that failed before its output went out."""
        with self._state_lock:
            now = self.now() if at is None else at
            live = list(self._live.values())
            end_unfinished(self.scheduler, live, now, why)
            for request in live:
                self._emit(request, [], now)

    def warm_up(self) -> None:
        """Run a throwaway prefill and decode outside the scheduler, so that one-time costs (lazy
        kernel init, allocator growth) do not land in the first measured step. Writes only KV slots of
        block 0..1, which no request owns yet; records nothing."""
        bs = self.kv_cache.block_size
        n = min(2 * bs, self.kv_cache.num_blocks * bs, self.config.scheduler.max_model_len) - 1
        if n < 1:
            return
        fake = Request("warmup", 0.0, n, 2, prompt_token_ids=[3] * n)
        fake.block_table = list(range(-(-(n + 1) // bs)))
        self.runner.execute(BatchPlan(0, (ScheduledSeq(fake, n, 0, True),)))
        fake.output_token_ids.append(3)
        self.runner.execute(BatchPlan(0, (ScheduledSeq(fake, 1, n, True),)))

    # --- background thread (serving) ----------------------------------------------------------------
    def start(self) -> None:
        """Run the loop on a background thread until `stop()`."""
        if self._thread is not None:
            return
        if self.config.clock != "wall":
            raise ConfigError(f"engine.clock: {self.config.clock!r} reads the thread that built the engine; a "
                              "background loop needs wall (or step on that thread: run_workload)")
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="servesim-engine", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stopping:
                if not self.step():
                    self._wakeup.wait(0.05)  # idle: sleep until a request or abort arrives
                    self._wakeup.clear()
        except Exception as exc:  # a failed step must not leave clients waiting forever
            with self._lock:  # from here on add_request ends new requests at once
                self.error = exc
                ingress, self._ingress = self._ingress, []
            logging.getLogger(__name__).exception("engine step failed; aborting live requests")
            self._stopping = True
            for request, cb in ingress:  # added but not yet admitted: they end with the live ones
                self._track(request, cb)
            self._end_stuck(f"engine error: {exc!r}")

    def is_alive(self) -> bool:
        """True while the background loop runs (False before `start`, after `stop` or a failed step)."""
        return self._thread is not None and self._thread.is_alive() and self.error is None

    def stop(self) -> None:
        """Stop the background thread (after its current step)."""
        self._stopping = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # --- replay ----------------------------------------------------------------------------------------
    def prepare_workload_request(self, request: Request) -> Request:
        """Give a `sim` workload request token ids in this model's vocabulary.

        Count-only requests get seeded random ids; synthetic ids (e.g. shared prefixes) are folded
        into the vocabulary, which keeps equal prefixes equal, so prefix caching still hits.
        """
        vocab = self.model_config.vocab_size
        if request.prompt_token_ids is None:
            rng = np.random.default_rng(request_seed(request.req_id, self.config.seed))
            request.prompt_token_ids = rng.integers(3, vocab, request.num_prompt_tokens).tolist()
        else:
            request.prompt_token_ids = [int(t) % vocab for t in request.prompt_token_ids]
        return request

    def run_workload(self, workload, progress: bool = True, max_time_s: float | None = None) -> "EngineResult":
        """Replay `workload` in real time on this thread and return the results (see the class docstring)."""
        if self._thread is not None:
            raise RuntimeError("run_workload: the engine is running on its background thread; stop() it first")
        max_time_s = max_time_s if max_time_s is not None else self.config.max_time_s
        pending: list[tuple[float, int, Request]] = []
        counter = itertools.count()

        def push(request: Request) -> None:
            heapq.heappush(pending, (request.arrival_time, next(counter), self.prepare_workload_request(request)))

        for request in workload.start():
            push(request)
        bar = tqdm(total=len(pending), desc="engine", unit="req", disable=not progress, mininterval=0.5)

        def finished(request: Request, now: float) -> None:
            bar.update(1)
            for follow_up in workload.on_finish(request, now):
                push(follow_up)
                bar.total += 1

        self.on_finish.append(finished)
        self._t0 = self.clock()  # the replay's clock starts at 0, like the simulator's
        try:
            while True:
                now = self.now()
                horizon = now if max_time_s is None else min(now, max_time_s)
                while pending and pending[0][0] <= horizon:
                    request = heapq.heappop(pending)[2]
                    if self.reject_reason(request) is None:
                        self.add_request(request)
                    else:
                        self._reject_on_arrival(request)
                if max_time_s is not None and now >= max_time_s:
                    self._admit()  # what arrived during the last step is in the results too, aborted
                    self._end_stuck("the run ended (max_time_s)", at=max_time_s)  # when the client stopped
                    break
                with self._state_lock:
                    stepped = self._step(until=max_time_s)
                if stepped:
                    continue
                if pending:  # idle until the next arrival
                    time.sleep(max(0.0, min(pending[0][0] - self.now(), 0.05)))
                elif self.has_unfinished():
                    if not self._ingress:
                        self._end_stuck(STUCK)
                else:
                    break
        finally:
            self.on_finish.remove(finished)
            bar.close()
        return self.result()

    def _reject_on_arrival(self, request: Request) -> None:
        """End a replayed request the scheduler could never serve when it arrived, not at the next step
        boundary: vLLM's API server refuses it before the engine sees it, and the simulator rejects it
        on arrival, so a closed-loop user's next request is sent from then (on the engine thread)."""
        with self._state_lock:
            self._track(request, None)
            self.scheduler.add_request(request, request.arrival_time)  # rejects it, saying why
            self._emit(request, [], request.arrival_time)

    # --- observability --------------------------------------------------------------------------------
    def stats(self) -> dict:
        """Live counters for a /metrics endpoint (read without locks: a snapshot, maybe a step stale)."""
        bm = self.scheduler.block_manager
        return {
            "num_running": self.scheduler.num_running, "num_waiting": self.scheduler.num_waiting,
            "num_swapped": self.scheduler.num_swapped, "num_gpu_blocks": bm.num_gpu_blocks,
            "num_used_gpu_blocks": bm.num_used_gpu_blocks, "kv_usage": bm.usage,
            "num_preemptions": self.num_preemptions, "num_steps": self.num_steps,
            "num_requests": self.recorder.num_requests,
        }

    def stream_records(self, spool_parent: str | Path | None = None, request_batch: int = STREAM_REQUEST_BATCH,
                       step_batch: int = STREAM_STEP_BATCH, exclusive: bool = False) -> list[str]:
        """Let finished requests and steps leave memory from now on (see the class docstring): they
        go, `request_batch` / `step_batch` at a time, to a working folder in `spool_parent` (else the
        system's temporary folder), removed by `close_records`, when the engine is collected, or at
        exit. The working folders there of processes that died without removing theirs (a server
        killed by SIGKILL) are removed first: one line each, returned. `exclusive`: `spool_parent` is
        a records folder, refused (`records.spool_folder.SpoolInUse`) while another process serves into it."""
        with self._state_lock:
            if self._spool is not None:
                return []
            if self.recorder.num_requests or self.recorder.steps:
                raise RuntimeError("stream_records: call it before the first request (this engine has records)")
            if spool_parent is not None:
                Path(spool_parent).mkdir(parents=True, exist_ok=True)
            swept = SpoolFolder.sweep(spool_parent, exclusive)
            self._spool = SpoolFolder(spool_parent)
            self.recorder = StreamingRecorder(self._spool.path, slo=self.config.slo, request_batch=request_batch,
                                              step_batch=step_batch, plot=True, spool=True)
            return swept

    def close_records(self) -> None:
        """Remove stream_records' working folder: after the last `write_records`, with the engine stopped
        (what it records later is lost). Nothing to do for records kept in memory."""
        if self._spool is not None:
            with self._state_lock:
                self._spool.cleanup()

    def write_records(self, out_dir: str | Path, plot: bool = True) -> Path:
        """Write the tables and summary of everything so far to `out_dir` (see the class docstring)."""
        if self._spool is None:
            return self.result().save(out_dir, plot=plot)
        with self._state_lock:  # between steps: only what is in memory is copied here
            snapshot = self.recorder.snapshot()
        return snapshot.write(out_dir, self.config_toml, plot=plot)

    def result(self) -> EngineResult:
        """The `requests`/`steps` tables and summary of everything this engine has seen."""
        if self._spool is not None:
            raise RuntimeError("result(): this engine streams its records (stream_records); write them with "
                               "write_records(out_dir)")
        with self._state_lock:  # not while a step changes them (the engine thread may be running)
            raw = list(self.recorder.requests)
            requests = requests_table(raw, self.recorder.replica_of)
            steps = steps_table(list(self.recorder.steps))
            itls = pooled_itls(raw)
        summary = summarize(requests, steps, itls, self.config.slo)
        return EngineResult(requests, steps, summary, self.config_toml, raw)

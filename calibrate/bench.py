"""Micro-benchmarks of the engine's own ops on a device, fitted into a profile (`servesim calibrate`).

What is timed (one layer's modules from `gpu_backend.model.op_registry`; x num_hidden_layers = the stack):

- over token counts T: QKV, O, gate/up and down projections, SwiGLU, RMSNorm, rotary, KV writes
  (the backend's scatter), embedding; over sampled rows S: the LM head and the sampler; the GEMMs
  and the LM head over rotating copies of their weights (`OpBench.cold`);
- prefill attention over (chunk tokens, context length), one sequence, through the engine's
  attention backend (which also writes the chunk's K/V: `attention_includes_kv_write`); decode
  attention over (batch size, KV length); swap copies over bytes (`KVCache.swap_out` / `swap_in`);
- the engine's own steps on a fixed calibration workload (`measure_engine_steps`, fitted by
  `calibrate.engine_steps`): host overhead and the op curves' in-step scales.

Each point: `warmup` untimed calls, then `repeats` timed ones (synchronized on CUDA); every timed
call is kept as a raw point and the fit uses per-x medians. `quick` is a small grid for CI.
"""
from __future__ import annotations

import copy
import datetime as _dt
import gc
import itertools
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from calibrate.engine_steps import (AFTER_PREFILL_CYCLE, AFTER_PREFILL_DECODERS, AFTER_PREFILL_SIZES, ENGINE_GROUPS,
                                    ENGINE_POLICIES, IDLE_GAPS, after_prefill_curve, fit_engine_steps, interleave,
                                    split_after_idle)
from calibrate.fit import fit_op
from calibrate.fit_checks import check_profile, warn
from calibrate.model_dims import resolve_model
from calibrate.speed_probe import SpeedProbe, fake_seq
from gpu_backend.attention import select_backend
from gpu_backend.attention.torch_backend import write_kv
from gpu_backend.engine import Engine, EngineConfig, resolve_dtype
from gpu_backend.heap import pin_heap
from gpu_backend.input_batch import build_input_batch
from gpu_backend.kv_cache import KVCache
from gpu_backend.model import build_model, op_registry
from gpu_backend.model_config import ModelConfig
from gpu_backend.sampling_params import GREEDY
from policies import BatchPlan, CacheConfig, ConfigError, Request, ScheduledSeq, SchedulerConfig
from sim.latency.profiled import OpProfile, PiecewiseLinear, Profile, ProfiledLatencyModel


@dataclass(frozen=True)
class Grid:
    """The shapes and repeat counts of one calibration run."""

    tokens: tuple[int, ...]
    sampled: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]  # (chunk tokens, context length)
    decode: tuple[tuple[int, int], ...]  # (batch size, KV length)
    swap_blocks: tuple[int, ...]
    warmup: int
    repeats: int
    engine_groups: tuple[int, ...] = ENGINE_GROUPS  # request groups of the engine-step calibration
    engine_max_prompt: int = 1000  # the longest prompt of the engine-step calibration workload
    engine_max_output: int = 40  # ... and its longest output
    after_prefill_repeats: int = 12  # cycles per prefill size of the after-prefill probe

    @classmethod
    def make(cls, quick: bool | str, max_len: int = 2048, max_seqs: int = 256) -> "Grid":
        """The grid of a mode: `quick` True or "quick", False or "full", or "smoke" (a handful of shapes
        and one engine group: seconds on a CPU, for dry runs of the machinery; fits nothing well)."""
        if quick == "smoke":
            return cls((1, 2, 3, 8, 64, 256), (1, 2, 3, 8), _pairs((4, 64, 256), (0, 16, 64), max_len),
                       tuple((b, L) for b in (1, 2, 4, 8) for L in (16, 64, 256) if L <= max_len), (1, 4), 1, 2,
                       (1, 3, 2, 4), 128, 8, 2)
        if quick not in (True, False, "quick", "full"):
            raise ValueError(f"grid: {quick!r} is not allowed; choose one of smoke, quick, full")
        quick = quick in (True, "quick")
        if quick:
            # every count of 1-8 tokens: small-M GEMM kernels are not monotone there (calibrate.fit._pwl)
            tokens = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
            sampled = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
            # cached context 0 (a first chunk: SDPA's causal kernel) and 16 (a later chunk: the
            # explicit-mask kernel, ~2x the cost) bracket the jump between the two regimes tightly
            # first chunks up to the model length: a whole prompt (continuous, static) runs as one chunk,
            # and beyond the grid a curve continues linearly where attention grows with the square
            chunks, extra = _to_max_len((4, 16, 64, 128, 256, 512, 1024), max_len), (0, 16, 64, 128, 256, 512)
            # decode attention on CPU is far from bilinear between coarse knots (inside engine steps,
            # batches of 3-4 at 128-256 tokens ran 1.5x what a 1/2/4 x 16/128/512 grid interpolated):
            # the grid is dense where most decode steps of a light load fall, and cheap to time
            batches, kvs = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32), (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
            return cls(tokens, sampled, _pairs(chunks, extra, max_len), _grid(batches, kvs, max_len),
                       (1, 4, 16, 64), 2, 5)
        tokens = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
                  2048, 3072, 4096)
        sampled = tuple(s for s in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256) if s <= max_seqs)
        chunks, extra = _to_max_len((2, 4, 16, 64, 128, 256, 512, 1024), max_len), (0, 16, 64, 128, 256, 512, 1024)
        batches, kvs = ((1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128),
                        (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048))
        return cls(tokens, sampled, _pairs(chunks, extra, max_len), _grid(batches, kvs, max_len),
                   (1, 4, 16, 64, 256), 3, 11, ENGINE_GROUPS * 2, after_prefill_repeats=16)


def _to_max_len(chunks: tuple[int, ...], max_len: int) -> tuple[int, ...]:
    """`chunks` continued by doublings up to `max_len`, which ends them (a whole prompt of the model's length)."""
    out = [c for c in chunks if c < max_len]
    while out and out[-1] * 2 < max_len:
        out.append(out[-1] * 2)
    return tuple(out) + (max_len,)


def _pairs(chunks, extra, max_len):
    return tuple((q, q + e) for q in chunks for e in extra if q + e <= max_len)


def _grid(batches, kvs, max_len):
    """(batch, KV length) pairs, the KV lengths continued by doublings up to `max_len` (`_to_max_len`)."""
    return tuple((b, L) for b in batches for L in _to_max_len(kvs, max_len))


def clock_for(device: torch.device) -> tuple[Callable[[], float], str]:
    """The timer for `device`: this thread's CPU time on a single-threaded CPU run, else wall time.

    On a CPU shared with other processes, wall time of a short op is mostly time spent waiting for
    a core (several-fold spreads on a loaded 2-core machine) while the thread's CPU time stays
    within a few percent. With one torch thread all the op's work runs on the calling thread, so its
    CPU time is the op's uncontended cost; with more threads or on CUDA, wall time is the only
    honest clock (synchronized for CUDA).
    """
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time, "thread_cpu"
    return time.perf_counter, "wall"


def time_call(fn: Callable[[], object], warmup: int, repeats: int, device: torch.device) -> list[float]:
    """Seconds of `repeats` calls of `fn` after `warmup` untimed ones (see `clock_for`)."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    clock, _ = clock_for(device)
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        sync()
        t = clock()
        fn()
        sync()
        out.append(clock() - t)
    return out


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {name} ({torch.get_num_threads()} threads)"


def _decode_seqs(batch: int, kv_len: int, block_size: int) -> list[ScheduledSeq]:
    """`batch` decodes at `kv_len` with interleaved block tables (blocks 0 .. batch x blocks-per-seq - 1)."""
    per = -(-kv_len // block_size)
    seqs = [fake_seq(i, 1, kv_len - 1, 0, block_size) for i in range(batch)]
    for i, s in enumerate(seqs):
        s.request.block_table = [i + j * batch for j in range(per)]
    return seqs


class OpBench:
    """Builds the tiny inputs for each op and times them on one device (see module docstring)."""

    def __init__(self, model_config, device: str = "cpu", dtype: torch.dtype | None = None, seed: int = 0,
                 model=None) -> None:
        self.device = torch.device(device)
        # the engine runs with it too: time ops as they run there (gpu_backend.heap)
        self.heap_pinned = pin_heap() if self.device.type == "cpu" else None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("--device: cuda was asked for but torch sees no CUDA device; choose one of cpu")
        self.config = model_config
        if model is not None:  # the model an engine will run (see `calibrate`'s `model`)
            self.model = model.to(self.device)
            self.dtype = next(self.model.parameters()).dtype
        else:
            self.dtype = dtype or resolve_dtype("auto", self.device)
            self.model = build_model(model_config, self.device, self.dtype, seed=seed)
        self.ops = op_registry(self.model)
        self.backend = select_backend(self.device)
        self.block_size = 16
        self.kv = KVCache(model_config, 1, self.block_size, 0, self.dtype, self.device)  # resized on demand
        self._kv_cls = KVCache
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        # bytes of weights one forward step reads (see `cold`)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())

    def rand(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen).to(self.device, self.dtype)

    def kv_cache(self, num_blocks: int, num_cpu_blocks: int = 0):
        if self.kv.num_blocks < num_blocks or self.kv.num_cpu_blocks < num_cpu_blocks:
            self.kv = self._kv_cls(self.config, max(num_blocks, self.kv.num_blocks), self.block_size,
                                   max(num_cpu_blocks, self.kv.num_cpu_blocks), self.dtype, self.device)
        return self.kv

    # -- per-op callables ------------------------------------------------------------------------
    def cold(self, module: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        """`module` called through a rotation of copies whose weights total one step's weight traffic.

        In an engine step every weight is read once, and the same layer's weights come back only
        after all the others' (the whole model, up to `COLD_BYTES_CAP`) went through the caches. A
        micro-benchmark calling one module over and over reads its weights from cache instead and
        measures the decode GEMMs of the tiny model several times faster than inside a step.
        Rotating over copies reproduces the step's reuse distance.
        """
        own = sum(p.numel() * p.element_size() for p in module.parameters())
        total = min(self.weight_bytes, COLD_BYTES_CAP)
        n = max(1, min(-(-total // max(own, 1)), 256))
        copies = [module] + [copy.deepcopy(module) for _ in range(n - 1)]
        it = itertools.cycle(copies)

        def call(x: torch.Tensor) -> torch.Tensor:
            return next(it)(x)

        call.copies = copies
        return call

    def token_op(self, name: str, T: int) -> Callable[[], object]:
        c, ops = self.config, self.ops
        if name == "qkv_proj":
            x, f = self.rand(T, c.hidden_size), self.cold(ops["qkv_proj"])
            return lambda: f(x)
        if name == "o_proj":
            x, f = self.rand(T, c.q_size), self.cold(ops["o_proj"])
            return lambda: f(x)
        if name == "gate_up_proj":
            x, f = self.rand(T, c.hidden_size), self.cold(ops["gate_up"])
            return lambda: f(x)
        if name == "down_proj":
            x, f = self.rand(T, c.intermediate_size), self.cold(ops["down"])
            return lambda: f(x)
        if name == "act":
            x = self.rand(T, 2 * c.intermediate_size)
            return lambda: ops["act"](x)
        if name == "input_norm":
            x = self.rand(T, c.hidden_size)
            return lambda: ops["norm"](x)
        if name == "rotary":
            pos = torch.arange(T, device=self.device) % c.max_position_embeddings
            q, k = self.rand(T, c.num_attention_heads, c.head_dim), self.rand(T, c.num_key_value_heads, c.head_dim)
            return lambda: ops["rotary"](pos, q, k)
        if name == "residual_add":
            x, y = self.rand(T, c.hidden_size), self.rand(T, c.hidden_size)
            return lambda: x + y
        if name == "embed":
            ids = torch.randint(0, c.vocab_size, (T,), generator=self.gen).to(self.device)
            return lambda: ops["embed"](ids)
        if name == "kv_write":
            kv = self.kv_cache(-(-T // self.block_size))
            slots = torch.arange(T, device=self.device)
            k, v = self.rand(T, c.num_key_value_heads, c.head_dim), self.rand(T, c.num_key_value_heads, c.head_dim)
            return lambda: write_kv(k, v, kv.k[0], kv.v[0], slots)
        if name == "lm_head":
            x, f = self.rand(T, c.hidden_size), self.cold(self.model.lm_head)
            return lambda: f(x).float()  # as LlamaModel.compute_logits
        if name == "sampler":
            logits = self.rand(T, c.vocab_size).float()
            params, zeros = [GREEDY] * T, [0] * T
            return lambda: self.ops["sampling"](logits, params, zeros, zeros)
        raise ValueError(f"op: {name!r} is not a token op")

    def attention(self, seqs: list[ScheduledSeq]) -> Callable[[], object]:
        c = self.config
        num_blocks = max(b for s in seqs for b in s.request.block_table) + 1
        kv = self.kv_cache(num_blocks)
        batch = build_input_batch(BatchPlan(0, tuple(seqs)), self.block_size, self.device)
        T = batch.meta.num_tokens
        q = self.rand(T, c.num_attention_heads, c.head_dim)
        k, v = self.rand(T, c.num_key_value_heads, c.head_dim), self.rand(T, c.num_key_value_heads, c.head_dim)
        scale = c.head_dim ** -0.5
        return lambda: self.backend.forward(q, k, v, kv.k[0], kv.v[0], batch.meta, scale)

    def prefill(self, chunk: int, context: int) -> Callable[[], object]:
        return self.attention([fake_seq(0, chunk, context - chunk, 0, self.block_size)])

    def decode(self, batch: int, kv_len: int) -> Callable[[], object]:
        # interleaved block tables (sequence i owns blocks i, i + batch, i + 2 batch, ...): decoding
        # sequences grow a block at a time, so the engine's tables interleave like this, and gathering
        # scattered blocks costs 15-25% more than contiguous ones at 30 x 900 tokens (measured here)
        return self.attention(_decode_seqs(batch, kv_len, self.block_size))

    def swap(self, direction: str, num_blocks: int) -> tuple[Callable[[], object], int]:
        kv = self.kv_cache(num_blocks, num_blocks)
        pairs = [(i, i) for i in range(num_blocks)]
        fn = (lambda: kv.swap_out(pairs)) if direction == "swap_out" else (lambda: kv.swap_in(pairs))
        return fn, num_blocks * kv.bytes_per_block


# the rotation of `OpBench.cold` stops at this many bytes: beyond any CPU's last-level cache share
# and 5x an H100's L2, so the weights come from memory as they do in a step of a large model
COLD_BYTES_CAP = 256 << 20
TOKEN_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act", "input_norm", "rotary", "kv_write",
             "residual_add", "embed")
SAMPLED_OPS = ("lm_head", "sampler")


def measure_ops(bench: OpBench, grid: Grid, progress: bool = True, max_call_s: float = 1.0, passes=(0, 1),
                points: dict | None = None, too_slow: set | None = None, probe=None,
                stamps: dict | None = None) -> dict[str, list]:
    """Raw points per op: {op: [[x..., seconds], ...]} (see module docstring).

    `passes`: which of the two passes to run (0 forward, 1 in reverse); a caller running them apart
    (`calibrate` around a bracketed run) hands the same `points` and `too_slow` to both calls.
    `probe` (a `calibrate.speed_probe.SpeedProbe`) is read between shapes, and `stamps` gets, per op,
    the time each of its points was taken (aligned with `points[op]`), for `SpeedProbe.normalize_points`."""
    cases: list[tuple[str, tuple, Callable[[], tuple[Callable, tuple]]]] = []
    for op in TOKEN_OPS:
        for T in grid.tokens:
            cases.append((op, (T,), lambda op=op, T=T: (bench.token_op(op, T), (T,))))
    for op in SAMPLED_OPS:
        for S in grid.sampled:
            cases.append((op, (S,), lambda op=op, S=S: (bench.token_op(op, S), (S,))))
    for q, ctx in grid.prefill:
        cases.append(("attn_prefill", (q, ctx), lambda q=q, ctx=ctx: (bench.prefill(q, ctx), (q, ctx))))
    for b, L in grid.decode:
        cases.append(("attn_decode", (b, L), lambda b=b, L=L: (bench.decode(b, L), (b, L))))
    for direction in ("swap_out", "swap_in"):
        for n in grid.swap_blocks:
            def case(direction=direction, n=n):
                fn, nbytes = bench.swap(direction, n)
                return fn, (nbytes,)
            cases.append((direction, (n,), case))

    points = {} if points is None else points
    too_slow = set() if too_slow is None else too_slow
    # two passes, the second in reverse order, each with half the repeats: a burst of load from
    # other processes then lands on different shapes in each pass instead of on one stretch of a grid
    reps = (grid.repeats + 1) // 2, grid.repeats // 2
    order = list(enumerate(cases))
    with torch.inference_mode(), tqdm(total=len(cases) * len(passes), desc="calibrate ops", unit="shape",
                                      disable=not progress, mininterval=0.5) as bar:
        for pass_, seq_ in ((p, (order, order[::-1])[p]) for p in passes):
            for i, (op, _, make) in seq_:
                bar.update(1)
                if (op, i) in too_slow or reps[pass_] == 0:
                    continue
                fn, xs = make()
                if probe is not None:
                    probe.maybe_read("ops")
                times = time_call(fn, grid.warmup, reps[pass_], bench.device)
                points.setdefault(op, []).extend([[*map(float, xs), t] for t in times])
                if stamps is not None:
                    stamps.setdefault(op, []).extend([time.perf_counter()] * len(times))
                if pass_ == 0 and float(np.median(times)) > max_call_s:  # grids ascend: skip larger shapes
                    too_slow.update((op, j) for j, (o, _, _) in order if o == op and j > i)
    return points


def measure_engine_steps(bench, groups=ENGINE_GROUPS, policies=ENGINE_POLICIES, max_prompt: int = 1000,
                         max_output: int = 40, progress: bool = True, seed: int = 0,
                         probe=None) -> list[tuple[str, BatchPlan, float, float, float]]:
    """[(configuration, plan, seconds, after_idle, at)] of every step of the calibration workload
    (module docstring: `calibrate.engine_steps`); after_idle is the idle pause (seconds) before a
    group's first step, False for every other step; at is `time.perf_counter()` at the step's end.
    `probe` (a `calibrate.speed_probe.SpeedProbe`) is read after a step, outside its timing."""
    mc = bench.config
    max_len = mc.max_position_embeddings
    max_prompt = max(4, min(max_prompt, max_len // 2))
    clock, _ = clock_for(bench.device)
    rng = np.random.default_rng(seed + 11)
    out: list[tuple[str, BatchPlan, float, float, float]] = []
    max_seqs = max(groups)
    blocks = max_seqs * -(-(max_prompt + max_output) // bench.block_size) + 16
    # (name, engine, [record steps, next step follows the pause]): one engine per scheduler
    # configuration, all on the same model weights
    runs = []
    for policy, budget in policies:
        name = f"{policy}-{budget or max_len}"
        cfg = EngineConfig(model=mc, scheduler=SchedulerConfig(
            policy=policy, max_num_batched_tokens=budget or max_len, max_num_seqs=max_seqs, max_model_len=max_len),
            cache=CacheConfig(block_size=bench.block_size, num_gpu_blocks=blocks), dtype=_dtype_name(bench.dtype))
        engine = Engine(cfg, bench.device, model=bench.model)
        # the engine's steps on the ops' clock: a step's duration is its whole iteration (`Engine._step`)
        engine.clock = engine.runner.clock = clock
        engine._t0 = clock()
        keep = [False, False]

        def hook(plan, result, engine=engine, name=name, keep=keep):
            if keep[0]:
                out.append((name, plan, engine.last_step.duration, keep[1], time.perf_counter()))
                keep[1] = False  # only a group's first step follows the idle pause
            if probe is not None:  # after a step, never between an idle pause and the step after it
                probe.maybe_read()

        engine.step_hooks.append(hook)
        runs.append((name, engine, keep))
    with torch.inference_mode(), tqdm(total=len(policies) * len(groups), desc="calibrate engine steps", unit="group",
                                      disable=not progress, mininterval=0.5) as bar:
        for name, engine, keep in runs:
            # a throwaway request first: first calls of each shape pay allocations the engine's
            # steady state does not
            engine.add_request(Request(f"{name}-warm", 0.0, 40, 4, prompt_token_ids=[5] * 40))
            engine.run_until_done()
            keep[0] = True
        # group by group, each through every configuration in turn: a stretch of the machine running
        # slower (other processes, other tenants of a shared host) then lands on every configuration
        # alike instead of on one, which the fit would read as that configuration's own cost; and small
        # and large groups alternate (`interleave`), so that it lands on small and large steps alike
        for g, n in enumerate(interleave(groups)):
            group = []
            for i in range(min(n, max_seqs)):
                p = int(np.exp(rng.uniform(np.log(4), np.log(max_prompt))))
                group.append((p, int(rng.integers(2, max_output + 1)),
                              rng.integers(3, min(mc.vocab_size, 200), p).tolist()))
            for k, (name, engine, keep) in enumerate(runs):
                # the engine sits idle first, as a server between arrivals does: its next step finds
                # cold caches (measured: 11-16% over the model on a validation run's post-idle steps),
                # the colder the longer it slept: the pauses cycle through IDLE_GAPS
                gap = IDLE_GAPS[(g + k) % len(IDLE_GAPS)]
                time.sleep(gap)
                keep[1] = gap
                for i, (p, o, ids) in enumerate(group):
                    engine.add_request(Request(f"{name}-{g}-{i}", 0.0, p, o, prompt_token_ids=list(ids)))
                engine.run_until_done()
                bar.update(1)
    return out


def add_engine_fit(profile: Profile, steps: list) -> dict:
    """Fit the host overhead and in-step scales of the engine's own `steps` into `profile`."""
    fit = fit_engine_steps(ProfiledLatencyModel(profile), steps)
    p = fit["params"]
    top = float(max(fit["max_num_seqs"], 2))
    source = "measured: engine steps of the calibration workload (calibrate.engine_steps)"
    # a residual's own relative error is meaningless (a small difference of two larger numbers):
    # the error that matters is the whole step's, in-sample and per configuration held out
    st = fit["stats"]
    step_error = {"median_abs_pct": st["median_abs_pct"], "max_abs_pct": st["max_abs_pct"],
                  "loo_median_abs_pct": st["holdout_median_abs_pct"], "loo_max_abs_pct": st["holdout_max_abs_pct"],
                  "of": "whole engine steps (loo: each scheduler configuration predicted from the others)"}
    # a negative per-step constant is the in-step saving on the ops' floor (calibrate.engine_steps._solve):
    # the overhead curve keeps what is >= 0, `meta.in_step_offset_s` the rest
    a = max(p["step_s"], 0.0)
    step = PiecewiseLinear((1.0, top), (a + p["per_seq_s"], a + p["per_seq_s"] * top))
    profile.ops["step_overhead"] = OpProfile("step_overhead", ("num_seqs",), step, fit["step_points"],
                                             dict(step_error), source)
    pre = PiecewiseLinear((1.0, 2.0), (p["per_prefill_seq_s"], 2 * p["per_prefill_seq_s"]))
    profile.ops["prefill_overhead"] = OpProfile("prefill_overhead", ("num_seqs",), pre, fit["prefill_points"],
                                                dict(step_error), source)
    profile.meta["in_step_scale"] = {k: round(p[k], 4) for k in ("dense", "attn_prefill", "attn_decode")}
    profile.meta["in_step_offset_s"] = round(min(p["step_s"], 0.0), 7)
    profile.meta["after_idle_s"] = round(fit["after_idle_s"], 7)
    if fit.get("after_idle_curve"):
        profile.meta["after_idle_curve"] = fit["after_idle_curve"]
    profile.meta["engine_step_fit"] = {**fit["stats"], "params": {k: round(v, 7) for k, v in p.items()}}
    return fit


def measure_after_prefill(bench, repeats: int, progress: bool = True) -> list[tuple[int, int, float]]:
    """[(prefill tokens, k, seconds)] of the after-prefill probe (`calibrate.engine_steps.after_prefill_curve`):
    `AFTER_PREFILL_DECODERS` sequences decode while, every `AFTER_PREFILL_CYCLE` steps, a request of one
    of `AFTER_PREFILL_SIZES` tokens (those that fit the model) arrives and ends with its prefill, so
    the decode batch after it is the one before it: what changes is what the prefill left in the
    caches. k is 0 for the prefill step, then counts the decode-only steps after it. The sizes take
    turns (`repeats` cycles each), so a slow stretch of the machine lands on all of them alike."""
    mc = bench.config
    max_len = mc.max_position_embeddings
    sizes = [n for n in AFTER_PREFILL_SIZES if n <= max_len // 2]
    clock, _ = clock_for(bench.device)
    prompt, outputs = 32, (len(sizes) + 1) * AFTER_PREFILL_CYCLE + 2
    cfg = EngineConfig(model=mc, scheduler=SchedulerConfig(
        policy="continuous", max_num_batched_tokens=max_len, max_num_seqs=AFTER_PREFILL_DECODERS + 1,
        max_model_len=max_len), cache=CacheConfig(block_size=bench.block_size, num_gpu_blocks=(
            AFTER_PREFILL_DECODERS * -(-(prompt + outputs) // bench.block_size) + -(-max(sizes) // bench.block_size) + 4)),
        dtype=_dtype_name(bench.dtype))
    engine = Engine(cfg, bench.device, model=bench.model)
    engine.clock = engine.runner.clock = clock  # the ops' clock; a step is its whole iteration
    engine._t0 = clock()
    rng = np.random.default_rng(17)
    out: list[tuple[int, int, float]] = []
    state = {"keep": False, "size": 0, "k": 0}

    def hook(plan, result):
        if plan.num_prefill_tokens:
            state["size"], state["k"] = plan.num_prefill_tokens, 0
        elif plan.num_decode_tokens:
            state["k"] += 1
        if state["keep"]:
            out.append((state["size"], state["k"], engine.last_step.duration))

    engine.step_hooks.append(hook)
    with torch.inference_mode(), tqdm(total=repeats + 1, desc="calibrate after-prefill steps", unit="round",
                                      disable=not progress, mininterval=0.5) as bar:
        for r in range(repeats + 1):  # round 0 pays the first calls of each shape: not kept
            for i in range(AFTER_PREFILL_DECODERS):
                engine.add_request(Request(f"ap-{r}-d{i}", 0.0, prompt, outputs, ignore_eos=True,
                                           prompt_token_ids=rng.integers(3, min(mc.vocab_size, 200), prompt).tolist()))
            for _ in range(AFTER_PREFILL_CYCLE):  # the decoders' own prefill settles first
                engine.step()
            state["keep"] = r > 0
            for j, n in enumerate(sizes[r % len(sizes):] + sizes[:r % len(sizes)]):
                engine.add_request(Request(f"ap-{r}-p{j}", 0.0, n, 1, ignore_eos=True,
                                           prompt_token_ids=rng.integers(3, min(mc.vocab_size, 200), n).tolist()))
                for _ in range(AFTER_PREFILL_CYCLE):
                    engine.step()
            state["keep"] = False
            engine.run_until_done()
            bar.update(1)
    return out


def _settle() -> None:
    """Collect, then freeze, the objects alive now, before a timed engine phase.

    Python's collector walks every tracked object in its oldest generation, so the engine's steps
    get slower as earlier phases leave objects behind (the calibration's records, a bracketed run's
    plans and requests), which a bracketed run would read as the machine drifting. Frozen objects
    are skipped until `gc.unfreeze()` (at the end of `calibrate`), as a serving engine freezes its
    start-up heap.
    """
    gc.collect()
    gc.freeze()


def bracket_drift_pct(profile: Profile, before: list, after: list) -> float | None:
    """How much slower (%) the engine's calibration steps ran after a bracketed run than before it.

    Each half's median of measured / predicted (the fitted profile, steps after an idle pause left
    out). The profile describes the average of the two halves; a run between them met a machine
    somewhere in between, so a large value says the run's per-step comparison is dominated by the
    machine changing speed, not by the model.
    """
    model = ProfiledLatencyModel(profile)

    def level(steps):
        r = [t / model.step_time(p) for _, p, t in split_after_idle(steps)[0]]
        return float(np.median(r)) if r else None

    a, b = level(before), level(after)
    return None if a is None or b is None else round((b / a - 1.0) * 100.0, 1)


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]


def calibrate(model_path: str | Path, device: str = "cpu", quick: bool | str = False, progress: bool = True,
              seed: int = 0, grid: Grid | None = None, between: Callable[[], object] | None = None,
              model=None, max_len: int | None = None, probe=True) -> Profile:
    """Measure and fit a profile of the engine running `model_path` (a HF config.json) on `device`.

    `quick`: the grid's mode (`Grid.make`: True / "quick", False / "full", "smoke"). `max_len`: the
    longest sequence the grid covers (default and at most the model's `max_position_embeddings`;
    `validate` passes its config's `max_model_len`). The fits' own checks (`calibrate.fit_checks`)
    go to `meta.warnings`, each also issued as a `CalibrationWarning`.

    `between`, when given, runs after the first op pass and the first half of the engine's calibration
    steps and before the second half and the second op pass (`validate` runs its engine workload
    there): the calibration then brackets that run, so a machine whose speed drifts (other tenants of a shared host) is
    measured in the state the run saw on average. Its time is not counted in `calibration_s`.

    `model`, when given, is the model (a `gpu_backend.model.LlamaModel` of `model_path`'s dims) the
    benchmarks and the calibration's engines run, instead of seeded random weights of their own: an
    engine that then runs the same object runs on the same memory: two models of one process can run
    the same steps well over the validation bar apart, and a profile cannot carry where its weights
    lay over to another model (figures: docs/results/2026-12-02-docstring-history.md).

    `probe`: the machine's speed is read throughout (`calibrate.speed_probe`; True: a probe of its own,
    or a `SpeedProbe` on the same model that `validate` also reads during its run; False: none), and
    every engine step is divided by the speed at its time against the median reading after the
    calibration's engine steps (the bracketed run's readings left out), and every op timing by the
    speed among the op benchmarks against theirs: the profile describes the machine at that
    reference speed, `meta.speed_probe` keeps it.
    """
    t0 = time.perf_counter()
    mc = ModelConfig.from_json(model_path)
    bench = OpBench(mc, device, seed=seed, model=model)
    if probe is True:
        probe = SpeedProbe(bench.model, device, clock=clock_for(bench.device)[0])
    probe = probe or None
    mode = "smoke" if quick == "smoke" else "quick" if quick in (True, "quick") else "full"
    grid = grid or Grid.make(mode, max_len=min(max_len or mc.max_position_embeddings, mc.max_position_embeddings))
    max_call_s = 2.0 if mode == "full" else 0.25
    # the engine's own steps in two halves. Alone: one half before the op timings and one after,
    # so that a slow stretch of a shared machine does not fall on one side of the in-step fit only.
    # Around a `between` run: the halves hug that run, since the host overhead and in-step scales
    # come from the engine steps and on a shared 2-core VM the speed of the engine's Python-heavy
    # steps moved by 10-20% from one minute to the next (a fixed loop of the same ops: within 0.5%),
    # and the two op passes go on either side of them. Each engine phase starts on a settled heap.
    first, second = grid.engine_groups[0::2], grid.engine_groups[1::2]
    workload = {"max_prompt": grid.engine_max_prompt, "max_output": grid.engine_max_output}
    t_between, run_window, stamps = 0.0, None, {}
    workload["probe"] = probe
    try:
        if between is None:
            _settle()
            steps = measure_engine_steps(bench, first, progress=progress, seed=seed, **workload)
            points = measure_ops(bench, grid, progress, max_call_s=max_call_s, probe=probe, stamps=stamps)
        else:
            # symmetric around the run: op pass 1, engine half 1, the run, engine half 2, op pass 2 (in
            # reverse), so that the op curves and the engine steps both see the machine of the run on
            # average (with both op passes first, the op curves were centred ~half a calibration
            # before the run, and a machine drifting by minutes put that into the in-step scales)
            points, too_slow = {}, set()
            measure_ops(bench, grid, progress, max_call_s=max_call_s, passes=(0,), points=points, too_slow=too_slow,
                        probe=probe, stamps=stamps)
            _settle()
            steps = measure_engine_steps(bench, first, progress=progress, seed=seed, **workload)
            _settle()
            t = time.perf_counter()
            between()
            run_window = (t, time.perf_counter())
            t_between = run_window[1] - t
        num_first = len(steps)
        _settle()
        steps += measure_engine_steps(bench, second, progress=progress, seed=seed + 1, **workload)
        _settle()
        after_prefill = measure_after_prefill(bench, grid.after_prefill_repeats, progress=progress)
        if between is not None:
            measure_ops(bench, grid, progress, max_call_s=max_call_s, passes=(1,), points=points, too_slow=too_slow,
                        probe=probe, stamps=stamps)
    finally:
        gc.unfreeze()
    speed_meta = None
    if probe is not None:
        # the calibration's own readings define the reference speed; a bracketed run's are its own
        reference = probe.level(*run_window, outside=True) if run_window else probe.level()
        raw_steps = steps
        steps = probe.normalize_steps(steps, reference)
        points = probe.normalize_points(points, stamps)
        speed_meta = probe.summary(reference, *(run_window or (None, None)))
        cal = probe.speed_at([s[4] for s in raw_steps], reference)
        speed_meta["calibration_p10"] = round(float(np.percentile(cal, 10)), 4)
        speed_meta["calibration_p90"] = round(float(np.percentile(cal, 90)), 4)
    # every small token count timed: keep the measured medians there (calibrate.fit._pwl)
    ops = {name: fit_op(name, pts, exact_prefix=True) for name, pts in points.items()}
    dims = resolve_model(str(model_path), 1, _dtype_name(bench.dtype))
    meta = {
        "device": device_name(bench.device), "torch_version": torch.__version__,
        "driver": (f"cuda {torch.version.cuda}" if bench.device.type == "cuda" else None),
        "dtype": _dtype_name(bench.dtype), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": "calibrate", "attention_backend": bench.backend.name,
        "attn_decode_kv": "max" if bench.backend.name == "torch" else "mean",
        "attention_includes_kv_write": True, "grid": mode,
        # the engine's ragged batches leave the static policy's padding entries out (input_batch)
        "executor_skips_padding": True,
        "num_threads": torch.get_num_threads(), "python": platform.python_version(),
        "heap_pinned": bench.heap_pinned,  # glibc heap kept (gpu_backend.heap), as the engine keeps it
        "clock": clock_for(bench.device)[1],
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),  # other processes on the machine
    }
    if speed_meta is not None:
        meta["speed_probe"] = speed_meta
    profile = Profile(meta=meta, model=dims, ops=ops)
    add_engine_fit(profile, steps)
    curve = after_prefill_curve(after_prefill)
    if curve is not None:
        profile.meta["after_prefill_curve"] = curve
    profile.meta["calibration_s"] = round(time.perf_counter() - t0 - t_between, 1)
    if between is not None:
        profile.meta["bracketed_s"] = round(t_between, 1)  # the run measured between the two halves
        profile.meta["bracket_drift_pct"] = bracket_drift_pct(profile, steps[:num_first], steps[num_first:])
    profile.meta["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    profile.meta["warnings"] = check_profile(profile.meta)
    warn(profile.meta["warnings"])
    return profile

"""`OpBench`: the engine's ops one at a time on a device, over the shapes of a `Grid` (`measure_ops`).

What is timed (one layer's modules from `gpu_backend.model.op_registry`; x num_hidden_layers = the stack):

- over token counts T: QKV, O, gate/up and down projections, SwiGLU, RMSNorm, rotary, KV writes
  (the backend's scatter), embedding; over sampled rows S: the LM head and the sampler; the GEMMs
  and the LM head over rotating copies of their weights (`OpBench.cold`);
- prefill attention over (chunk tokens, context length), one sequence, through the engine's
  attention backend (which also writes the chunk's K/V: `attention_includes_kv_write`); decode
  attention over (batch size, KV length); swap copies over bytes (`KVCache.swap_out` / `swap_in`).

Each point: `warmup` untimed calls, then `repeats` timed ones (`time_call`, on `clock_for`'s clock);
every timed call is kept as a raw point and the fit uses per-x medians.
"""
from __future__ import annotations

import copy
import itertools
import time
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from calibrate.cpu_cache import cpu_model
from calibrate.grid import Grid
from calibrate.speed_probe import fake_seq
from gpu_backend.attention import select_backend
from gpu_backend.attention.torch_backend import write_kv
from gpu_backend.engine import check_device, resolve_dtype
from gpu_backend.heap import pin_heap
from gpu_backend.input_batch import build_input_batch
from gpu_backend.kv_cache import KVCache
from gpu_backend.model import build_model, op_registry
from gpu_backend.sampling_params import GREEDY
from policies import BatchPlan, ScheduledSeq


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
    return f"cpu: {cpu_model()} ({torch.get_num_threads()} threads)"


def _decode_seqs(batch: int, kv_len: int, block_size: int) -> list[ScheduledSeq]:
    """`batch` decodes at `kv_len` with interleaved block tables (blocks 0 .. batch x blocks-per-seq - 1)."""
    return _ragged_seqs([kv_len] * batch, block_size)


def _ragged_seqs(lens: list[int], block_size: int) -> list[ScheduledSeq]:
    """Decodes at the KV lengths `lens`, their block tables interleaved as growing sequences leave them
    (block j of every sequence that has one, then block j + 1, ...): sequence i of a uniform batch owns
    blocks i, i + batch, i + 2 batch, ..."""
    seqs = [fake_seq(i, 1, L - 1, 0, block_size) for i, L in enumerate(lens)]
    needed = [-(-L // block_size) for L in lens]
    tables, nxt = [[] for _ in lens], 0
    for j in range(max(needed)):
        for i, n in enumerate(needed):
            if j < n:
                tables[i].append(nxt)
                nxt += 1
    for s, t in zip(seqs, tables):
        s.request.block_table = t
    return seqs


class OpBench:
    """Builds the tiny inputs for each op and times them on one device (see module docstring)."""

    def __init__(self, model_config, device: str = "cpu", dtype: torch.dtype | None = None, seed: int = 0,
                 model=None) -> None:
        self.device = check_device(device)
        # the engine runs with it too: time ops as they run there (gpu_backend.heap)
        self.heap_pinned = pin_heap() if self.device.type == "cpu" else None
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
        if name in GEMMS:
            module, width = GEMMS[name]
            x, f = self.rand(T, getattr(c, width)), self.cold(ops[module])
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

    def ragged_decode(self, batch: int, kv_len: int) -> tuple[Callable[[], object], float]:
        """(decode attention of `batch` sequences, mean KV length): one at `kv_len`, the others spread
        geometrically over kv_len/16 .. kv_len/2, as decoding sequences that arrived apart are."""
        lens = [kv_len] + [max(1, int(v)) for v in np.geomspace(kv_len / 16, kv_len / 2, batch - 1)]
        return self.attention(_ragged_seqs(lens, self.block_size)), float(np.mean(lens))

    def swap(self, direction: str, num_blocks: int) -> tuple[Callable[[], object], int]:
        kv = self.kv_cache(num_blocks, num_blocks)
        pairs = [(i, i) for i in range(num_blocks)]
        fn = (lambda: kv.swap_out(pairs)) if direction == "swap_out" else (lambda: kv.swap_in(pairs))
        return fn, num_blocks * kv.bytes_per_block


# the rotation of `OpBench.cold` stops at this many bytes: beyond any CPU's last-level cache share
# and 5x an H100's L2, so the weights come from memory as they do in a step of a large model
COLD_BYTES_CAP = 256 << 20
#: the weight GEMMs: op name -> (`op_registry` key, the config's input width)
GEMMS = {"qkv_proj": ("qkv_proj", "hidden_size"), "o_proj": ("o_proj", "q_size"),
         "gate_up_proj": ("gate_up", "hidden_size"), "down_proj": ("down", "intermediate_size")}
TOKEN_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act", "input_norm", "rotary", "kv_write",
             "residual_add", "embed")
SAMPLED_OPS = ("lm_head", "sampler")


#: (decode batches, longest KV lengths) the ragged decode batches are timed at, those the grid has
RAGGED_BATCHES, RAGGED_KV = (4, 8, 16, 32), (256, 512, 1024)


def measure_ragged_decode(bench: OpBench, grid: Grid) -> list[tuple[int, int, float, float, float]]:
    """[(batch, longest KV length, mean KV length, ragged seconds, uniform seconds)]: decode attention
    of a ragged batch (`OpBench.ragged_decode`) and of the uniform batch at its longest length, timed
    in turns (medians of the grid's repeats), at the grid's points among `RAGGED_BATCHES` x `RAGGED_KV`.

    The torch backend pads every decode to the batch's longest context (`attn_decode_kv = "max"`), so
    the grid's uniform batches price a ragged one at its longest length; but the padding gathers one
    block over and over (block 0, from cache) where a uniform batch reads distinct blocks, and a
    ragged batch of the calibration's engine steps ran 15-25% under the uniform one
    (docs/results/2026-12-06-in-step-ops.md). `padding_discount` turns these into the profile's term."""
    points = sorted({(b, L) for b, L in grid.decode if b in RAGGED_BATCHES and L in RAGGED_KV})
    out = []
    with torch.inference_mode():
        for b, L in points:
            (ragged, mean), uniform = bench.ragged_decode(b, L), bench.decode(b, L)
            r, u = [], []
            for _ in range(max(1, grid.repeats)):
                r += time_call(ragged, grid.warmup, 1, bench.device)
                u += time_call(uniform, grid.warmup, 1, bench.device)
            out.append((b, L, mean, float(np.median(r)), float(np.median(u))))
    return out


def padding_discount(points: list[tuple[int, int, float, float, float]]) -> dict | None:
    """The share of a padded decode batch's attention that its padding does not cost, per measured
    (batch, longest KV length): (1 - ragged / uniform) / (1 - mean / longest) of `measure_ragged_decode`'s
    points, within [0, 1], as `meta.attn_decode_padding_discount` {"batch", "max_kv", "discount"}
    (a row per batch); None without a full table or when no point saves anything. On the tiny CPU
    model it was ~0 while a uniform batch's KV fits the last-level cache and ~0.2 beyond
    (16-32 decodes at 512-1024 tokens): the padding's block is read from cache, real blocks are not."""
    batches, kvs = sorted({p[0] for p in points}), sorted({p[1] for p in points})
    cell = {(b, L): (1.0 - r / u) / (1.0 - mean / L) for b, L, mean, r, u in points if u > 0 and mean < L}
    if not cell or len(cell) != len(batches) * len(kvs):
        return None
    table = [[round(min(max(cell[b, L], 0.0), 1.0), 3) for L in kvs] for b in batches]
    if not any(v > 0 for row in table for v in row):
        return None
    return {"batch": batches, "max_kv": kvs, "discount": table}


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

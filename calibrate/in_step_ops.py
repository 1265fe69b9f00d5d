"""The weight GEMMs timed inside the engine's own decode steps, at the small token counts of decoding.

At 1-32 tokens a GEMM of a small model reads its weights in about the time it computes, so its cost
is where the weights lie when it runs. Timed alone over rotating copies (`calibrate.bench.OpBench.cold`)
the same GEMM of the tiny CPU model (15 MB of weights, a 32 MB last-level cache shared with other
tenants) ran 1.5-4x its time inside a decode step, and by how much moved with the number of calls
and what ran before (the LM head at 2 tokens: 140 us timed alone, 60 us in a step; results:
docs/results/2026-12-06-in-step-ops.md). Inside a step the state is the one a prediction needs: the
rest of the step's weights and KV went through the caches since the same layer ran last.

So on a CPU the calibration also runs decode batches of every size in `IN_STEP_BATCHES` on the
engine itself, with each GEMM module's forward timed (the calibration's clock, the module call's
own dispatch left out), and those points replace the op benchmark's at the same token counts
(`merge_points`). On CUDA the kernels run asynchronously and a timer around one launch measures
the launch, so the op benchmarks stand there (a GPU's L2 is far smaller than a model's weights:
the rotation's cold reads are what a step sees).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from gpu_backend.engine import Engine, EngineConfig
from gpu_backend.model import op_registry
from policies import CacheConfig, Request, SchedulerConfig

#: decode batch sizes run: the quick grid's token counts up to the largest decode batch of a light load
IN_STEP_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32)
#: the GEMMs timed: calibrate's op name -> `gpu_backend.model.op_registry` key (per layer, and the head)
IN_STEP_OPS = {"qkv_proj": "qkv_proj", "o_proj": "o_proj", "gate_up_proj": "gate_up", "down_proj": "down",
               "lm_head": "lm_head"}
#: decode steps kept per batch size and round, and the prompts' lengths (tokens)
STEPS_PER_ROUND, PROMPT_RANGE = 8, (32, 256)


def measure_in_step_ops(bench, rounds: int, *, clock: Callable[[], float], progress: bool = True,
                        probe=None, seed: int = 0) -> dict[str, list[list[float]]]:
    """{op: [[tokens, seconds, at], ...]} of the GEMMs inside decode steps of `IN_STEP_BATCHES` sequences
    (those within the model's length), `rounds` rounds of every batch size in turn (a slow stretch of
    the machine lands on all alike); at is `time.perf_counter()` when the step ended. `probe` (a
    `calibrate.speed_probe.SpeedProbe`) is read after a step, outside the timings."""
    mc = bench.config
    max_len = mc.max_position_embeddings
    lo, hi = min(PROMPT_RANGE[0], max_len // 4), min(PROMPT_RANGE[1], max_len // 2)
    outputs = STEPS_PER_ROUND + 2
    top = max(IN_STEP_BATCHES)
    cfg = EngineConfig(model=mc, scheduler=SchedulerConfig(
        policy="continuous", max_num_batched_tokens=max(max_len, top * hi), max_num_seqs=top, max_model_len=max_len),
        cache=CacheConfig(block_size=bench.block_size, num_gpu_blocks=top * -(-(hi + outputs) // bench.block_size) + 4),
        dtype={torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[bench.dtype])
    engine = Engine(cfg, bench.device, model=bench.model)
    rng = np.random.default_rng(seed + 23)
    raw: dict[str, list[tuple[int, float]]] = {op: [] for op in IN_STEP_OPS}
    out: dict[str, list[list[float]]] = {op: [] for op in IN_STEP_OPS}
    keep = [False]
    wrapped = []

    def timed(op: str, module: torch.nn.Module) -> None:
        forward = module.forward

        def fwd(x: torch.Tensor) -> torch.Tensor:
            t = clock()
            y = forward(x)
            if keep[0]:
                raw[op].append((x.shape[0], clock() - t))
            return y

        module.forward = fwd  # an instance attribute: `Module.__call__` finds it before the class's
        wrapped.append(module)

    def hook(plan, result):
        at = time.perf_counter()
        for op, rows in raw.items():  # this step's calls, stamped with its end
            out[op].extend([float(n), t, at] for n, t in rows)
            rows.clear()
        if probe is not None:
            probe.maybe_read()

    for layer in range(mc.num_hidden_layers):
        ops = op_registry(bench.model, layer=layer)
        for op, key in IN_STEP_OPS.items():
            if key != "lm_head" or layer == 0:
                timed(op, ops[key])
    engine.step_hooks.append(hook)
    batches = [b for b in IN_STEP_BATCHES if b * (hi + outputs) <= cfg.cache.num_gpu_blocks * bench.block_size]
    try:
        with torch.inference_mode(), tqdm(total=rounds + 1, desc="calibrate in-step ops", unit="round",
                                          disable=not progress, mininterval=0.5) as bar:
            for r in range(rounds + 1):  # round 0 pays the first calls of each shape: not kept
                for b in batches[r % len(batches):] + batches[:r % len(batches)]:
                    for i in range(b):
                        p = int(rng.integers(lo, hi + 1))
                        engine.add_request(Request(f"is-{r}-{b}-{i}", 0.0, p, outputs, ignore_eos=True,
                                                   prompt_token_ids=rng.integers(3, min(mc.vocab_size, 200), p).tolist()))
                    engine.step()  # the prefill (continuous: the whole batch's prompts in one step)
                    keep[0] = r > 0
                    for _ in range(STEPS_PER_ROUND):
                        engine.step()
                    keep[0] = False
                    engine.run_until_done()
                bar.update(1)
    finally:
        for m in wrapped:
            del m.forward
    return out


def merge_points(points: dict[str, list], in_step: dict[str, list]) -> dict[str, list]:
    """The op benchmark's points with those at the token counts measured in-step replaced by them."""
    merged = dict(points)
    for op, rows in in_step.items():
        if not rows or op not in points:
            continue
        counts = {r[0] for r in rows}
        merged[op] = [p for p in points[op] if p[0] not in counts] + [[n, t] for n, t, _ in rows]
    return merged

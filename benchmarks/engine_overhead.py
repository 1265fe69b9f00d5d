"""Host overhead of the engine's loop: scheduling + batch assembly per step, vs the forward pass.

    python benchmarks/engine_overhead.py [--device cpu|cuda] [--seqs 16 64 256] [--steps 30] [--threads 1]

For each batch size it fills the engine with that many running requests (tiny Llama of
examples/tiny-llama, chunked policy), lets every prompt finish prefilling, then times steady-state
decode steps: `schedule` (scheduler.schedule + scheduler.update), `prepare` (InputBatch assembly
from the BatchPlan) and `forward` (model + sampling, synchronized). Prints medians in ms and the
host/forward ratio. Target: host (schedule + prepare) under 1 ms at 256 sequences.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpu_backend.engine import Engine, EngineConfig  # noqa: E402
from gpu_backend.model_config import ModelConfig  # noqa: E402
from policies import CacheConfig, Request, SchedulerConfig  # noqa: E402


def measure(num_seqs: int, num_steps: int, device: str, prompt_len: int = 64) -> dict[str, float]:
    model = ModelConfig.from_json(REPO / "examples" / "tiny-llama" / "config.json")
    max_tokens = 8 + num_steps + 8
    config = EngineConfig(
        model=model,
        scheduler=SchedulerConfig(policy="chunked", max_num_batched_tokens=max(2048, num_seqs), max_num_seqs=num_seqs,
                                  max_model_len=1024),
        cache=CacheConfig(block_size=16, num_gpu_blocks=num_seqs * ((prompt_len + max_tokens) // 16 + 2)))
    engine = Engine(config, device)
    gen = torch.Generator().manual_seed(0)
    for i in range(num_seqs):
        ids = torch.randint(3, model.vocab_size, (prompt_len,), generator=gen).tolist()
        engine.add_request(Request(i, 0.0, prompt_len, max_tokens, prompt_token_ids=ids))
    while engine.scheduler.num_waiting or any(r.num_output_tokens < 2 for r in engine.recorder.requests):
        engine.step()  # prefill everything, then a decode or two to warm up
    rows = {"schedule": [], "prepare": [], "forward": []}
    for _ in range(num_steps):
        before = engine.schedule_time_s
        t0 = time.perf_counter()
        assert engine.step()
        step = time.perf_counter() - t0
        rows["schedule"].append(engine.schedule_time_s - before)
        rows["prepare"].append(engine.runner.last_timings["prepare"])
        rows["forward"].append(engine.runner.last_timings["forward"])
        rows.setdefault("step", []).append(step)
    assert engine.scheduler.num_running == num_seqs, "the batch shrank: raise max_tokens"
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--seqs", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"engine overhead per decode step, tiny Llama on {args.device} (medians of {args.steps} steps, ms)")
    print(f"{'seqs':>6} {'schedule':>9} {'prepare':>8} {'host':>8} {'forward':>9} {'host/fwd':>9} {'step':>8}")
    for n in args.seqs:
        m = measure(n, args.steps, args.device)
        host = m["schedule"] + m["prepare"]
        print(f"{n:>6} {m['schedule'] * 1e3:>9.3f} {m['prepare'] * 1e3:>8.3f} {host * 1e3:>8.3f} "
              f"{m['forward'] * 1e3:>9.2f} {host / m['forward']:>9.3f} {m['step'] * 1e3:>8.2f}")


if __name__ == "__main__":
    main()

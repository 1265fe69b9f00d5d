"""How well could any model predict engine steps on this machine? The per-step floor of the CPU bar.

    .venv/bin/python benchmarks/machine_floor.py [--seconds 60] [--batch 8] [--tokens 200]

Runs the same decode workload over and over on the tiny CPU engine (examples/tiny-llama, one torch
thread, the engine clock `validate` uses): `--batch` requests of a 64-token prompt decoding
`--tokens` tokens, then again, for `--seconds` and at least three times (a step's median needs
three repetitions; on a busy machine a short run would otherwise fall short). Every repetition runs
exactly the same steps, so the best prediction of a step is the median of its own repetitions (the
"oracle"). Printed:

- oracle: the median |error| of each step against that median, the figure a perfect model would
  score on `servesim validate`'s per-step median here (the issue 15 bar is 5%);
- consecutive: the median |difference| of two consecutive steps of the same shape (the noise of
  one step, before any drift);
- drift: the median step of each repetition against the whole run's, min and max (how far the
  machine's speed moved while nothing changed but time);
- the speed probe's readings over the same run (`calibrate.speed_probe`, read after steps at most
  every `--probe-interval` seconds, outside the timed steps) and the oracle error with each step
  divided by the probe's speed.

A machine whose oracle figure is near or above 5% cannot show the per-step bar, whatever the model.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIN_REPETITIONS = 3  # the oracle is each step's median over its repetitions
sys.path.insert(0, str(REPO))


def main(argv=None) -> int:
    import numpy as np
    import torch

    from calibrate.speed_probe import SpeedProbe
    from calibrate.validate import engine_clock
    from gpu_backend.engine import Engine, EngineConfig
    from gpu_backend.model_config import ModelConfig
    from policies import CacheConfig, Request, SchedulerConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to repeat the workload")
    ap.add_argument("--batch", type=int, default=8, help="requests decoding together")
    ap.add_argument("--tokens", type=int, default=200, help="tokens each request decodes")
    ap.add_argument("--model", default=str(REPO / "examples/tiny-llama/config.json"),
                    help="the model's config.json (default examples/tiny-llama: its weights, ~15 MB, live in the "
                         "last-level cache that other tenants share)")
    ap.add_argument("--probe-interval", type=float, default=0.0,
                    help="seconds between two probe readings (default 0: after every step; validate's: 0.2)")
    args = ap.parse_args(argv)
    for name in ("seconds", "batch", "tokens"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name}: expected a positive number, got {getattr(args, name)}")
    torch.set_num_threads(1)
    mc = ModelConfig.from_json(args.model)
    blocks = args.batch * -(-(64 + args.tokens) // 16) + 8
    cfg = EngineConfig(model=mc, scheduler=SchedulerConfig(policy="chunked", max_num_batched_tokens=2048,
                                                           max_num_seqs=args.batch, max_model_len=2048),
                       cache=CacheConfig(block_size=16, num_gpu_blocks=blocks), clock=engine_clock("cpu"))
    engine = Engine(cfg, "cpu")
    probe = SpeedProbe(engine.model, "cpu", clock=time.thread_time, interval_s=args.probe_interval)
    steps: list[tuple[int, int, float, float]] = []  # (repetition, position, seconds, time)
    rep, pos = [0], [0]

    def hook(plan, result) -> None:
        if plan.num_prefill_tokens == 0:
            steps.append((rep[0], pos[0], engine.last_step.duration, time.perf_counter()))
            pos[0] += 1
        probe.maybe_read()

    engine.step_hooks.append(hook)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.seconds:.0f} s of {args.batch} x {args.tokens} "
          f"decodes, repeated")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds or rep[0] < MIN_REPETITIONS:
        pos[0] = 0
        for i in range(args.batch):
            engine.add_request(Request(f"r{rep[0]}-{i}", engine.now(), 64, args.tokens,
                                       prompt_token_ids=[5 + i] * 64, ignore_eos=True))
        engine.run_until_done()
        rep[0] += 1
    r = np.array(steps)
    reps, position, t, at = r[:, 0].astype(int), r[:, 1].astype(int), r[:, 2], r[:, 3]
    oracle = np.array([np.median(t[position == p]) for p in range(position.max() + 1)])[position]
    err = np.abs(t / oracle - 1) * 100
    same = (np.diff(reps) == 0)
    consecutive = np.abs(np.diff(t))[same] / t[1:][same] * 100
    level = np.array([np.median(t[reps == k] / oracle[reps == k]) for k in range(reps.max() + 1)])
    speed = probe.speed_at(at, probe.level())
    t_probe = t / speed
    oracle_p = np.array([np.median(t_probe[position == p]) for p in range(position.max() + 1)])[position]
    err_p = np.abs(t_probe / oracle_p - 1) * 100
    print(f"{len(t)} decode steps in {rep[0]} repetitions, median {np.median(t) * 1e3:.2f} ms; load average after: "
          f"{os.getloadavg()[0]:.2f}")
    print(f"oracle per-step error: median {np.median(err):.1f}%  p90 {np.percentile(err, 90):.1f}%  (the 5% bar's floor "
          "on this machine)")
    print(f"consecutive steps of one shape: median |difference| {np.median(consecutive):.1f}%")
    print(f"drift: each repetition's level against the run's, {(level.min() - 1) * 100:+.1f}% .. "
          f"{(level.max() - 1) * 100:+.1f}%")
    print(f"speed probe: p10-p90 {np.percentile(speed, 10):.3f}-{np.percentile(speed, 90):.3f}; oracle error with each "
          f"step divided by it: median {np.median(err_p):.1f}%  p90 {np.percentile(err_p, 90):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

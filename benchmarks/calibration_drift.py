"""How much a machine drifting during the calibration biases the engine-step fit, by group order.

    PYTHONPATH=. .venv/bin/python benchmarks/calibration_drift.py [--drift 0.15] [--noise 0.03] [--repeats 5]

Runs the calibration workload through the real CPU engine once to get its plans (their times are
not used), then makes synthetic step times from a known profile (the shipped CPU profile's op
curves with known host terms and in-step scales), multiplied by a linear drift of the machine's
speed over the calibration (0 at its middle, +-drift/2 at its ends) and by noise, and fits them
(`calibrate.engine_steps._solve`) with the groups in the order they run: ascending, and as
`calibrate.engine_steps.interleave` orders them. It prints the recovered scales, the median
|error| of the fitted model's step times against the truth, and its signed error on the smallest
(1-2 requests) and the largest (16+) groups' steps. Nothing here depends on this machine's speed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TRUTH = (2e-4, 5e-5, 1e-4, 1.25, 1.0, 1.12)  # step_s, per_seq_s, per_prefill_seq_s, dense, attn_prefill, attn_decode


def main(argv=None) -> int:
    import numpy as np
    import torch

    from calibrate.op_bench import OpBench
    from calibrate.engine_bench import measure_engine_steps
    from calibrate.engine_steps import ENGINE_GROUPS, _features, _solve, interleave
    from gpu_backend.model_config import ModelConfig
    from sim.latency.profiled import ProfiledLatencyModel

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drift", type=float, default=0.15, help="speed change across the calibration (fraction)")
    ap.add_argument("--noise", type=float, default=0.03, help="relative noise of each step")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lm = ProfiledLatencyModel.from_file(REPO / "examples/profiles/tiny-llama-cpu.json")
    bench = OpBench(ModelConfig.from_json(REPO / "examples/tiny-llama/config.json"))
    plans = [p for _, p, *_ in measure_engine_steps(bench, ENGINE_GROUPS, progress=False) if not p.is_empty]
    X = np.array([_features(lm, p) for p in plans])
    # request ids are "{configuration}-{g}-{i}", g the group's place in the order the calibration ran them
    group = np.array([int(str(p.seqs[0].request.req_id).split("-")[-2]) for p in plans])
    run_sizes = np.array(interleave(ENGINE_GROUPS))
    size = run_sizes[group]
    truth = np.array(TRUTH)
    y_true = X[:, :6] @ truth + X[:, 6]
    orders = {"ascending": list(np.argsort(run_sizes, kind="stable")), "interleaved": list(range(len(run_sizes)))}
    rng = np.random.default_rng(0)
    print(f"{len(plans)} calibration steps; truth: scales {TRUTH[3:]}, host terms {TRUTH[:3]}")
    print(f"{'drift':>6} {'order':<12} {'scales (dense, prefill, decode)':<34} {'vs truth':>9} {'groups 1-2':>11} {'16+':>7}")
    for drift in (0.0, args.drift, -args.drift):
        for name, order in orders.items():
            # each step's time in the calibration: its group's slot in the order, steps in measured order
            pos = np.concatenate([np.flatnonzero(group == g) for g in order])
            t = np.empty(len(plans))
            t[pos] = np.arange(len(plans)) / len(plans)
            res = []
            for _ in range(args.repeats):
                y = y_true * (1 + drift * (t - 0.5)) * rng.normal(1.0, args.noise, len(plans))
                p = _solve(X, y)
                err = (X[:, :6] @ p + X[:, 6] - y_true) / y_true * 100.0
                res.append((p[3:], np.median(np.abs(err)), np.median(err[size <= 2]), np.median(err[size >= 16])))
            scales = np.mean([r[0] for r in res], axis=0)
            print(f"{drift:>+6.2f} {name:<12} {', '.join(f'{v:.3f}' for v in scales):<34} "
                  f"{np.mean([r[1] for r in res]):>8.2f}% {np.mean([r[2] for r in res]):>+10.2f}% "
                  f"{np.mean([r[3] for r in res]):>+6.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

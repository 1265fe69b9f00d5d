"""How well do imported per-op profiles predict measured static-batch step times? (Splitwise data)

    .venv/bin/python benchmarks/splitwise_check.py [--source aiconfigurator|h100-microbench]
        [--hardware h100-80gb|a100-80gb] [--tp 2 4 8] [--host eager|graphs|none] [--kernels vidur|native]
        [--csv OUT.csv]

For each TP it imports a Llama-2-70B profile (nothing is fitted to the Splitwise data: it is the
test set), predicts every measured point of ../shared/data/groundtruth/splitwise-static-batches
(prefill of the whole batch; one decode step at the mean KV length), and prints each point's
measured and predicted ms and the signed error, then the median / p90 absolute error per TP and
phase. The issue's target is a median within 15%. `--host` picks the host time added per step
(`calibrate.importers.derived.host_overhead_op`, constants from `sim.latency.RooflineConstants`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from calibrate.importers import import_profile  # noqa: E402
from calibrate.splitwise import HARDWARE, check, summary  # noqa: E402
from sim.latency.profiled import ProfiledLatencyModel  # noqa: E402

SHARED = REPO.parent / "shared" / "data"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="aiconfigurator", choices=("aiconfigurator", "h100-microbench"))
    ap.add_argument("--hardware", default="h100-80gb", choices=tuple(HARDWARE))
    ap.add_argument("--tp", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--host", default="eager", choices=("eager", "graphs", "none"),
                    help="host time per step added to the kernel times (default eager: the 2023 vLLM of the "
                         "Splitwise paper predates CUDA graphs and custom all-reduce)")
    ap.add_argument("--kernels", default="vidur", choices=("native", "vidur"),
                    help="layer GEMMs, elementwise ops and all-reduce: vidur (eager PyTorch + torch.distributed NCCL "
                         "of 2023-24, the Splitwise engine's software; default) or native (the source's tables)")
    ap.add_argument("--data", default=str(SHARED))
    ap.add_argument("--csv", default=None, help="also write every point to this CSV")
    args = ap.parse_args(argv)
    if not (Path(args.data) / "groundtruth" / "splitwise-static-batches").is_dir():
        print(f"splitwise data not found under {args.data}", file=sys.stderr)
        return 2
    models = {tp: ProfiledLatencyModel(import_profile(args.source, HARDWARE[args.hardware], "llama-2-70b", tp,
                                                      host=args.host, kernels=args.kernels))
              for tp in args.tp}
    rows = check(Path(args.data), models, hardware=args.hardware)
    print(f"Llama-2-70B on {args.hardware}, profile imported from {args.source}, kernels: {args.kernels}, "
          f"host time: {args.host}\n")
    print(f"{'tp':>3} {'prompt':>6} {'batch':>5} {'tokens':>6} {'phase':<8} {'measured ms':>11} {'predicted ms':>12} "
          f"{'error':>8}")
    for r in rows.itertuples():
        print(f"{r.tp:>3} {r.prompt_size:>6} {r.batch_size:>5} {r.token_size:>6} {r.phase:<8} {r.measured_ms:>11.1f} "
              f"{r.predicted_ms:>12.1f} {r.error_pct:>+7.1f}%")
    print()
    for tp in args.tp:
        part = rows[rows.tp == tp]
        for name, s in summary(part).items():
            signed = (part if name == "all" else part[part.phase == name]).error_pct.median()
            print(f"tp={tp} {name:<8} n={s['n']:>3}  median |err| {s['median_abs_pct']:5.1f}%  "
                  f"p90 |err| {s['p90_abs_pct']:5.1f}%  median signed {signed:+6.1f}%")
    s = summary(rows)["all"]
    print(f"\nall: median |err| {s['median_abs_pct']:.1f}% over {s['n']} points (target: 15%)")
    if args.csv:
        rows.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

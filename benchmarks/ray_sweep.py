"""Sweep points per minute: Vidur's workload at several rates, through `servesim sweep` on Ray.

For users who outgrow one machine: every point of a sweep is an independent simulation with its
own seed, so points spread over Ray workers (`--executor ray`; a local Ray instance here, a
cluster with `--address`). One huge cluster run stays in one process instead
(docs/results/2026-12-01-speed.md says why). The points: benchmarks/vidur_workload.toml
(10,000 requests each, `--fixed-count`) at `--rates`; the same sweep on the local process pool
(`--executor local`) is timed beside it.

    python benchmarks/ray_sweep.py                          # needs the ray extra (pip install 'servesim[ray]')
    python benchmarks/ray_sweep.py --rates 1 1.5 2 2.5 --workers 2 --num-requests 2000
Prints figures; it is not a pass/fail test.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidur_workload import CONFIG, REPO, TRACE, child_env, timed  # noqa: E402


def sweep_command(out: str, executor: str, rates: list[float], workers: int, num_requests: int) -> list[str]:
    cmd = [sys.executable, "-m", "servesim.cli", "sweep", str(CONFIG), "--grid",
           "workload.rate=" + ",".join(f"{r:g}" for r in rates), "--fixed-count", "--executor", executor,
           "--workers", str(workers), "--out", out, "--no-plot", "--no-progress",
           "--set", f"workload.num_requests={num_requests}"]
    if TRACE.is_file():
        cmd += ["--set", f"workload.trace={TRACE}"]
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--executors", nargs="+", default=["ray", "local"])
    args = parser.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        if "ray" in args.executors:
            print("ray is not installed (pip install 'servesim[ray]'); timing the other executors only")
            args.executors = [e for e in args.executors if e != "ray"]
    print(f"sweep: {len(args.rates)} points of Vidur's workload ({args.num_requests} requests each), "
          f"{args.workers} workers")
    for executor in args.executors:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                wall, cpu, _ = timed(sweep_command(tmp, executor, args.rates, args.workers, args.num_requests),
                                     REPO, child_env())
            except RuntimeError as exc:
                print(f"  {executor}: failed: {exc}")
                continue
        points = len(args.rates)
        print(f"  {executor:>6}: {wall:.1f} s wall ({cpu:.1f} s CPU in the driver and its children): "
              f"{points / wall * 60:.1f} points per minute")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

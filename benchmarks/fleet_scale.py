"""A fleet's day on one machine: 1,000,000 requests over 16 replicas behind a router, through the CLI.

Each replica is Vidur's workload replica (benchmarks/vidur_workload.toml: CodeLlama-34B on A100 TP2,
chunked 512, batch cap 128); lengths from ../shared/data/traces/azure-llm-2023 when present, else the
TOML's lognormal fit. Poisson arrivals at `--utilization` (default 80%) of the fleet's capacity:
16 x one replica's saturation rate, measured first (an overload run of one replica: its completions
per second). The timed run is what a user types, in a fresh process:

    servesim simulate benchmarks/vidur_workload.toml --set cluster.num_replicas=16 \\
        --set workload.num_requests=1000000 --set workload.rate=R --out DIR --quiet

and prints wall and CPU seconds, peak RSS (the child's max resident set), and that every request
ended. `--sizes` runs several sizes (each in its own process) to show how time and memory grow.

    python benchmarks/fleet_scale.py                        # the 1M-request, 16-replica run
    python benchmarks/fleet_scale.py --sizes 10000 100000   # smaller first, to see the trend
Prints figures; it is not a pass/fail test.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidur_workload import CONFIG, REPO, TRACE, child_env  # noqa: E402

NUM_REPLICAS = 16


def base_overrides() -> list[str]:
    return [f"workload.trace={TRACE}"] if TRACE.is_file() else []


def saturation_rate(num_requests: int = 2000) -> float:
    """One replica's completions per second when every request arrives within about a second."""
    sys.path.insert(0, str(REPO))
    from sim.config import load_config
    from sim.runner import simulate

    config = load_config(CONFIG, base_overrides() + [f"workload.num_requests={num_requests}",
                                                     f"workload.rate={num_requests}"])
    return simulate(config, stream=True).summary["throughput"]["requests_per_s"]


def fleet_run(num_requests: int, rate: float, replicas: int, router: str, keep: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = keep if keep is not None else Path(tmp) / "out"
        cmd = [sys.executable, "-m", "servesim.cli", "simulate", str(CONFIG), "--out", str(out), "--quiet"]
        for s in base_overrides() + [f"cluster.num_replicas={replicas}", f"cluster.router={router}",
                                     f"workload.num_requests={num_requests}", f"workload.rate={rate}"]:
            cmd += ["--set", s]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        summary = json.loads((out / "summary.json").read_text())
        sizes = {p.name: p.stat().st_size for p in out.iterdir()}
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "max_rss_mib": after.ru_maxrss / 1024, "summary": summary, "files_mib": sum(sizes.values()) / 2**20,
            "stderr": done.stderr.strip()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--replicas", type=int, default=NUM_REPLICAS)
    parser.add_argument("--router", default="round_robin")
    parser.add_argument("--utilization", type=float, default=0.8)
    parser.add_argument("--rate", type=float, help="the fleet's arrival rate (default: measured utilization)")
    parser.add_argument("--keep", type=Path, help="write the largest run's outputs here")
    args = parser.parse_args(argv)

    source = f"trace {TRACE.name}" if TRACE.is_file() else "lognormal fit"
    if args.rate is None:
        sat = saturation_rate()
        rate = args.utilization * args.replicas * sat
        print(f"one replica saturates at {sat:.3f} req/s; fleet of {args.replicas}: Poisson {rate:.2f} req/s "
              f"({args.utilization:.0%}); router {args.router}; lengths: {source}")
    else:
        rate = args.rate
        print(f"fleet of {args.replicas}: Poisson {rate:.2f} req/s; router {args.router}; lengths: {source}")
    print(f"{'requests':>10} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'steps':>11} {'req/CPU s':>10} "
          f"{'steps/CPU s':>12} {'finished':>10} {'files MiB':>10}")
    for n in args.sizes:
        r = fleet_run(n, rate, args.replicas, args.router, args.keep if n == max(args.sizes) else None)
        s = r["summary"]
        ended = s["num_finished"] + s["num_rejected"] + s["num_aborted"]
        print(f"{n:>10} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['max_rss_mib']:>13.0f} {s['num_steps']:>11,} "
              f"{n / r['cpu_s']:>10,.0f} {s['num_steps'] / r['cpu_s']:>12,.0f} {s['num_finished']:>10,} "
              f"{r['files_mib']:>10.0f}")
        if ended != n or s["num_requests"] != n:
            print(f"  MISSING: {n - ended} requests did not end")
        if r["stderr"]:
            print("  " + r["stderr"].replace("\n", "\n  "))
        print(f"  simulated {s['duration_s'] / 3600:.1f} h; TTFT p50/p99 {s['ttft_s']['p50'] * 1e3:.0f}/"
              f"{s['ttft_s']['p99'] * 1e3:.0f} ms; saturated: {s.get('saturated')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

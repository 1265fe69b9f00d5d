"""Time a request costs in one shared simulation as the replica count grows, per router.

Every replica gets the same load (`--rate` requests per second a replica, `--per-replica`
requests a replica), so the simulated work per request is the same at every k; what grows with k
is what a routing decision and the fast paths pay for the other replicas. Runs in process
(`sim.runner.simulate`, tables kept in memory, so the replicas share one environment), one k
after another, and prints milliseconds of CPU per request; `--profile K` prints the cProfile
top of the run at K replicas instead.

    python benchmarks/fleet_routing.py                                  # least_tokens, k = 2 8 32
    python benchmarks/fleet_routing.py --router round_robin --replicas 4 16
    python benchmarks/fleet_routing.py --profile 32
Prints figures; it is not a pass/fail test.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim.config import load_config  # noqa: E402
from sim.runner import simulate  # noqa: E402


def fleet_config(path: Path, replicas: int, router: str, rate: float, per_replica: int, extra: list[str]):
    return load_config(path, [f"cluster.num_replicas={replicas}", f"cluster.router={router}",
                              f"workload.rate={rate * replicas}",
                              f"workload.num_requests={per_replica * replicas}"] + extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "default.toml")
    parser.add_argument("--router", default="least_tokens")
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--rate", type=float, default=15.0, help="requests per second a replica")
    parser.add_argument("--per-replica", type=int, default=250, help="requests a replica")
    parser.add_argument("--set", action="append", default=[], help="further config overrides")
    parser.add_argument("--profile", type=int, metavar="K", help="profile the run at K replicas")
    args = parser.parse_args(argv)

    if args.profile is not None:
        config = fleet_config(args.config, args.profile, args.router, args.rate, args.per_replica, args.set)
        profiler = cProfile.Profile()
        profiler.runcall(simulate, config)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return 0
    print(f"{args.config.name}; router {args.router}; {args.rate:g} req/s and {args.per_replica} requests "
          f"a replica")
    print(f"{'replicas':>8} {'requests':>9} {'steps':>9} {'CPU s':>7} {'ms/request':>11} {'us/step':>8}")
    for k in args.replicas:
        config = fleet_config(args.config, k, args.router, args.rate, args.per_replica, args.set)
        t0 = time.process_time()
        result = simulate(config)
        cpu = time.process_time() - t0
        steps = result.summary["num_steps"]
        n = args.per_replica * k
        print(f"{k:>8} {n:>9} {steps:>9} {cpu:>7.1f} {cpu / n * 1e3:>11.3f} {cpu / steps * 1e6:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

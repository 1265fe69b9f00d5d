"""How fast the simulator runs: simulated requests and iterations per wall second, and peak memory.

The scenario of issue 3: 10,000 Azure-conversation requests (Llama-2-7B, H100, `chunked` with a
512-token budget, Poisson arrivals at about 80% of saturation). Lengths come from
../shared/data/traces/azure-llm-2023 when present, else from the lognormal fit shipped in
examples/azure_conv_fit.toml. Saturation is measured first: the same replica under an overload
(every request arriving within a second), throughput = finished requests / duration.

    python benchmarks/sim_speed.py                      # speed at 10,000 + memory at 2,500/5,000/10,000
    python benchmarks/sim_speed.py --profile            # + where the time goes (cProfile, top functions)
    python benchmarks/sim_speed.py --sizes 1000 2000    # other memory sizes
    python benchmarks/sim_speed.py --no-fast-decode     # the step-by-step loop (simulate(fast_decode=False))

One Python thread; CPU seconds beside wall seconds (on a shared machine the wall clock counts the
neighbours too), the least-CPU of `--repeat` runs (default 3), each after an untimed gc.collect() and
ending with a timed one (simulate() pauses the cyclic collector). Memory in a fresh subprocess per
size: the tracemalloc peak during simulate() and the max RSS.
Prints figures; it is not a pass/fail test.
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO.parent / "shared" / "data" / "traces" / "azure-llm-2023" / "data" / "AzureLLMInferenceTrace_conv.csv"
FIT = REPO / "examples" / "azure_conv_fit.toml"
UTILIZATION = 0.8


def base_overrides() -> list[str]:
    """Lengths from the real trace (rows reused in order) when it is here, else the shipped fit."""
    if TRACE.is_file():
        return [f"workload.trace={TRACE}", "workload.kind=poisson"]
    return []


def make_config(num_requests: int, rate: float):
    from sim.config import load_config

    return load_config(FIT, base_overrides() + [f"workload.num_requests={num_requests}", f"workload.rate={rate}"])


def saturation_rate(num_requests: int = 2000, fast_decode: bool = True) -> float:
    """Requests/s the replica sustains: an overload run's completions per second."""
    from sim.runner import simulate

    s = simulate(make_config(num_requests, num_requests), fast_decode=fast_decode).summary  # all arrive within ~1 s
    return s["throughput"]["requests_per_s"]


def timed_run(num_requests: int, rate: float, profile: bool = False, repeat: int = 1,
              fast_decode: bool = True) -> dict:
    from sim.runner import simulate

    config = make_config(num_requests, rate)
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        simulate(config, fast_decode=fast_decode)
        prof.disable()
        stats = pstats.Stats(prof).sort_stats("tottime")
        print("\nprofile (top 25 by own time):")
        stats.print_stats(25)
    runs = []
    summary = None
    for _ in range(max(repeat, 1)):
        gc.collect()  # start from a clean heap, as a fresh process would: no earlier run's leftovers
        t0, c0 = time.perf_counter(), time.process_time()
        summary = simulate(config, fast_decode=fast_decode).summary
        gc.collect()  # timed too: simulate() pauses the collector, so its work comes due here
        runs.append((time.process_time() - c0, time.perf_counter() - t0))
    cpu, wall = min(runs)
    s = summary
    return {"num_requests": s["num_requests"], "num_finished": s["num_finished"], "num_steps": s["num_steps"],
            "wall_s": wall, "cpu_s": cpu, "requests_per_wall_s": s["num_requests"] / wall,
            "steps_per_wall_s": s["num_steps"] / wall, "requests_per_cpu_s": s["num_requests"] / cpu,
            "steps_per_cpu_s": s["num_steps"] / cpu, "simulated_s": s["duration_s"],
            "kv_usage_mean": s["kv_usage"]["mean"], "num_preemptions": s["num_preemptions"],
            "ttft_p50_s": s["ttft_s"]["p50"], "all_cpu_s": [c for c, _ in runs]}


def memory_run(num_requests: int, rate: float, fast_decode: bool = True) -> dict:
    """In this (fresh) process: peak traced Python memory during simulate(), and max RSS."""
    import tracemalloc

    from sim.runner import simulate

    config = make_config(num_requests, rate)
    tracemalloc.start()
    simulate(config, fast_decode=fast_decode)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"num_requests": num_requests, "peak_traced_mib": peak / 2**20, "max_rss_mib": rss_kib / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2500, 5000, 10_000])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the least CPU time is reported")
    parser.add_argument("--no-fast-decode", action="store_true",
                        help="the step-by-step loop (simulate(fast_decode=False), also for the memory runs)")
    parser.add_argument("--memory-child", nargs=2, type=float, metavar=("N", "RATE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_run(int(args.memory_child[0]), args.memory_child[1], not args.no_fast_decode)))
        return 0

    fast = not args.no_fast_decode
    source = f"trace {TRACE.name}" if TRACE.is_file() else f"lognormal fit {FIT.name}"
    sat = saturation_rate(fast_decode=fast)
    rate = UTILIZATION * sat
    print(f"Llama-2-7B on H100-SXM, chunked, budget 512; lengths: {source}")
    print(f"saturation {sat:.2f} req/s; running Poisson at {rate:.2f} req/s ({UTILIZATION:.0%}); "
          f"fast decode {'off' if args.no_fast_decode else 'on'}")
    r = timed_run(args.num_requests, rate, args.profile, args.repeat, fast)
    print(f"\n{r['num_requests']} requests ({r['num_finished']} finished), {r['num_steps']} iterations, "
          f"{r['simulated_s']:.0f} s simulated in {r['wall_s']:.2f} s wall ({r['cpu_s']:.2f} s CPU; "
          f"best of {len(r['all_cpu_s'])}: {', '.join(f'{c:.2f}' for c in r['all_cpu_s'])} s CPU)")
    print(f"  {r['requests_per_wall_s']:,.0f} simulated requests / wall s  ({r['requests_per_cpu_s']:,.0f} / CPU s)")
    print(f"  {r['steps_per_wall_s']:,.0f} iterations / wall s  ({r['steps_per_cpu_s']:,.0f} / CPU s)")
    print(f"  (KV usage mean {r['kv_usage_mean']:.0%}, {r['num_preemptions']} preemptions, "
          f"TTFT p50 {r['ttft_p50_s'] * 1e3:.0f} ms)")

    print("\npeak memory (fresh process per size):")
    print(f"{'requests':>10} {'traced MiB':>12} {'MiB/1k req':>12} {'max RSS MiB':>12}")
    for n in args.sizes:
        child = [sys.executable, __file__, "--memory-child", str(n), str(rate)] + ([] if fast else ["--no-fast-decode"])
        out = subprocess.run(child, capture_output=True, text=True, check=True)
        m = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{n:>10} {m['peak_traced_mib']:>12.1f} {m['peak_traced_mib'] / n * 1000:>12.2f} "
              f"{m['max_rss_mib']:>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

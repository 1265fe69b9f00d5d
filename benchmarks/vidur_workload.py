"""Vidur's own workload through the CLI with outputs, timed end to end, beside Vidur when it is here.

The workload (benchmarks/vidur_workload.toml): 10,000 Azure-conversation requests, CodeLlama-34B on
A100 TP2, Poisson 2/s, chunked prefill (Sarathi) with a 512-token chunk, batch cap 128. Lengths from
../shared/data/traces/azure-llm-2023 when present, else the lognormal fit in the TOML. Each timed run
is what a user types, in a fresh process: `servesim simulate benchmarks/vidur_workload.toml --out DIR
--quiet` (start-up, simulation and every output file included).

Vidur runs in the same session when it is here: a checkout named by $VIDUR_DIR (its data/ holds
the profiling tables and processed traces Vidur needs; `pip install vidur` alone lacks them, so an
installed package is used only when its checkout is found beside it), as `python -m vidur.main`
with the same workload (Vidur's own flags). Otherwise the ratio is against Vidur's time recorded
for this workload on this machine: 46.5 s (RECORDED_VIDUR_S, measured 2026-11-30).

    python benchmarks/vidur_workload.py                 # best of 3, ours (and Vidur's when here)
    python benchmarks/vidur_workload.py --profile       # + where the time goes (start-up, run, writing)
    python benchmarks/vidur_workload.py --repeat 5 --plot

Wall and CPU seconds (user + system of the child) are both printed: on a shared machine the wall
clock also counts waiting for a core; the run with the least CPU time is reported, all listed.
Prints figures; it is not a pass/fail test.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG = Path(__file__).resolve().with_suffix(".toml")
TRACE = REPO.parent / "shared" / "data" / "traces" / "azure-llm-2023" / "data" / "AzureLLMInferenceTrace_conv.csv"
RECORDED_VIDUR_S = 46.5
RECORDED_VIDUR_DATE = "2026-11-30"
NUM_REQUESTS, QPS, CHUNK, BATCH_CAP, MAX_TOKENS = 10_000, 2.0, 512, 128, 4096


def overrides(num_requests: int) -> list[str]:
    sets = [f"workload.num_requests={num_requests}"]
    if TRACE.is_file():
        sets.append(f"workload.trace={TRACE}")
    return sets


def servesim_command(out_dir: str, num_requests: int, plot: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "servesim.cli", "simulate", str(CONFIG), "--out", out_dir, "--quiet"]
    for s in overrides(num_requests):
        cmd += ["--set", s]
    return cmd + (["--plot"] if plot else [])


def timed(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s, max RSS KiB) of one child process; raises with its stderr when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def best_of(cmd_for, repeat: int, cwd: Path | None = None, env: dict | None = None) -> dict:
    runs = []
    for _ in range(max(repeat, 1)):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(timed(cmd_for(tmp), cwd, env))
    wall, cpu, _ = min(runs, key=lambda r: r[1])
    return {"wall_s": wall, "cpu_s": cpu, "walls": [r[0] for r in runs], "cpus": [r[1] for r in runs],
            "max_rss_mib": max(r[2] for r in runs) / 1024}


# --- Vidur ------------------------------------------------------------------------------------------
def vidur_checkout() -> Path | None:
    """A Vidur checkout ($VIDUR_DIR, or the one an installed vidur package was installed from)."""
    if os.environ.get("VIDUR_DIR"):
        path = Path(os.environ["VIDUR_DIR"]).expanduser()
        return path if (path / "vidur").is_dir() else None
    try:
        import importlib.util

        spec = importlib.util.find_spec("vidur")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).resolve().parent.parent
    return root if (root / "data" / "profiling").is_dir() else None


def vidur_lengths_csv(path: Path) -> Path:
    """Our Azure conversation lengths in Vidur's processed-trace columns (num_prefill/decode_tokens)."""
    import csv

    with open(TRACE, newline="") as src, open(path, "w", newline="") as dst:
        w = csv.writer(dst)
        w.writerow(["num_prefill_tokens", "num_decode_tokens"])
        for row in csv.DictReader(src):
            w.writerow([row["ContextTokens"], row["GeneratedTokens"]])
    return path


def vidur_command(out_dir: str, checkout: Path, lengths: Path | None) -> list[str]:
    trace = str(lengths) if lengths is not None else "./data/processed_traces/splitwise_conv.csv"
    return [sys.executable, "-m", "vidur.main",
            "--replica_config_device", "a100", "--replica_config_model_name", "codellama/CodeLlama-34b-Instruct-hf",
            "--replica_config_tensor_parallel_size", "2", "--cluster_config_num_replicas", "1",
            "--request_generator_config_type", "synthetic",
            "--synthetic_request_generator_config_num_requests", str(NUM_REQUESTS),
            "--length_generator_config_type", "trace", "--trace_request_length_generator_config_trace_file", trace,
            "--trace_request_length_generator_config_max_tokens", str(MAX_TOKENS),
            "--interval_generator_config_type", "poisson", "--poisson_request_interval_generator_config_qps", str(QPS),
            "--replica_scheduler_config_type", "sarathi", "--sarathi_scheduler_config_chunk_size", str(CHUNK),
            "--sarathi_scheduler_config_batch_size_cap", str(BATCH_CAP), "--metrics_config_output_dir", out_dir]


# --- where the time goes ----------------------------------------------------------------------------
PROFILE_CHILD = r"""
import builtins, sys, time
t_start = time.process_time()
clock = {"imports": 0.0, "batches": 0.0, "batches_at_close": 0.0, "writing": 0.0, "closing": 0.0}
depth, in_close = [0], [False]
real_import = builtins.__import__
def timed_import(*args, **kwargs):  # outermost imports only: their time includes what they import
    depth[0] += 1
    t = time.process_time()
    try:
        return real_import(*args, **kwargs)
    finally:
        depth[0] -= 1
        if depth[0] == 0:
            clock["imports"] += time.process_time() - t
builtins.__import__ = timed_import
import servesim.cli, records.stream, records.table_writer, sim.runner
def timer(owner, name, key, flag=None):
    real = getattr(owner, name)
    def wrapped(*args, **kwargs):
        if flag is not None:
            flag[0] = True
        t = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            dt = time.process_time() - t
            clock[key] += dt
            if key == "batches" and in_close[0]:
                clock["batches_at_close"] += dt
            if flag is not None:
                flag[0] = False
    setattr(owner, name, wrapped)
timer(records.stream.StreamingRecorder, "_flush_requests", "batches")
timer(records.stream.StreamingRecorder, "_flush_steps", "batches")
timer(records.table_writer.TableWriter, "write", "writing")
timer(records.table_writer.TableWriter, "close", "writing")
timer(sim.runner, "finish_run", "closing", in_close)
code = servesim.cli.main(sys.argv[1:])
clock["total"] = time.process_time() - t_start
print("PROFILE " + " ".join(f"{k}={v}" for k, v in clock.items()))
sys.exit(code)
"""


def profile(num_requests: int, plot: bool) -> None:
    """One run with CPU timers around its phases, in a fresh process (no profiler, so the seconds are
    what the phases cost; CPU, not wall, as the machine is shared):
    imports (wherever they happen), the simulation, the request/step batches (rows, summary
    aggregates), writing the files (inside the batches and at the end), and closing."""
    with tempfile.TemporaryDirectory() as tmp:
        args = servesim_command(tmp, num_requests, plot)[3:]
        interpreter = timed([sys.executable, "-c", "pass"])[1]
        done = subprocess.run([sys.executable, "-c", PROFILE_CHILD] + args, capture_output=True, text=True,
                              env=child_env(), cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("PROFILE "))
    f = {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    batches_in_run = f["batches"] - f["batches_at_close"]
    rows = [("interpreter start (python -c pass)", interpreter),
            ("imports (start-up; the lazy ones included)", f["imports"]),
            ("simulation", f["total"] - f["imports"] - batches_in_run - f["closing"]),
            ("request/step batches: rows and summary aggregates", f["batches"] - f["writing"]),
            ("writing requests/steps CSV + Parquet", f["writing"]),
            ("closing: summary, summary.json, config.toml, plot", f["closing"] - f["batches_at_close"])]
    total = interpreter + f["total"]
    print(f"\nwhere the time goes (one run, CPU seconds, {total:.2f} s in all):")
    for label, v in rows:
        print(f"  {label:52} {v:6.2f} s  {v / total:5.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs each; the least CPU time is reported")
    parser.add_argument("--num-requests", type=int, default=NUM_REQUESTS)
    parser.add_argument("--plot", action="store_true", help="our runs also draw timeline.png")
    parser.add_argument("--profile", action="store_true", help="also one profiled run: where the time goes")
    parser.add_argument("--no-vidur", action="store_true", help="skip Vidur even when it is here")
    args = parser.parse_args(argv)

    source = f"trace {TRACE.name}" if TRACE.is_file() else "lognormal fit in vidur_workload.toml"
    print(f"Vidur's workload: {args.num_requests} requests, CodeLlama-34B, A100 TP2, Poisson {QPS}/s, "
          f"chunk {CHUNK}, batch cap {BATCH_CAP}; lengths: {source}")
    env = child_env()
    startup = best_of(lambda tmp: [sys.executable, "-m", "servesim.cli", "simulate", str(CONFIG), "--out", tmp,
                                   "--quiet", "--set", "workload.num_requests=1"], args.repeat, REPO, env)
    ours = best_of(lambda tmp: servesim_command(tmp, args.num_requests, args.plot), args.repeat, REPO, env)
    print(f"servesim simulate --out (CLI, all outputs): {ours['wall_s']:.2f} s wall, {ours['cpu_s']:.2f} s CPU "
          f"(best of {len(ours['cpus'])}; CPU {', '.join(f'{c:.2f}' for c in ours['cpus'])} s; "
          f"wall {', '.join(f'{w:.2f}' for w in ours['walls'])} s); max RSS {ours['max_rss_mib']:.0f} MiB")
    print(f"  start-up (the same command with 1 request): {startup['wall_s']:.2f} s wall, {startup['cpu_s']:.2f} s CPU")

    checkout = None if args.no_vidur else vidur_checkout()
    if checkout is not None:
        with tempfile.TemporaryDirectory() as tmp:
            lengths = vidur_lengths_csv(Path(tmp) / "azure_conv.csv") if TRACE.is_file() else None
            vidur = best_of(lambda out: vidur_command(out, checkout, lengths), args.repeat, checkout)
        print(f"Vidur ({checkout}): {vidur['wall_s']:.2f} s wall, {vidur['cpu_s']:.2f} s CPU (best of "
              f"{len(vidur['cpus'])})")
        print(f"ratio (Vidur / servesim): {vidur['wall_s'] / ours['wall_s']:.1f}x wall, "
              f"{vidur['cpu_s'] / ours['cpu_s']:.1f}x CPU")
    else:
        print(f"Vidur: not here (set VIDUR_DIR to a checkout); recorded {RECORDED_VIDUR_S} s on "
              f"{RECORDED_VIDUR_DATE}")
        print(f"ratio (recorded Vidur / servesim): {RECORDED_VIDUR_S / ours['wall_s']:.1f}x wall, "
              f"{RECORDED_VIDUR_S / ours['cpu_s']:.1f}x CPU")
    if args.profile:
        profile(args.num_requests, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

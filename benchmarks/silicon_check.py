"""Per-op model vs measured TPOT of real H100 deployments: aiconfigurator-core's silicon points.

`aiconfigurator_core/systems/silicon_sample.csv` (Apache-2.0, in the installed extra) holds measured
TTFT / TPOT of vLLM deployments at a fixed concurrency, prompt and output length. This benchmark
simulates the bf16 dense points of one system and backend (default: H100 SXM, vLLM, Qwen/Qwen3-32B
at vLLM 0.12.0, TP 2/4/8, concurrency 8-128) with the step model `reproduce --fit source` gives an
H100 vLLM v1 run: aiconfigurator's per-op data, the compute factor and host time per step of the
shipped idle-engine layer (`fidelity.predict.compute_prior`, `host_prior`). It is a check of the
per-op sum, not a fit: nothing here is tuned on these points. The model's config.json comes from
the package's `model_configs` with its architecture read as Llama (Qwen3's q/k norms are not
modelled: two small elementwise ops a layer). The client is a closed loop of `concurrency` users.

    python benchmarks/silicon_check.py [--model Qwen/Qwen3-32B] [--tp 2,4,8] [--min-osl 512] [--limit N]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen3-32B")
    parser.add_argument("--system", default="h100_sxm")
    parser.add_argument("--backend-version", default="0.12.0")
    parser.add_argument("--tp", default="2,4,8")
    parser.add_argument("--min-osl", type=int, default=512, help="longer outputs: less prefill in each TPOT")
    parser.add_argument("--limit", type=int, default=0, help="at most this many points (0: all)")
    args = parser.parse_args(argv)
    try:
        from calibrate.importers.aiconfigurator import package_dir
        root = package_dir()
    except Exception as exc:  # noqa: BLE001 - the extra is optional
        print(f"no aiconfigurator-core: {exc}", file=sys.stderr)
        return 0
    import pandas as pd

    from calibrate.fit import fit_op
    from calibrate.importers.aiconfigurator import import_aiconfigurator
    from fidelity.predict import compute_prior, host_prior
    from sim.config import load_config
    from sim.runner import simulate

    pts = pd.read_csv(root / "systems" / "silicon_sample.csv")
    tps = [int(t) for t in args.tp.split(",")]
    pts = pts[(pts.system == args.system) & (pts.backend == "vllm") & (pts.model_path == args.model)
              & (pts.backend_version.astype(str) == args.backend_version) & pts.precision.isna()  # bf16 checkpoint
              & (pts["mode"] == "agg") & pts.tp_size.isin(tps) & (pts.osl >= args.min_osl)]
    pts = pts.sort_values(["tp_size", "isl", "osl", "batch_size"])
    if args.limit:
        pts = pts.head(args.limit)
    if pts.empty:
        print("no matching silicon points", file=sys.stderr)
        return 0
    cfg = json.loads((root / "model_configs" / f"{args.model.replace('/', '--')}_config.json").read_text())
    cfg.update(model_type="llama", architectures=["LlamaForCausalLM"])
    work = Path(tempfile.mkdtemp(prefix="silicon-"))
    (work / "config.json").write_text(json.dumps(cfg))
    gpu = "H100" if args.system.startswith("h100") else args.system.split("_")[0].upper()
    host, factor = host_prior("aiconfigurator", None, gpu), compute_prior(None, gpu)
    print(f"{args.model} on {args.system}, vLLM {args.backend_version}: {len(pts)} points; host "
          f"{host.schedule_s * 1e3:.2f} ms/step + {host.schedule_per_seq_s * 1e6:.0f} us/seq, compute factor {factor:.3f}")
    rows, profiles = [], {}
    for p in pts.itertuples():
        tp, c, isl, osl = int(p.tp_size), int(p.batch_size), int(p.isl), int(p.osl)
        if tp not in profiles:
            prof = import_aiconfigurator(gpu, str(work / "config.json"), tp, compute_factor=factor)
            prof.ops["step_overhead"] = fit_op("step_overhead", [
                [n, host.schedule_s + n * host.schedule_per_seq_s] for n in (1, 16, 256, 4096)], source="host_prior")
            profiles[tp] = prof.save(work / f"tp{tp}.json")
        over = [f"model.name={work / 'config.json'}", "hardware.gpu=H100-SXM", f"hardware.tp={tp}",
                "hardware.latency=profiled", f"hardware.profile={profiles[tp]}", "scheduler.policy=vllm",
                # vLLM 0.11-0.13 API server on a large GPU (policies.presets), async scheduling off
                "scheduler.max_num_batched_tokens=8192", "scheduler.max_num_seqs=256",
                f"scheduler.max_model_len={isl + osl + 16}", "workload.kind=closed_loop", f"workload.num_users={c}",
                "workload.think_time=0.0", f"workload.num_requests={max(2 * c, 16)}",
                f"workload.prompt_len={{kind='constant', value={isl}}}",
                f"workload.output_len={{kind='constant', value={osl}}}"]
        s = simulate(load_config({}, over)).summary
        pred = s["tpot_s"]["mean"] * 1e3
        rows.append(dict(tp=tp, isl=isl, osl=osl, concurrency=c, tpot_ms=round(p.silicon_tpot_ms, 2),
                         pred_ms=round(pred, 2), err_pct=round(100 * (pred / p.silicon_tpot_ms - 1), 1),
                         preemptions=s["num_preemptions"]))
        print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    print(df.to_string(index=False))
    print(f"median error {df.err_pct.median():+.1f}% (|error| {df.err_pct.abs().median():.1f}%)")
    print("by TP:", df.groupby("tp").err_pct.median().to_dict(), " by concurrency:",
          df.groupby("concurrency").err_pct.median().to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())

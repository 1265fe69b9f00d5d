"""How well do imported per-op profiles predict measured static-batch step times? (Splitwise data)

    .venv/bin/python benchmarks/splitwise_check.py [--source aiconfigurator|h100-microbench] [--tp 2 4 8]
        [--hardware h100-80gb|a100-80gb] [--host eager-launch|eager|graphs|none] [--kernels vidur|native]
        [--raw-grid] [--calls-per-layer N] [--call-us US] [--fit-on GPU] [--csv OUT.csv] [--plot OUT.png]
    .venv/bin/python benchmarks/splitwise_check.py --write-terms

For each TP it imports a Llama-2-70B profile (`calibrate.importers.import_profile`, as `servesim
calibrate import`), predicts each point of ../shared/data/groundtruth/splitwise-static-batches (the
test set: prefill of the whole batch; one decode step at the mean KV length), prints each point's
error, then the median / p90 per TP and phase (target: median within 15%). `--host eager-launch`
(default): `sim.latency.eager.EagerLatencyModel`, its launch path not fitted (`--calls-per-layer` /
`--call-us` replace `calibrate.importers.eager_launch`'s inputs), the host work outside the forward
fitted **leave one TP out** (each TP scored with terms fitted on the others, printed per TP for the
CLI's `--host-terms`) or with `--fit-on` on the other machine's rows only. `--raw-grid`: Vidur
grids keep their last slope (`calibrate.importers.beyond_grid`). `--write-terms` fits each
machine's host terms on all its TPs over aiconfigurator's kernels and writes them for the eager
engine model of runs without CUDA graphs (`fidelity.eager_host.EAGER_HOST`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from calibrate.importers import import_profile  # noqa: E402
from fidelity.eager_host import EAGER_HOST, eager_host, write_terms  # noqa: E402
from fidelity.sources.splitwise import HARDWARE, check, held_out_check, other_hardware_check, summary  # noqa: E402
from sim.latency.profiled import ProfiledLatencyModel  # noqa: E402

SHARED = REPO.parent / "shared" / "data"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="aiconfigurator", choices=("aiconfigurator", "h100-microbench"))
    ap.add_argument("--hardware", default="h100-80gb", choices=tuple(HARDWARE))
    ap.add_argument("--tp", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--host", default="eager-launch", choices=("eager-launch", "eager", "graphs", "none"),
                    help="host time: eager-launch (default: launch path overlapped with the GPU, host work "
                         "outside the forward fitted leave-one-TP-out), or the additive constants of "
                         "import_profile (eager, graphs) or none")
    ap.add_argument("--kernels", default="vidur", choices=("native", "vidur"),
                    help="layer GEMMs, elementwise ops and all-reduce: vidur (eager PyTorch + torch.distributed NCCL "
                         "of 2023-24, the Splitwise engine's software; default) or native (the source's tables)")
    ap.add_argument("--raw-grid", action="store_true",
                    help="keep the last-segment extrapolation of dense Vidur grids beyond 4096 tokens")
    ap.add_argument("--calls-per-layer", type=int, default=None,
                    help="eager-launch: kernel-issuing op calls a layer (default 14, see calibrate.importers.eager_launch)")
    ap.add_argument("--call-us", type=float, default=None,
                    help="eager-launch: host time of one op call in us (default: measured for the GPU's node)")
    ap.add_argument("--fit-on", default=None, choices=tuple(HARDWARE),
                    help="eager-launch: fit the host terms on this other machine's rows (all TPs)")
    ap.add_argument("--data", default=str(SHARED))
    ap.add_argument("--csv", default=None, help="also write every point to this CSV")
    ap.add_argument("--plot", default=None, help="also plot predicted against measured ms (PNG)")
    ap.add_argument("--write-terms", action="store_true",
                    help=f"fit each machine's host terms on all its TPs over aiconfigurator's kernels, write them to "
                         f"{EAGER_HOST.relative_to(REPO)} (fidelity.eager_host) and exit")
    args = ap.parse_args(argv)
    if not (Path(args.data) / "groundtruth" / "splitwise-static-batches").is_dir():
        print(f"splitwise data not found under {args.data}", file=sys.stderr)
        return 2
    if args.write_terms:
        data = write_terms(Path(args.data), EAGER_HOST, tuple(args.tp))
        for gpu, entry in data["machines"].items():
            errors = ", ".join(f"x{f} {e:.1f}%" for f, e in entry["held_out_median_abs_pct_by_compute_factor"].items())
            print(f"{gpu}: held out one TP at a time, median |error| by compute factor: {errors}")
            print(f"{gpu}: {eager_host(gpu).describe()}, {entry['fitted_on']}")
        print(f"wrote {EAGER_HOST}")
        return 0
    launch = args.host == "eager-launch"
    if args.fit_on and (args.fit_on == args.hardware or not launch):
        print("--fit-on needs --host eager-launch and the other machine", file=sys.stderr)
        return 2

    def profiles_for(hardware):
        gpu = HARDWARE[hardware]
        out = {}
        for tp in tqdm(args.tp, desc=f"import {hardware} profiles", unit="tp"):
            extra = dict(call_s=args.call_us * 1e-6 if args.call_us else None,
                         calls_per_layer=args.calls_per_layer) if launch else {}
            out[tp] = import_profile(args.source, gpu, "llama-2-70b", tp, host=args.host, kernels=args.kernels,
                                     extend_grids=not args.raw_grid, **extra)
        return out

    profiles = profiles_for(args.hardware)
    terms = {}
    if launch and args.fit_on:
        rows, terms = other_hardware_check(Path(args.data), profiles, args.hardware, profiles_for(args.fit_on),
                                           args.fit_on)
    elif launch:
        if len(args.tp) < 2:
            print("--host eager-launch fits its host terms on the other TPs: give at least two", file=sys.stderr)
            return 2
        rows, terms = held_out_check(Path(args.data), profiles, hardware=args.hardware)
    else:
        rows = check(Path(args.data), {tp: ProfiledLatencyModel(p) for tp, p in profiles.items()},
                     hardware=args.hardware)
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
    where = f"on {args.fit_on} (all TPs)" if args.fit_on else "on the other TPs"
    for tp, t in terms.items():
        print(f"tp={tp}: launch path {profiles[tp].meta['eager_launch']['launch_s'] * 1e3:.1f} ms (not fitted); "
              f"fitted {where}: {t['step_s'] * 1e3:.2f} ms/step + {t['per_seq_s'] * 1e3:.3f} ms/seq "
              f"+ {t['prefill_s'] * 1e3:.2f} ms/prompt step")
    phases = "  ".join(f"{n} {v['median_abs_pct']:.1f}%" for n, v in summary(rows).items() if n != "all")
    print(f"\nall: median |err| {s['median_abs_pct']:.1f}% over {s['n']} points (target: 15%; {phases})"
          + (f", host terms fitted {where}" if launch else ""))
    if args.csv:
        rows.to_csv(args.csv, index=False)
    if args.plot:
        plot(rows, args.plot, f"Llama-2-70B on {args.hardware}: {args.kernels} kernels, host {args.host}")
    return 0


def plot(rows, path: str, title: str) -> None:
    """Predicted against measured step time, log-log, one colour per TP, one marker per phase; the
    grey band is the 15% target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo, hi = rows[["measured_ms", "predicted_ms"]].min().min() * 0.8, rows[["measured_ms", "predicted_ms"]].max().max() * 1.2
    x = np.geomspace(lo, hi, 50)
    ax.fill_between(x, x * 0.85, x * 1.15, color="0.9", label="within 15%")
    ax.plot(x, x, color="0.5", lw=0.8)
    for (tp, phase), part in rows.groupby(["tp", "phase"]):
        ax.scatter(part.measured_ms, part.predicted_ms, s=18, marker="o" if phase == "decode" else "^",
                   color={2: "tab:blue", 4: "tab:orange", 8: "tab:green"}.get(tp, "k"), label=f"TP{tp} {phase}")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured ms (Splitwise)",
           ylabel="predicted ms", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    raise SystemExit(main())

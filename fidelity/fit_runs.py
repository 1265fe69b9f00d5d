"""`servesim calibrate fit-runs RUN_DIR... --out overhead.json`: fit host-overhead terms to real runs.

BLIS-style: the engine's per-step host work (scheduling, sampling) and per-request front end are
named terms (`fidelity.host_overhead`), fitted by bounded least squares to the runs' measured
per-request TTFT, TPOT and E2E (`fidelity.overhead_fit`), simulating the runs again with the
new terms for `--iterations` rounds. The runs are split into a training and a test set (`--test`
names the test runs; by default every `--test-every`-th run by name is held out); both errors are
reported, and the fitted terms are saved as a profile layer that names the runs it came from:

    {"format": "servesim-overhead", "version": 1, "overhead": {term: value},
     "fitted_on": [run names], "tested_on": [...], "train_error": {...}, "test_error": {...}, ...}

`servesim reproduce --overhead FILE` applies such a layer and leaves its training runs out of the score.
"""
from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np

from policies import ConfigError
from policies.config import write_json

FORMAT = "servesim-overhead"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (or folders holding several runs)")
    parser.add_argument("--out", required=True, metavar="FILE", help="where to write the fitted layer (JSON)")
    parser.add_argument("--test", nargs="*", default=None, metavar="RUN_DIR",
                        help="held-out runs (folders); default: every --test-every-th run by name")
    parser.add_argument("--test-every", type=int, default=4, metavar="K",
                        help="hold out every K-th training candidate when --test is not given (default 4; 0 = none)")
    parser.add_argument("--iterations", type=int, default=2, help="simulate -> fit rounds (default 2)")
    parser.add_argument("--gpu", help="GPU for runs that do not name one (default H100)")
    parser.add_argument("--gpu-model", default="auto",
                        choices=("auto", "layer-profile", "distserve", "aiconfigurator", "roofline"))
    parser.add_argument("--quiet", action="store_true")


def split_runs(runs: list, test: list | None, every: int) -> tuple[list, list]:
    """(train, test): the named test runs, or every `every`-th run in name order (the 2nd, 6th, ...)."""
    if test is not None:
        names = {r.name for r in test}
        return [r for r in runs if r.name not in names], list(test)
    if every <= 0 or len(runs) < 2:
        return list(runs), []
    ordered = sorted(runs, key=lambda r: r.name)
    held = [r for i, r in enumerate(ordered) if i % every == 1 % every]
    held_names = {r.name for r in held}
    return [r for r in ordered if r.name not in held_names], held


def errors(predictions: list) -> dict:
    """{run: {metric: relative error of the mean}} and the median |error| per metric."""
    from fidelity.runs import METRICS

    per_run = {}
    for p in predictions:
        m, q = p.run.measured(), p.means()
        per_run[p.run.name] = {k: (q[k] - m[k]) / m[k] for k in METRICS if m[k]}
    medians = {k: float(np.median([abs(e[k]) for e in per_run.values() if k in e])) for k in METRICS
               if any(k in e for e in per_run.values())}
    return {"per_run": per_run, "median_abs": medians}


def fit_runs(train: list, iterations: int = 2, gpu: str | None = None, gpu_model: str = "auto", progress: bool = True):
    """(fitted HostOverhead, the last round's predictions of the training runs)."""
    from tqdm import tqdm

    from fidelity.overhead_fit import fit_overhead, run_system
    from fidelity.predict import predict_run
    from fidelity.reproduce import fit_terms_for

    overhead = None  # the first round simulates with the GPU model's host prior
    preds = []
    for it in range(max(1, iterations)):
        preds = [predict_run(r, overhead, gpu=gpu, gpu_model=gpu_model)
                 for r in tqdm(train, desc=f"fit round {it + 1}", unit="run", disable=not progress, leave=False)]
        systems = [run_system(p, p.run.requests) for p in preds if p.workload == "replay" and p.run.has_per_request]
        if not systems:
            raise ConfigError("runs: no training run has per-request measurements to fit on")
        overhead = fit_overhead(systems, **fit_terms_for(preds[0].gpu_model))
    preds = [predict_run(r, overhead, gpu=gpu, gpu_model=gpu_model) for r in train]
    return overhead, preds


def run(args: argparse.Namespace) -> int:
    from fidelity.predict import predict_run
    from fidelity.run_folders import find_runs

    runs = [r for d in args.runs for r in find_runs(Path(d))]
    if not runs:
        raise FileNotFoundError(f"runs: no runs found in {', '.join(args.runs)}")
    test = [r for d in args.test for r in find_runs(Path(d))] if args.test is not None else None
    train, held = split_runs(runs, test, args.test_every)
    if not train:
        raise ConfigError("runs: every run is in the test set; nothing is left to fit on")
    overhead, train_preds = fit_runs(train, args.iterations, args.gpu, args.gpu_model, progress=not args.quiet)
    test_preds = [predict_run(r, overhead, gpu=args.gpu, gpu_model=args.gpu_model) for r in held]
    layer = {
        "format": FORMAT, "version": 1,
        "overhead": overhead.to_dict(),
        "fitted_on": [r.name for r in train], "tested_on": [r.name for r in held],
        "sources": sorted({r.source for r in train}),
        "gpu_models": sorted({p.gpu_model for p in train_preds}),
        "train_error": errors(train_preds), "test_error": errors(test_preds) if test_preds else None,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    out = write_json(args.out, layer)
    if not args.quiet:
        print("fitted terms: " + ", ".join(f"{k}={v:.4g}" for k, v in overhead.to_dict().items()))
        for label, e in (("train", layer["train_error"]), ("test", layer["test_error"])):
            if e:
                print(f"{label} ({len(e['per_run'])} runs) median |error|: "
                      + ", ".join(f"{k} {100 * v:.1f}%" for k, v in e["median_abs"].items()))
        print(f"wrote {out}")
    return 0

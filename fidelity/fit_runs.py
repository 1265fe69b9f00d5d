"""Host-overhead terms fitted to real runs (`servesim calibrate fit-runs RUN_DIR... --out overhead.json`).

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

import datetime as dt
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fidelity.overhead_fit import fit_overhead, run_system
from fidelity.predict import predict_run
from fidelity.reproduce import fit_terms_for
from fidelity.run_folders import find_runs
from fidelity.runs import METRICS
from policies import ConfigError

FORMAT = "servesim-overhead"


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
    per_run = {}
    for p in predictions:
        m, q = p.run.measured(), p.means()
        per_run[p.run.name] = {k: (q[k] - m[k]) / m[k] for k in METRICS if m[k]}
    medians = {k: float(np.median([abs(e[k]) for e in per_run.values() if k in e])) for k in METRICS
               if any(k in e for e in per_run.values())}
    return {"per_run": per_run, "median_abs": medians}


def fit_runs(train: list, iterations: int = 2, gpu: str | None = None, gpu_model: str = "auto", progress: bool = True):
    """(fitted HostOverhead, the last round's predictions of the training runs)."""
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


def fit_layer(run_dirs: list, test_dirs: list | None = None, test_every: int = 4, iterations: int = 2,
              gpu: str | None = None, gpu_model: str = "auto", progress: bool = True) -> dict:
    """The overhead layer (the `servesim-overhead` dict above) fitted to the runs under `run_dirs`,
    scored on `test_dirs` (default: every `test_every`-th run by name held out)."""
    runs = [r for d in run_dirs for r in find_runs(Path(d))]
    if not runs:
        raise FileNotFoundError(f"runs: no runs found in {', '.join(map(str, run_dirs))}")
    test = [r for d in test_dirs for r in find_runs(Path(d))] if test_dirs is not None else None
    train, held = split_runs(runs, test, test_every)
    if not train:
        raise ConfigError("runs: every run is in the test set; nothing is left to fit on")
    overhead, train_preds = fit_runs(train, iterations, gpu, gpu_model, progress=progress)
    test_preds = [predict_run(r, overhead, gpu=gpu, gpu_model=gpu_model) for r in held]
    return {
        "format": FORMAT, "version": 1,
        "overhead": overhead.to_dict(),
        "fitted_on": [r.name for r in train], "tested_on": [r.name for r in held],
        "sources": sorted({r.source for r in train}),
        "gpu_models": sorted({p.gpu_model for p in train_preds}),
        "train_error": errors(train_preds), "test_error": errors(test_preds) if test_preds else None,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }

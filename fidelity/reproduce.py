"""Simulate every real run from its configuration and score the predictions (leave-one-run/source-out).

`reproduce(runs, fit=...)` simulates each run with no host overhead (the GPU model alone), then,
for `fit="loo"`, again with host terms fitted on the *other* runs of its fit group, or with its GPU
model's host prior where a fit does not earn its place; `fit="source"` lets nothing measured or
fitted on a run's own source reach it. The score of a run never uses a fit or a measurement that
saw it: that is what makes the error an estimate for a run nobody has measured yet.

The result is one row per (run, metric): measured and predicted means and the relative error;
`medians()` summarises |error| per source and over all runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm import tqdm

from fidelity.engine_settings import not_modelled
from fidelity.host_overhead import HostOverhead
from fidelity.metric_definitions import definition
from fidelity.overhead_fit import FIT_TERMS, RunSystem, fit_overhead, run_system, theta_of
from fidelity.predict import Prediction, predict_run
from fidelity.runs import DEFAULT_GPU, METRICS, RealRun, v0_engine


@dataclass
class Reproduction:
    """Scores per run and metric, the fits used, and the simulated runs."""

    table: pd.DataFrame  # run, source, metric, measured, predicted, error, fit, fitted_on, gpu_model(_note), ...
    fits: dict[str, dict] = field(default_factory=dict)  # run -> {overhead terms, fitted_on}
    group_fits: dict[str, dict] = field(default_factory=dict)  # source -> terms fitted on all its runs
    predictions: dict[str, Prediction] = field(default_factory=dict)

    def medians(self) -> pd.DataFrame:
        return medians(self.table)


def medians(table: pd.DataFrame) -> pd.DataFrame:
    """Median |relative error| per metric, per source and over all runs (rows: source, cols: metric)."""
    t = table.assign(abs_error=table["error"].abs())
    per_source = t.pivot_table(index="source", columns="metric", values="abs_error", aggfunc="median")
    overall = t.pivot_table(columns="metric", values="abs_error", aggfunc="median")
    overall.index = ["all runs"]
    counts = t.groupby("source")["run"].nunique()
    out = pd.concat([per_source, overall])
    out["num_runs"] = list(counts.reindex(per_source.index)) + [t["run"].nunique()]
    return out[[m for m in METRICS if m in out] + ["num_runs"]]


def fit_helps(systems: list[RunSystem], simulate=None, measured: dict | None = None,
              base: dict | None = None, **fit_kw) -> bool:
    """Model selection by nested leave-one-out *within the training runs*: does a fit on all but
    one of them predict that one's means better than no overhead? Needs two runs; with fewer, the
    fit is trusted.

    With `simulate(name, overhead) -> {metric: mean}` (and the `measured` and no-overhead `base`
    means per run name) each held-in run is simulated again with the nested fit: the terms act
    through queueing too (a slower step lengthens every wait behind it), which the runs' linear
    equations leave out, so a fit that explains the TPOTs of a loaded engine would otherwise be
    judged on its unqueued requests alone. Without `simulate`, linearised predictions from the
    runs' equations (no extra simulation)."""
    if len(systems) < 2:
        return True
    theta0 = theta_of(HostOverhead())
    err_fit, err_none = [], []
    for i, s in enumerate(systems):
        nested = fit_overhead(systems[:i] + systems[i + 1:], **fit_kw)
        if simulate is not None:
            pred, want, none = simulate(s.name, nested), measured[s.name], base[s.name]
            for m in METRICS:
                if np.isfinite(want.get(m, np.nan)) and want[m] > 0 and np.isfinite(pred.get(m, np.nan)):
                    err_fit.append(abs(pred[m] / want[m] - 1))
                    err_none.append(abs(none[m] / want[m] - 1))
            continue
        theta = theta_of(nested)
        for m in s.y:
            if not len(s.y[m]) or not np.mean(s.y[m]) > 0:
                continue
            want = float(np.mean(s.y[m]))
            err_fit.append(abs(float((s.A[m] @ theta).mean()) / want - 1))
            err_none.append(abs(float((s.A[m] @ theta0).mean()) / want - 1))
    return bool(err_fit) and float(np.median(err_fit)) < float(np.median(err_none))


def fit_terms_for(gpu_model: str) -> dict:
    """Keyword arguments of `fit_overhead` for a GPU step-time source (which terms a fit may move).

    DistServe's coefficients (`distserve`) are whole-iteration times of vLLM's forward pass measured
    on that GPU, so the kernels need no correction (`compute_scale` stays 1) and the per-step constant
    is in the coefficients' own intercept. What the iteration timing leaves out is the v0 engine's
    host work per sequence after the forward pass (sampling, output processing, incremental
    detokenization, streaming each request's text from the same process): `sample_per_seq_s`; and
    the front end's per-request time before the engine sees a prompt (HTTP, tokenization):
    `frontend_s` (the runs' back-to-back prefill steps follow the prefill fit, so what idle TTFTs
    add to it is front end; `fidelity.sources.distserve`). Other sources fit every term of `FIT_TERMS`.
    """
    if gpu_model == "distserve":
        return {"terms": ("sample_per_seq_s", "frontend_s")}
    return {}


def fit_group(run: RealRun, gpu: str | None = None, gpu_model: str = "") -> str:
    """Runs whose terms are fitted together: one source (engine version, host), one GPU kind and one
    kind of GPU step-time data (`compute_scale` corrects that data, so it must not mix sources)."""
    return f"{run.source} on {run.server.gpu or gpu or DEFAULT_GPU} ({gpu_model})"


def prior_label(pred: Prediction) -> str:
    """How an unfitted prediction's host terms came about: 'none', or the GPU model's prior."""
    o = pred.overhead
    if o == HostOverhead():
        return "none"
    out = f"prior: {o.schedule_s * 1e3:.2f} ms/step"
    if o.schedule_per_seq_s >= 1e-5:  # above the documented few microseconds: say it
        out += f" + {o.schedule_per_seq_s * 1e3:.3f} ms/scheduled seq"
    if o.sample_per_seq_s:
        out += f", {o.sample_per_seq_s * 1e3:.2f} ms/seq"
    if o.frontend_s:
        out += f", front end {o.frontend_s * 1e3:.1f} ms"
    if o.frontend_per_token_s:
        out += f" + {o.frontend_per_token_s * 1e6:.2f} us/prompt token"
    return "; ".join([out, *pred.notes])


FITS = ("loo", "source", "none")


def _rows(pred: Prediction, fit_label: str, fitted_on: list[str]) -> list[dict]:
    measured = pred.run.measured()
    predicted = pred.means()
    return [{
        "run": pred.run.name, "source": pred.run.source, "metric": m,
        "measured": measured[m], "predicted": predicted[m],
        "error": (predicted[m] - measured[m]) / measured[m] if measured[m] else np.nan,
        "fit": fit_label, "fitted_on": ";".join(fitted_on), "gpu_model": pred.gpu_model,
        "gpu_model_note": pred.gpu_model_note, "workload": pred.workload,
        "num_requests": pred.run.num_requests, "not_modelled": ";".join(not_modelled(pred.run)),
        "definition": definition(pred.run.measured_by, m),
    } for m in METRICS]


def _system(pred: Prediction) -> RunSystem | None:
    try:
        if pred.workload == "replay" and pred.run.has_per_request:
            return run_system(pred, pred.run.requests)
        # regenerated requests have no request-by-request match: fit the run's measured means
        return run_system(pred, means=pred.run.measured())
    except ValueError:
        return None


def reproduce(runs: list[RealRun], fit: str | HostOverhead = "source", workload: str = "auto", gpu: str | None = None,
              gpu_model: str = "auto", iterations: int = 1, progress: bool = True,
              fitted_on: list[str] | tuple[str, ...] = ()) -> Reproduction:
    """Simulate and score `runs`.

    1. every run is simulated once with its GPU model and that model's host prior, nothing fitted
       (`predict.host_prior`: none, documented constants, or host times measured on the *other*
       runs' idle engines), which also yields its linear equations in the overhead terms
       (`overhead_fit.run_system`);
    2. `fit="loo"`: for each run, the terms are fitted on the *other* runs of its fit group (same
       source, i.e. one engine version and host, same GPU kind, same kind of GPU step-time data)
       and the run is simulated again with them; the score of a run never uses a fit that saw it.
       The fit is used only if it earns its place by nested leave-one-out among the training runs
       (`fit_helps`); otherwise, and for a group with a single run, the run is predicted with its
       GPU model's host prior (`predict.host_prior`: none, documented constants, or host times
       measured on the *other* runs' idle engines). `fit="none"` scores step 1.
       `fit=HostOverhead` applies given terms to every run (the caller excludes the runs they were
       fitted on, `fitted_on`, which the report's `fitted_on` names). `fit="source"` (default):
       nothing measured or fitted on a run's own source reaches it (`reproduce_source_out`).
    """
    if isinstance(fit, str) and fit not in FITS:
        raise ValueError(f"fit: {fit!r} is not allowed; choose one of {', '.join(FITS)} (or give fitted terms)")
    if fit == "source":
        return reproduce_source_out(runs, workload, gpu, gpu_model, progress)
    rows: list[dict] = []
    rep = Reproduction(pd.DataFrame())
    base: dict[str, Prediction] = {}
    given = fit if isinstance(fit, HostOverhead) else None  # None: each GPU model's host prior
    bar = tqdm(runs, desc="simulate", unit="run", disable=not progress, leave=False)
    for run in bar:
        bar.set_postfix_str(run.name[-30:])
        base[run.name] = predict_run(run, given, workload=workload, gpu=gpu, gpu_model=gpu_model)
    if fit == "none" or isinstance(fit, HostOverhead):
        label = None if fit == "none" else "given"
        for run in runs:
            rows.extend(_rows(base[run.name], label or prior_label(base[run.name]), list(fitted_on) if label else []))
        rep.table, rep.predictions = pd.DataFrame(rows), base
        return rep

    systems = {name: _system(p) for name, p in base.items()}
    groups: dict[str, list[str]] = {}
    group_of = {run.name: fit_group(run, gpu, base[run.name].gpu_model) for run in runs}
    for run in runs:
        groups.setdefault(group_of[run.name], []).append(run.name)
    fit_kw = {g: fit_terms_for(base[names[0]].gpu_model) for g, names in groups.items()}
    for source, names in groups.items():
        train = [systems[n] for n in names if systems[n] is not None]
        if train:
            rep.group_fits[source] = {"overhead": fit_overhead(train, **fit_kw[source]).to_dict(), "fitted_on": names}
    by_name = {run.name: run for run in runs}
    measured = {run.name: run.measured() for run in runs}
    none_means = {name: p.means() for name, p in base.items()}

    def simulate_means(name: str, overhead: HostOverhead) -> dict:
        return predict_run(by_name[name], overhead, workload=workload, gpu=gpu, gpu_model=gpu_model).means()
    bar = tqdm(runs, desc="leave-one-out", unit="run", disable=not progress, leave=False)
    for run in bar:
        kw = fit_kw[group_of[run.name]]
        others = [n for n in groups[group_of[run.name]] if n != run.name and systems[n] is not None]
        if not others:
            rows.extend(_rows(base[run.name], f"{prior_label(base[run.name])} (no other run to fit on)", []))
            rep.predictions[run.name] = base[run.name]
            continue
        overhead = fit_overhead([systems[n] for n in others], **kw)
        for _ in range(max(0, iterations - 1)):  # refit on schedules simulated with the current terms
            refit = [_system(predict_run(next(r for r in runs if r.name == n), overhead, workload, gpu, gpu_model))
                     for n in others]
            overhead = fit_overhead([s for s in refit if s is not None], **kw)
        helps = fit_helps([systems[n] for n in others], simulate_means, measured, none_means, **kw)
        rep.fits[run.name] = {"overhead": overhead.to_dict(), "fitted_on": others, "used": helps}
        if not helps:
            rows.extend(_rows(base[run.name], f"{prior_label(base[run.name])} (the fit did not help in nested "
                                              "leave-one-out)", others))
            rep.predictions[run.name] = base[run.name]
            continue
        pred = predict_run(run, overhead, workload=workload, gpu=gpu, gpu_model=gpu_model)
        rep.predictions[run.name] = pred
        rows.extend(_rows(pred, "leave-one-run-out", others))
    rep.table = pd.DataFrame(rows)
    return rep


def fit_helps_across(groups: dict[str, list[str]], systems: dict[str, RunSystem | None], simulate,
                     measured: dict, base: dict, **fit_kw) -> bool:
    """`fit_helps` one level up: nested leave-one-*source*-out among the training sources (`groups`:
    source -> run names). For each training source, fit on the others and re-simulate its runs;
    the fit helps when the median |error| of those means beats no fit. Needs two sources."""
    if len(groups) < 2:
        return False
    err_fit, err_none = [], []
    for held, names in groups.items():
        train = [systems[n] for g, ns in groups.items() if g != held for n in ns if systems[n] is not None]
        if not train:
            continue
        nested = fit_overhead(train, **fit_kw)
        for name in names:
            pred, want, none = simulate(name, nested), measured[name], base[name]
            for m in METRICS:
                if np.isfinite(want.get(m, np.nan)) and want[m] > 0 and np.isfinite(pred.get(m, np.nan)):
                    err_fit.append(abs(pred[m] / want[m] - 1))
                    err_none.append(abs(none[m] / want[m] - 1))
    return bool(err_fit) and float(np.median(err_fit)) < float(np.median(err_none))


def engine_family(run: RealRun) -> str:
    """"v1" or "v0": vLLM's engine generation (`fidelity.runs.v0_engine`)."""
    return "v0" if v0_engine(run.server) else "v1"


def reproduce_source_out(runs: list[RealRun], workload: str = "auto", gpu: str | None = None,
                         gpu_model: str = "auto", progress: bool = True) -> Reproduction:
    """`reproduce(fit="source")`: every run predicted with nothing measured or fitted on its own
    source (a campaign folder: engine version, client, hardware).

    A run's unfitted terms are `predict.source_out_prior` (layers of other sources, documented
    constants, our own serve stack's front end); host terms (never `compute_scale`, which corrects
    one kind of GPU data) fitted on the runs of every *other* source replace them only if that fit
    earns its place by nested leave-one-source-out among those sources (`fit_helps_across`).
    `fitted_on` names the runs of a fit, or what the prior's terms came from.
    """
    rep = Reproduction(pd.DataFrame())
    base: dict[str, Prediction] = {}
    bar = tqdm(runs, desc="simulate (source-out)", unit="run", disable=not progress, leave=False)
    for run in bar:
        bar.set_postfix_str(run.name[-30:])
        base[run.name] = predict_run(run, None, workload=workload, gpu=gpu, gpu_model=gpu_model, host="source-out")
    systems = {name: _system(p) for name, p in base.items()}
    by_name = {run.name: run for run in runs}
    measured = {run.name: run.measured() for run in runs}
    none_means = {name: p.means() for name, p in base.items()}
    sources: dict[str, list[str]] = {}
    for run in runs:
        sources.setdefault(run.source, []).append(run.name)
    family = {s: engine_family(by_name[ns[0]]) for s, ns in sources.items()}
    cache: dict[tuple, dict] = {}

    def simulate_means(name: str, overhead: HostOverhead) -> dict:
        key = (name, tuple(sorted(overhead.to_dict().items())))
        if key not in cache:
            cache[key] = predict_run(by_name[name], overhead, workload=workload, gpu=gpu, gpu_model=gpu_model,
                                     host="source-out").means()
        return cache[key]

    rows: list[dict] = []
    for source, names in sources.items():
        # host terms describe an engine's host code: only sources of the same engine generation
        others = {s: ns for s, ns in sources.items() if s != source and family[s] == family[source]}
        train = [systems[n] for ns in others.values() for n in ns if systems[n] is not None]
        kw = {"terms": tuple(t for t in fit_terms_for(base[names[0]].gpu_model).get("terms", FIT_TERMS)
                             if t != "compute_scale")}
        overhead = fit_overhead(train, **kw) if train else None
        helps = overhead is not None and fit_helps_across(others, systems, simulate_means, measured, none_means, **kw)
        fitted_on = [n for ns in others.values() for n in ns if systems[n] is not None]
        if overhead is not None:
            rep.group_fits[source] = {"overhead": overhead.to_dict(), "fitted_on": fitted_on, "used": helps}
        for name in names:
            if helps:
                pred = predict_run(by_name[name], overhead, workload=workload, gpu=gpu, gpu_model=gpu_model,
                                   host="source-out")
                rows.extend(_rows(pred, "source-out fit", fitted_on))
                rep.fits[name] = {"overhead": overhead.to_dict(), "fitted_on": fitted_on, "used": True}
            else:
                pred = base[name]
                why = (f"no other source of a {family[source]} engine to fit on" if overhead is None else
                       f"one other source of a {family[source]} engine: a fit on it cannot be checked" if len(others) < 2
                       else "the fit on other sources did not help in nested leave-one-source-out")
                rows.extend(_rows(pred, f"{prior_label(pred)} ({why})", pred.evidence))
                rep.fits[name] = {"overhead": pred.overhead.to_dict(), "fitted_on": pred.evidence, "used": False}
            rep.predictions[name] = pred
    rep.table = pd.DataFrame(rows)
    return rep

"""`servesim calibrate`: measure the engine's ops into a profile, import published per-op data, or fit runs.

    servesim calibrate --model examples/tiny-llama/config.json --device cpu --out PROFILE [--quick]
    servesim calibrate import --source aiconfigurator|h100-microbench --gpu H100 --model NAME --tp N --out PROFILE
        [--host graphs|eager|eager-launch|none] [--kernels native|vidur] [--raw-grid]
        [--calls-per-layer N] [--call-us US] [--host-terms STEP_MS SEQ_MS PREFILL_MS]
    servesim calibrate fit-runs RUN_DIR... --out overhead.json [--test RUN_DIR...]
                                              (fidelity.fit_runs: host-overhead terms from real runs)

Every path prints the per-op fit error table (median / max abs %, and leave-one-out for the
piecewise-linear curves) and writes the profile file (format: `sim.latency.profiled`).
"""
from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path

from calibrate.engine_steps import SCALE_BOUNDS
from calibrate.fit_checks import CalibrationWarning, print_warnings
from calibrate.importers import HELP as IMPORT_HELP, import_profile
from fidelity.eager_host import eager_host
from fidelity.fit_runs import fit_layer
from fidelity.predict import GPU_MODEL_KINDS
from records.display import number, percent
from records.files import write_json
from servesim.commands import options, small


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="HF config.json of the engine's model (measure mode)")
    options.add_device(parser)
    options.add_out(parser, "the profile (JSON)", metavar="FILE")
    parser.add_argument("--quick", action="store_true", help="small grid for CI (< ~1 min on a laptop CPU)")
    parser.add_argument("--grid", default=None, choices=("smoke", "quick", "full"),
                        help="the grid (default full, quick with --quick; smoke: a handful of shapes, seconds, "
                             "for dry runs of the machinery, not for accuracy)")
    options.add_threads(parser)
    options.add_json(parser, "the per-op fit errors")
    options.add_quiet(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    imp = sub.add_parser("import", help="import published per-op data into a profile")
    options.add_json(imp, "the per-op fit errors", subcommand=True)  # also after the action
    options.add_quiet(imp, progress=False, subcommand=True)
    imp.add_argument("--source", required=True, help="aiconfigurator or h100-microbench")
    imp.add_argument("--gpu", required=True, help="H100, H200, A100, B200, GB200, L40S or RTX-PRO-6000 (aiconfigurator); "
                     "H100 (h100-microbench)")
    imp.add_argument("--model", required=True, dest="import_model",
                     help="a known name (e.g. llama-2-70b, mixtral-8x7b: calibrate/model_dims.py) or a HF "
                          "config.json (Llama-shaped, OPT, or a Mixtral / Qwen3 MoE; FP8 weights scaled per "
                          "tensor or channel: aiconfigurator's FP8 GEMMs)")
    imp.add_argument("--tp", type=int, default=1, help="tensor parallelism (per-rank shapes)")
    imp.add_argument("--data-dir", default=None, help=IMPORT_HELP["data_dir"])
    imp.add_argument("--host", default="graphs", help="host time per step: graphs (CUDA-graph engine, default), "
                     "eager (no CUDA graphs, NCCL all-reduce, launches as an additive constant), eager-launch "
                     "(no CUDA graphs: step = max(kernels, host launch path) + host work outside the forward; "
                     "simulate then uses sim.latency.eager.EagerLatencyModel), none (kernels only)")
    imp.add_argument("--kernels", default="native", help=IMPORT_HELP["kernels"])
    imp.add_argument("--raw-grid", action="store_true", help=IMPORT_HELP["raw_grid"])
    imp.add_argument("--calls-per-layer", type=int, default=None, help="eager-launch: kernel-issuing op calls a "
                     "layer (default 14, 12 at TP 1: the eager vLLM 0.1-0.2 Llama layer; one fewer for OPT's)")
    imp.add_argument("--call-us", type=float, default=None, help="eager-launch: host time of one op call in us "
                     "(default: measured for the GPU's node from aiconfigurator-core, 16.9 us on H100)")
    imp.add_argument("--host-terms", type=float, nargs=3, default=None, metavar=("STEP_MS", "SEQ_MS", "PREFILL_MS"),
                     help=IMPORT_HELP["host_terms"])
    options.add_out(imp, "the profile (JSON)", required=True, metavar="FILE", dest="import_out")
    fit = sub.add_parser("fit-runs", help="fit host-overhead terms from real runs (fidelity.fit_runs)")
    configure_fit_runs(fit)


def configure_fit_runs(parser: argparse.ArgumentParser) -> None:
    """`calibrate fit-runs RUN_DIR... --out FILE`: host-overhead terms fitted to real runs (fidelity.fit_runs)."""
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (or folders holding several runs)")
    options.add_out(parser, "the fitted layer (JSON)", required=True, metavar="FILE", dest="fit_out")
    parser.add_argument("--test", nargs="*", default=None, metavar="RUN_DIR",
                        help="held-out runs (folders); default: every --test-every-th run by name")
    parser.add_argument("--test-every", type=int, default=4, metavar="K",
                        help="hold out every K-th training candidate when --test is not given (default 4; 0 = none)")
    parser.add_argument("--iterations", type=int, default=2, help="simulate -> fit rounds (default 2)")
    parser.add_argument("--gpu", help="GPU for runs that do not name one (default H100)")
    parser.add_argument("--gpu-model", default="auto",
                        choices=GPU_MODEL_KINDS)
    options.add_json(parser, "the fitted layer", subcommand=True)
    options.add_quiet(parser, subcommand=True)


def fit_runs(args) -> int:
    """Fit the layer, write it to --out, print its terms and errors (from the layer in memory)."""
    if args.iterations < 1:
        raise ValueError(f"--iterations: expected a positive number of simulate -> fit rounds, got {args.iterations}")
    if args.test_every < 0:
        raise ValueError(f"--test-every: expected 0 (hold out none) or a positive integer, got {args.test_every}")
    layer = fit_layer(args.runs, args.test, args.test_every, args.iterations, args.gpu, args.gpu_model,
                      progress=options.progress(args))
    out = write_json(args.fit_out, layer)
    if args.json:
        options.print_json(layer)
    options.say(args, "fitted terms: " + ", ".join(f"{k}={number(v, 4)}" for k, v in layer["overhead"].items()))
    for label, e in (("train", layer["train_error"]), ("test", layer["test_error"])):
        if e:
            options.say(args, f"{label} ({len(e['per_run'])} runs) median |error|: "
                        + ", ".join(f"{k} {percent(v)}" for k, v in e["median_abs"].items()))
    options.say(args, f"wrote {out}")
    return 0


def fit_table_lines(profile) -> list[str]:
    """The per-op fit error table (median / max abs %, leave-one-out) and the engine-step fit, as lines."""
    def pct(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else percent(v / 100)

    lines = [f"{'op':<14} {'points':>6} {'median':>8} {'max':>8} {'loo med':>8} {'loo max':>8}  source"]
    for name, op in sorted(profile.ops.items()):
        e = op.fit_error
        lines.append(f"{name:<14} {len(op.points):>6} {pct(e.get('median_abs_pct')):>8} {pct(e.get('max_abs_pct')):>8} "
                     f"{pct(e.get('loo_median_abs_pct')):>8} {pct(e.get('loo_max_abs_pct')):>8}  {op.source}")
    fit = profile.meta.get("engine_step_fit")
    if fit:
        scale = profile.meta.get("in_step_scale") or {}
        lines.append(f"engine steps ({fit['num_steps']} of {', '.join(fit['configurations'])}): step time error "
                     f"median {fit['median_abs_pct']:.1f}% p90 {fit['p90_abs_pct']:.1f}%; each configuration "
                     f"predicted from the others: median {fit['holdout_median_abs_pct']:.1f}% "
                     f"p90 {fit['holdout_p90_abs_pct']:.1f}%")
        by = fit.get("holdout_median_abs_pct_by_configuration")
        if by:
            lines.append("  held out, by configuration: " + ", ".join(f"{k} {v:.1f}%" for k, v in by.items()))
        lines.append("in-step scales of the op curves: " + ", ".join(f"{k} {v:.3f}" for k, v in scale.items())
                     + f" (bounds {SCALE_BOUNDS[0]}-{SCALE_BOUNDS[1]})")
        if profile.meta.get("after_idle_s") is not None:
            lines.append(f"first step after an idle pause: +{profile.meta['after_idle_s'] * 1e3:.3f} ms "
                         f"({fit.get('num_after_idle_steps', 0)} such steps)")
    return lines


def fit_errors(profile, path) -> dict:
    """What `--json` prints: the profile written, each op's points, source and fit error, the step fit."""
    return {"profile": str(path), "ops": {name: {"points": len(op.points), "source": op.source,
                                                 "fit_error": op.fit_error} for name, op in sorted(profile.ops.items())},
            "engine_step_fit": profile.meta.get("engine_step_fit")}


def eager_launch_options(args) -> dict:
    """`import_profile` keyword arguments of the `--host eager-launch` options, checked with the
    errors naming the flag the user typed (microseconds and milliseconds on the command line).

    Without `--host-terms`, aiconfigurator's kernels on an A100 or H100 take the 2023 vLLM's host
    work and the sustained-compute factor fitted with it over those kernels (`fidelity.eager_host`)."""
    if args.host != "eager-launch":
        for flag, v in (("--calls-per-layer", args.calls_per_layer), ("--call-us", args.call_us),
                        ("--host-terms", args.host_terms)):
            if v is not None:
                raise ValueError(f"{flag}: only used with --host eager-launch, not --host {args.host}")
        return {}
    if args.calls_per_layer is not None and args.calls_per_layer < 1:
        raise ValueError(f"--calls-per-layer: expected a positive integer, got {args.calls_per_layer}")
    if args.call_us is not None and not (0 < args.call_us < math.inf):
        raise ValueError(f"--call-us: expected a positive number of microseconds, got {args.call_us}")
    terms = None
    if args.host_terms is not None:
        if not all(0 <= v < math.inf for v in args.host_terms):
            raise ValueError(f"--host-terms: expected three milliseconds >= 0, got {args.host_terms}")
        terms = dict(zip(("step_s", "per_seq_s", "prefill_s"), (v * 1e-3 for v in args.host_terms)))
    extra = {}
    shipped = shipped_eager_host(args)
    if shipped is not None:  # the terms were fitted over these kernels at this factor: they go together
        terms, extra = shipped.host_terms(), {"compute_factor": shipped.compute_factor}
    return {"call_s": None if args.call_us is None else args.call_us * 1e-6,
            "calls_per_layer": args.calls_per_layer, "host_terms": terms, **extra}


def shipped_eager_host(args):
    """The shipped 2023 vLLM terms (`fidelity.eager_host`) an `--host eager-launch` import takes by
    default: aiconfigurator's own kernels on an A100 or H100, no `--host-terms` given; else None."""
    if args.host != "eager-launch" or args.host_terms is not None or args.source != "aiconfigurator" \
            or args.kernels != "native":
        return None
    return eager_host(args.gpu)


def run(args) -> int:
    if args.action == "fit-runs":
        return fit_runs(args)
    if args.action == "import":
        profile = import_profile(args.source, args.gpu, args.import_model, args.tp, data_dir=args.data_dir,
                                 host=args.host, kernels=args.kernels, extend_grids=not args.raw_grid,
                                 **eager_launch_options(args))
        out = args.import_out
    else:
        check_measure_args(args)
        threads = options.check_threads(args)
        import torch  # the engine extra: `calibrate import` and `fit-runs` run without it

        from calibrate.bench import calibrate

        if args.device == "cpu":
            torch.set_num_threads(threads)
        if args.quick and args.grid not in (None, "quick"):
            raise ValueError(f"--quick: contradicts --grid {args.grid}; give one of them")
        grid = small_grid(args, args.grid or ("quick" if args.quick else "full"))
        with warnings.catch_warnings():  # printed after the fit table
            warnings.simplefilter("ignore", CalibrationWarning)
            profile = calibrate(args.model, args.device, quick=grid, progress=options.progress(args))
        out = args.out
    path = profile.save(out)
    if args.json:
        options.print_json(fit_errors(profile, path))
    options.say(args, *fit_table_lines(profile))
    m = profile.model
    launch = profile.meta.get("eager_launch")
    if launch:
        options.say(args, f"eager launch path: {launch['launch_s'] * 1e3:.1f} ms a step = {launch['source']}")
        shipped = shipped_eager_host(args) if args.action == "import" else None
        if shipped is not None:
            options.say(args, f"host work outside the forward pass: {shipped.describe()} ({shipped.origin}; "
                              "--host-terms gives others)")
    weights = f" ({m['quantization']} weights)" if m.get("quantization") else ""
    options.say(args, f"wrote {path}: {profile.meta.get('device')}, {m.get('name')} tp={m['tensor_parallel_size']} "
                f"{m['dtype']}{weights}, source {profile.meta.get('source')}")
    print_warnings(profile.meta)  # on stderr, --quiet or not
    return 0


def check_measure_args(args) -> None:
    """Measure mode's two required flags, each named where it is missing, and its `--model`: the
    engine's own model, a HF config.json (file or folder holding one) that exists; the catalog's
    names are for `calibrate import`, so they are not offered here."""
    hint = "(or use `servesim calibrate import ...`)"
    if not args.model:
        raise ValueError(f"--model: measure mode needs --model CONFIG.json, the engine model's config {hint}")
    if not args.out:
        raise ValueError(f"--out: measure mode needs --out PROFILE, the profile file to write {hint}")
    path = Path(args.model)
    if not (path.is_file() or (path / "config.json").is_file()):
        raise ValueError(f"--model: no config.json at {args.model}; measure mode times the engine's model, given as "
                         "a Hugging Face config.json or a folder holding one (e.g. examples/tiny-llama/config.json); "
                         "model names are for `servesim calibrate import`")


def small_grid(args, grid: str) -> str:
    """The calibration grid to use: `grid`, or the smoke grid under SERVESIM_SMALL (said in a note)."""
    if small.enabled() and grid != "smoke":
        options.note(args, f"{small.ENV}=1: the smoke calibration grid (was {grid}): the machinery, not accuracy")
        return "smoke"
    return grid

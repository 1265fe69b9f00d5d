"""`calibrate`: a profile of the engine on a device, measured and fitted (`servesim calibrate`).

The parts, run in order by `calibrate`: the engine's own steps on a fixed calibration workload and
the after-prefill probe (`calibrate.engine_bench`); the ops one at a time over the shapes of a
`calibrate.grid.Grid` (`calibrate.op_bench`); the machine's speed read throughout and divided out
of every timing (`calibrate.speed_probe`). The op curves are fitted by `calibrate.fit`, the host
overhead and the curves' in-step scales from the engine steps by `calibrate.engine_steps`.
"""
from __future__ import annotations

import datetime as _dt
import gc
import os
import platform
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from calibrate.engine_bench import (add_engine_fit, bracket_drift_pct, dtype_name, measure_after_prefill,
                                    measure_engine_steps, settle)
from calibrate.engine_steps import after_prefill_curve
from calibrate.fit import fit_op
from calibrate.fit_checks import check_profile, warn
from calibrate.grid import Grid
from calibrate.model_dims import resolve_model
from calibrate.op_bench import (OpBench, clock_for, device_name, measure_ops, measure_ragged_decode,
                                padding_discount)
from calibrate.speed_probe import SpeedProbe
from gpu_backend.model_config import ModelConfig
from policies import ConfigError
from sim.latency.profile import Profile, layer_kind


def calibrate(model_path: str | Path, device: str = "cpu", quick: bool | str = False, progress: bool = True,
              seed: int = 0, grid: Grid | None = None, between: Callable[[], object] | None = None,
              model=None, max_len: int | None = None, probe=True) -> Profile:
    """Measure and fit a profile of the engine running `model_path` (a HF config.json) on `device`.

    `quick`: the grid's mode (`Grid.make`: True / "quick", False / "full", "smoke"). `max_len`: the
    longest sequence the grid covers (default and at most the model's `max_position_embeddings`;
    `validate` passes its config's `max_model_len`). The fits' own checks (`calibrate.fit_checks`)
    go to `meta.warnings`, each also issued as a `CalibrationWarning`.

    `between`, when given, runs after the first op pass and the first half of the engine's calibration
    steps and before the second half and the second op pass (`validate` runs its engine workload
    there): the calibration then brackets that run, so a machine whose speed drifts (other tenants of a shared host) is
    measured in the state the run saw on average. Its time is not counted in `calibration_s`.

    `model`, when given, is the model (a `gpu_backend.model.LlamaModel` of `model_path`'s dims) the
    benchmarks and the calibration's engines run, instead of seeded random weights of their own: an
    engine that then runs the same object runs on the same memory: two models of one process can run
    the same steps well over the validation bar apart, and a profile cannot carry where its weights
    lay over to another model (figures: docs/results/2026-12-02-docstring-history.md).

    `probe`: the machine's speed is read throughout (`calibrate.speed_probe`; True: a probe of its own,
    or a `SpeedProbe` on the same model that `validate` also reads during its run; False: none), and
    every engine step is divided by the speed at its time against the median reading after the
    calibration's engine steps (the bracketed run's readings left out), and every op timing by the
    speed among the op benchmarks against theirs: the profile describes the machine at that
    reference speed, `meta.speed_probe` keeps it.
    """
    t0 = time.perf_counter()
    dims = resolve_model(str(model_path))
    if layer_kind(dims, "quantization") != "none":  # the engine's 16-bit GEMMs would stand for the checkpoint's
        raise ConfigError(f"model: {model_path} has {dims['quantization']} weights, which the engine does not run "
                          "(it runs 16- or 32-bit weights): calibrate the 16-bit config.json, or import FP8 GEMMs "
                          "with `servesim calibrate import --source aiconfigurator`")
    mc = ModelConfig.from_json(model_path)
    bench = OpBench(mc, device, seed=seed, model=model)
    dims["dtype"] = dtype_name(bench.dtype)
    if probe is True:
        probe = SpeedProbe(bench.model, device, clock=clock_for(bench.device)[0])
    probe = probe or None
    mode = "smoke" if quick == "smoke" else "quick" if quick in (True, "quick") else "full"
    grid = grid or Grid.make(mode, max_len=min(max_len or mc.max_position_embeddings, mc.max_position_embeddings))
    max_call_s = 2.0 if mode == "full" else 0.25
    # the engine's own steps in two halves. Alone: one half before the op timings and one after,
    # so that a slow stretch of a shared machine does not fall on one side of the in-step fit only.
    # Around a `between` run: the halves hug that run, since the host overhead and in-step scales
    # come from the engine steps and on a shared 2-core VM the speed of the engine's Python-heavy
    # steps moved by 10-20% from one minute to the next (a fixed loop of the same ops: within 0.5%),
    # and the two op passes go on either side of them. Each engine phase starts on a settled heap.
    first, second = grid.engine_groups[0::2], grid.engine_groups[1::2]
    workload = {"max_prompt": grid.engine_max_prompt, "max_output": grid.engine_max_output}
    t_between, run_window, stamps = 0.0, None, {}
    workload["probe"] = probe
    try:
        if between is None:
            settle()
            steps = measure_engine_steps(bench, first, progress=progress, seed=seed, **workload)
            points = measure_ops(bench, grid, progress, max_call_s=max_call_s, probe=probe, stamps=stamps)
        else:
            # symmetric around the run: op pass 1, engine half 1, the run, engine half 2, op pass 2 (in
            # reverse), so that the op curves and the engine steps both see the machine of the run on
            # average (with both op passes first, the op curves were centred ~half a calibration
            # before the run, and a machine drifting by minutes put that into the in-step scales)
            points, too_slow = {}, set()
            measure_ops(bench, grid, progress, max_call_s=max_call_s, passes=(0,), points=points, too_slow=too_slow,
                        probe=probe, stamps=stamps)
            settle()
            steps = measure_engine_steps(bench, first, progress=progress, seed=seed, **workload)
            settle()
            t = time.perf_counter()
            between()
            run_window = (t, time.perf_counter())
            t_between = run_window[1] - t
        num_first = len(steps)
        settle()
        steps += measure_engine_steps(bench, second, progress=progress, seed=seed + 1, **workload)
        settle()
        after_prefill = measure_after_prefill(bench, grid.after_prefill_repeats, progress=progress)
        # the torch backend pads decodes to the longest context: what the padding costs (op_bench)
        ragged = measure_ragged_decode(bench, grid) if bench.backend.name == "torch" else []
        if between is not None:
            measure_ops(bench, grid, progress, max_call_s=max_call_s, passes=(1,), points=points, too_slow=too_slow,
                        probe=probe, stamps=stamps)
    finally:
        gc.unfreeze()
    speed_meta = None
    if probe is not None:
        # the calibration's own readings define the reference speed; a bracketed run's are its own
        reference = probe.level(*run_window, outside=True) if run_window else probe.level()
        raw_steps = steps
        steps = probe.normalize_steps(steps, reference)
        points = probe.normalize_points(points, stamps)
        speed_meta = probe.summary(reference, *(run_window or (None, None)))
        cal = probe.speed_at([s[4] for s in raw_steps], reference)
        speed_meta["calibration_p10"] = round(float(np.percentile(cal, 10)), 4)
        speed_meta["calibration_p90"] = round(float(np.percentile(cal, 90)), 4)
    # every small token count timed: keep the measured medians there (calibrate.fit._pwl)
    ops = {name: fit_op(name, pts, exact_prefix=True) for name, pts in points.items()}
    meta = {
        "device": device_name(bench.device), "torch_version": torch.__version__,
        "driver": (f"cuda {torch.version.cuda}" if bench.device.type == "cuda" else None),
        "dtype": dtype_name(bench.dtype), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": "calibrate", "attention_backend": bench.backend.name,
        "attn_decode_kv": "max" if bench.backend.name == "torch" else "mean",
        "attention_includes_kv_write": True, "grid": mode,
        # the engine's ragged batches leave the static policy's padding entries out (input_batch)
        "executor_skips_padding": True,
        "num_threads": torch.get_num_threads(), "python": platform.python_version(),
        "heap_pinned": bench.heap_pinned,  # glibc heap kept (gpu_backend.heap), as the engine keeps it
        "clock": clock_for(bench.device)[1],
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),  # other processes on the machine
    }
    if speed_meta is not None:
        meta["speed_probe"] = speed_meta
    discount = padding_discount(ragged)
    if discount is not None:  # before the engine-step fit, whose decode attention it lowers
        meta["attn_decode_padding_discount"] = discount
    profile = Profile(meta=meta, model=dims, ops=ops)
    add_engine_fit(profile, steps)
    curve = after_prefill_curve(after_prefill)
    if curve is not None:
        profile.meta["after_prefill_curve"] = curve
    profile.meta["calibration_s"] = round(time.perf_counter() - t0 - t_between, 1)
    if between is not None:
        profile.meta["bracketed_s"] = round(t_between, 1)  # the run measured between the two halves
        profile.meta["bracket_drift_pct"] = bracket_drift_pct(profile, steps[:num_first], steps[num_first:])
    profile.meta["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    profile.meta["warnings"] = check_profile(profile.meta)
    warn(profile.meta["warnings"])
    return profile

"""The host work of a 2023 eager vLLM engine, for runs of a release without CUDA graphs.

vLLM captures CUDA graphs from release 0.2.6 on (`CUDA_GRAPHS_ORIGIN`). An older release issues every
kernel of every layer from Python while the GPU runs the ones already issued, and between forward
passes does its host work (scheduling, input preparation, sampling, output handling) while the GPU
idles: `sim.latency.eager.EagerLatencyModel`, a step = max(kernels, launch path) + host work.

Nothing publishes that host work for vLLM's own releases. Splitwise's static-batch step times of a
2023 engine on DGX-A100 and DGX-H100 measure it (`fidelity.sources.splitwise`): per machine, a
constant per step, per sequence and per step with prompts, fitted on every TP of that machine over
aiconfigurator's kernels and the eager launch path (`calibrate.importers.eager_launch`, not fitted).
The terms are what those kernels leave out, so they go with them (`KERNELS`). `write_terms` fits
them and `EAGER_HOST` ships them (`python benchmarks/splitwise_check.py --write-terms`), so a run
of such a release is predicted from them without Splitwise's data at hand (`fidelity.predict`, GPU
model `aiconfigurator-eager`). Nothing of a predicted run is fitted.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from calibrate.importers import import_profile
from fidelity.runs import RealRun, release
from fidelity.sources.splitwise import machine_terms
from records.files import read_json_object

EAGER_HOST = Path(__file__).resolve().parent / "host" / "vllm-2023-eager-host.json"
CUDA_GRAPHS_SINCE = (0, 2, 6)
CUDA_GRAPHS_ORIGIN = "vllm-project/vllm#1926, merged 2023-12-17, first released in 0.2.6"
#: the kernel data the terms were fitted over, and the Splitwise machine of each GPU the file covers
KERNELS = "aiconfigurator"
MACHINES = {"A100": "a100-80gb", "H100": "h100-80gb"}
TERMS = ("step_s", "per_seq_s", "prefill_s")


def runs_eager(run: RealRun) -> bool:
    """True when the run's recorded vLLM release predates CUDA graphs (an unrecorded one: False)."""
    r = release(run.server)
    return r is not None and r < CUDA_GRAPHS_SINCE


def machine_of(gpu: str | None) -> str | None:
    """The `MACHINES` key of a GPU as a run or the catalog spells it ("A100-80GB", "a100_sxm"), or None."""
    if not gpu:
        return None
    key = str(gpu).upper().replace("_", "-").split("-")[0]
    return key if key in MACHINES else None


def eager_terms(gpu: str | None, path: Path = EAGER_HOST) -> tuple[dict, str] | None:
    """(terms {step_s, per_seq_s, prefill_s} in seconds, what they were fitted on) for `gpu`'s
    machine, or None (no such machine in the file, or no file)."""
    key = machine_of(gpu)
    if key is None:
        return None
    try:
        data = read_json_object(path, "eager engine host terms")
        entry = data["machines"][key]
        terms = {k: float(entry[k]) for k in TERMS}
        origin = f"{entry['fitted_on']} ({Path(path).name})"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return terms, origin


def describe(terms: dict) -> str:
    """One line of the terms, in ms."""
    return (f"{terms['step_s'] * 1e3:.2f} ms a step + {terms['per_seq_s'] * 1e3:.3f} ms a sequence + "
            f"{terms['prefill_s'] * 1e3:.2f} ms a step with prompts")


def write_terms(shared_data: Path, path: Path = EAGER_HOST, tps: tuple[int, ...] = (2, 4, 8)) -> dict:
    """Fit each machine's terms on Splitwise's step times of every TP in `tps` (Llama-2-70B, the data's
    only model with both machines) and write them to `path`; returns what was written."""
    machines = {}
    for key, hardware in MACHINES.items():
        kernels = {tp: import_profile(KERNELS, key, "llama-2-70b", tp, host="eager-launch") for tp in tps}
        terms, fitted_on = machine_terms(Path(shared_data), kernels, hardware)
        machines[key] = {**terms, "fitted_on": fitted_on,
                         "launch_s_llama_2_70b": {str(tp): p.meta["eager_launch"]["launch_s"] for tp, p in kernels.items()}}
    data = {
        "format": "servesim-eager-host", "version": 1,
        "what": "host work outside the forward pass of a 2023 eager engine (no CUDA graphs), per machine: seconds a "
                "step, a sequence and a step with prompts (fidelity.eager_host)",
        "method": f"least squares on relative error (soft L1) of Splitwise's measured prefill and decode step times "
                  f"less {KERNELS}'s kernels and the eager launch path (sim.latency.eager.EagerLatencyModel), all TPs "
                  "of a machine (fidelity.sources.splitwise.machine_terms)",
        "kernels": KERNELS,
        "made_by": "python benchmarks/splitwise_check.py --write-terms",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machines": machines,
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data

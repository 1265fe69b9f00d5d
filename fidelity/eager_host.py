"""The host work of a 2023 eager vLLM engine, for runs of a release without CUDA graphs.

vLLM captures CUDA graphs from release 0.2.6 on (`CUDA_GRAPHS_ORIGIN`). An older release issues every
kernel of every layer from Python while the GPU runs the ones already issued, and between forward
passes does its host work (scheduling, input preparation, sampling, output handling) while the GPU
idles: `sim.latency.eager.EagerLatencyModel`, a step = max(kernels, launch path) + host work.

Nothing publishes that host work for vLLM's own releases. Splitwise's static-batch step times of a
2023 engine on DGX-A100 and DGX-H100 measure it (`fidelity.sources.splitwise`). Per machine,
`write_terms` fits a constant per step, per sequence and per step with prompts, on every TP of that
machine, over aiconfigurator's kernels and the eager launch path (`calibrate.importers.eager_launch`,
not fitted). The kernels' sustained-compute factor (the clock a busy card holds under its power limit,
`compute_factor` of the import) is the one of `COMPUTE_FACTORS` whose terms predict each TP best from
the other TPs (leave one TP out). The terms are what those kernels leave out, so they go with them
(`KERNELS`). `EAGER_HOST` ships them (`python benchmarks/splitwise_check.py --write-terms`), so a run
of such a release is predicted from them without Splitwise's data at hand (`fidelity.predict`, GPU
model `aiconfigurator-eager`). Nothing of a predicted run is fitted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tqdm import tqdm

from calibrate.importers import import_profile
from fidelity.runs import RealRun, release
from fidelity.sources.splitwise import held_out_check, machine_terms, summary
from records.files import read_json_object

EAGER_HOST = Path(__file__).resolve().parent / "host" / "vllm-2023-eager-host.json"
CUDA_GRAPHS_SINCE = (0, 2, 6)
CUDA_GRAPHS_ORIGIN = "vllm-project/vllm#1926, merged 2023-12-17, first released in 0.2.6"
#: the kernel data the terms were fitted over, and the Splitwise machine of each GPU the file covers
KERNELS = "aiconfigurator"
MACHINES = {"A100": "a100-80gb", "H100": "h100-80gb"}
TERMS = ("step_s", "per_seq_s", "prefill_s")
#: the sustained-compute factors tried on the kernels (1: as aiconfigurator timed them)
COMPUTE_FACTORS = tuple(round(1.0 + 0.05 * i, 2) for i in range(11))


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


@dataclass(frozen=True)
class EagerHost:
    """One machine's eager engine: host work outside the forward pass (seconds a step, a sequence, a
    step with prompts), the kernels' sustained-compute factor, and what they were fitted on."""

    step_s: float
    per_seq_s: float
    prefill_s: float
    compute_factor: float
    origin: str

    def host_terms(self) -> dict:
        """The `host_terms` of `calibrate.importers.import_profile`."""
        return {k: getattr(self, k) for k in TERMS}

    def describe(self) -> str:
        """One line of the terms, in ms, with the compute factor."""
        return (f"{self.step_s * 1e3:.2f} ms a step + {self.per_seq_s * 1e3:.3f} ms a sequence + "
                f"{self.prefill_s * 1e3:.2f} ms a step with prompts, kernels' compute-bound share "
                f"x {self.compute_factor:.2f}")


def eager_host(gpu: str | None, path: Path = EAGER_HOST) -> EagerHost | None:
    """The eager engine's terms for `gpu`'s machine, or None (no such machine in the file, or no file)."""
    key = machine_of(gpu)
    if key is None:
        return None
    try:
        entry = read_json_object(path, "eager engine host terms")["machines"][key]
        return EagerHost(*(float(entry[k]) for k in (*TERMS, "compute_factor")),
                         origin=f"{entry['fitted_on']} ({Path(path).name})")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_terms(shared_data: Path, path: Path = EAGER_HOST, tps: tuple[int, ...] = (2, 4, 8),
                factors: tuple[float, ...] | None = None) -> dict:
    """Fit each machine's terms on Splitwise's step times of every TP in `tps` (Llama-2-70B, the data's
    only model on both machines), at the compute factor of `factors` (default `COMPUTE_FACTORS`)
    with the least leave-one-TP-out error, and write them to `path`; returns what was written."""
    machines = {}
    for key, hardware in MACHINES.items():
        errors, kernels_at = {}, {}
        for f in tqdm(factors or COMPUTE_FACTORS, desc=f"compute factors, {hardware}", unit="factor", leave=False):
            kernels_at[f] = {tp: import_profile(KERNELS, key, "llama-2-70b", tp, host="eager-launch",
                                                compute_factor=f) for tp in tps}
            rows, _ = held_out_check(Path(shared_data), kernels_at[f], hardware)
            errors[f] = summary(rows)["all"]["median_abs_pct"]
        best = min(errors, key=lambda f: (round(errors[f], 6), f))
        kernels = kernels_at[best]
        terms, fitted_on = machine_terms(Path(shared_data), kernels, hardware)
        machines[key] = {**terms, "compute_factor": best, "fitted_on": fitted_on,
                         "held_out_median_abs_pct_by_compute_factor": {f"{f:.2f}": round(e, 3) for f, e in errors.items()},
                         "launch_s_llama_2_70b": {str(tp): p.meta["eager_launch"]["launch_s"] for tp, p in kernels.items()}}
    data = {
        "format": "servesim-eager-host", "version": 2,
        "what": "host work outside the forward pass of a 2023 eager engine (no CUDA graphs), per machine: seconds a "
                "step, a sequence and a step with prompts, and the kernels' sustained-compute factor (fidelity.eager_host)",
        "method": f"least squares on relative error (soft L1) of Splitwise's measured prefill and decode step times "
                  f"less {KERNELS}'s kernels and the eager launch path (sim.latency.eager.EagerLatencyModel), all TPs "
                  "of a machine (fidelity.sources.splitwise.machine_terms); the compute factor: the one whose terms "
                  "predict each TP from the other TPs best (median |error|, fidelity.sources.splitwise.held_out_check)",
        "kernels": KERNELS,
        "made_by": "python benchmarks/splitwise_check.py --write-terms",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machines": machines,
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data

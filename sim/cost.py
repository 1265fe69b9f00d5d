"""What a run costs: GPU-hours, dollars and joules, in total and per output token.

GPU-hours are each replica's GPUs times the time it was provisioned (the run's span, first arrival
to last finish, unless an autoscaler says otherwise); dollars are GPU-hours times each GPU's price.
Energy: a GPU draws its idle power while it has nothing to run and, during a step,
idle + (board - idle) x activity. Activity runs from `MEMORY_BOUND_ACTIVITY` for a step whose
GEMMs are memory-bound (few tokens: decodes) to 1 for one whose GEMMs are compute-bound (tokens at
or past the GPU's ridge point, the roofline's knee: peak FLOP/s x bytes per weight / (2 x HBM
bandwidth)). Measured LLM serving shows that shape: token generation draws about half of a GPU's
dynamic power range, prompt processing reaches the board limit (Patel et al., ISCA 2024; Samsi et
al., HPEC 2023). Energy therefore always lies between idle and board power times GPU-seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.cluster.layout import all_replica_configs

if TYPE_CHECKING:  # pandas on demand: a streamed run (CostMeter) never builds a DataFrame
    import pandas as pd

MEMORY_BOUND_ACTIVITY = 0.5  # share of (board - idle) power a memory-bound step draws


@dataclass(frozen=True)
class ReplicaCost:
    """One replica's hardware for costing: its GPU's power and price, its TP degree, when it was up."""

    name: str
    tp: int
    price_per_gpu_hour: float
    idle_power_w: float
    board_power_w: float
    ridge_tokens: float  # tokens a step needs for its GEMMs to be compute-bound
    provisioned_s: float | None = None  # seconds it was up; None = the run's whole span

    def activity(self, tokens: np.ndarray) -> np.ndarray:
        compute = np.minimum(1.0, np.asarray(tokens, dtype=float) / self.ridge_tokens)
        return MEMORY_BOUND_ACTIVITY + (1.0 - MEMORY_BOUND_ACTIVITY) * compute


def replica_costs(config, provisioned_s: dict[str, float] | None = None) -> list[ReplicaCost]:
    """The replicas a config's layout runs (colocated or disaggregated), as `ReplicaCost`s;
    `provisioned_s` (replica name -> seconds up) replaces the run's span where given."""
    out = []
    for name, c in all_replica_configs(config):
        gpu = c.hardware.gpu_spec()
        spec = c.model.spec()
        ridge = gpu.peak_flops(spec.dtype_bytes) * spec.weight_element_bytes / (2.0 * gpu.hbm_bandwidth)
        up = provisioned_s.get(name) if provisioned_s else None
        out.append(ReplicaCost(name, int(c.hardware.tp), c.hardware.cost_per_hour / c.hardware.tp,
                               gpu.idle_power_w, gpu.board_power_w, ridge, up))
    return out


def run_cost(replicas: list[ReplicaCost], steps: "pd.DataFrame", span_s: float, output_tokens: int) -> dict:
    """Summary keys: gpu_hours, cost_usd, cost_per_million_output_tokens, energy_j,
    energy_j_per_output_token, mean_power_w (per GPU, over the GPU-seconds provisioned)."""
    import pandas as pd

    by_replica = {}
    if len(steps):
        tokens = steps["num_prefill_tokens"] + steps["num_decode_tokens"] + steps["num_padding_tokens"]
        by_replica = {str(k): g for k, g in pd.DataFrame({"replica": steps["replica"].astype(str),
                                                          "duration": steps["duration"],
                                                          "tokens": tokens}).groupby("replica")}
    busy, step_energy = {}, {}
    for r in replicas:
        mine = by_replica.get(r.name)
        if mine is not None:
            busy[r.name] = float(mine["duration"].sum())
            step_energy[r.name] = float((mine["duration"] * (r.idle_power_w + (r.board_power_w - r.idle_power_w)
                                                             * r.activity(mine["tokens"]))).sum())
    return cost_summary(replicas, busy, step_energy, span_s, output_tokens)


def cost_summary(replicas: list[ReplicaCost], busy_s: dict, step_energy_j: dict, span_s: float,
                 output_tokens: int) -> dict:
    """run_cost's keys from each replica's busy seconds and step energy (replicas absent: no steps)."""
    gpu_s = cost = energy = 0.0
    for r in replicas:
        up = max(span_s if r.provisioned_s is None else r.provisioned_s, 0.0)
        busy = busy_s.get(r.name, 0.0)
        up = max(up, busy)  # a replica is up at least while it computes
        energy += r.tp * (step_energy_j.get(r.name, 0.0) + (up - busy) * r.idle_power_w)
        gpu_s += r.tp * up
        cost += r.tp * up / 3600.0 * r.price_per_gpu_hour
    per_token = (lambda x: x / output_tokens) if output_tokens > 0 else (lambda x: None)
    return {
        "gpu_hours": gpu_s / 3600.0,
        "cost_usd": cost,
        "cost_per_million_output_tokens": None if output_tokens <= 0 else cost / output_tokens * 1e6,
        "energy_j": energy,
        "energy_j_per_output_token": per_token(energy),
        "mean_power_w": energy / gpu_s if gpu_s > 0 else None,
    }


class CostMeter:
    """`run_cost` for a streamed run: per-replica busy seconds and step energy summed batch by batch.

    `add_steps(columns)` takes each batch of step columns (`records.results.steps_columns`);
    `summary(span_s, output_tokens)` returns run_cost's keys, equal to it on the same steps up to
    float rounding (the sums are taken per batch).
    """

    def __init__(self, replicas: list[ReplicaCost]) -> None:
        self.replicas = replicas
        self._by_name = {r.name: r for r in replicas}
        self.busy_s: dict[str, float] = {}
        self.step_energy: dict[str, float] = {}

    def add_steps(self, columns: dict) -> None:
        names = np.asarray(columns["replica"]).astype(str)
        duration = np.asarray(columns["duration"], dtype=float)
        tokens = (np.asarray(columns["num_prefill_tokens"]) + np.asarray(columns["num_decode_tokens"])
                  + np.asarray(columns["num_padding_tokens"]))
        for name in np.unique(names):
            r = self._by_name.get(str(name))
            if r is None:
                continue
            mine = names == name
            d = duration[mine]
            energy = float((d * (r.idle_power_w + (r.board_power_w - r.idle_power_w) * r.activity(tokens[mine]))).sum())
            self.busy_s[r.name] = self.busy_s.get(r.name, 0.0) + float(d.sum())
            self.step_energy[r.name] = self.step_energy.get(r.name, 0.0) + energy

    def summary(self, span_s: float, output_tokens: int, replicas: list[ReplicaCost] | None = None) -> dict:
        """run_cost's keys; `replicas`: the same replicas with their provisioned times, when known
        only at the end (an autoscaler's)."""
        return cost_summary(replicas if replicas is not None else self.replicas, self.busy_s, self.step_energy,
                            span_s, output_tokens)

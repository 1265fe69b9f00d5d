# %% [markdown]
# # 3. Preemption under memory pressure: recompute vs swap vs hybrid
#
# When the paged KV cache is full and a running request needs a new block, the scheduler preempts a
# victim. **Recompute** frees its blocks and later re-prefills prompt + generated tokens (GPU
# compute); **swap** copies its blocks to host memory over PCIe and back (bus time); **hybrid**
# recomputes requests that generated few tokens and swaps the others.
#
# Which is cheaper depends on the PCIe bandwidth and on how long the victims' contexts are. We
# shrink the KV pool to force preemptions and sweep both.

# %%
import os

import pandas as pd

from sim.config import load_config
from sim.runner import simulate

SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
N = 120 if SMALL else 600
PCIE = (8.0, 64.0) if SMALL else (4.0, 16.0, 64.0)  # GB/s: a contended PCIe 3 slot ... PCIe 5 x16
OUTPUTS = (64, 512) if SMALL else (64, 256, 1024)

base = {
    "model": {"name": "Llama-2-13B"},
    "hardware": {"gpu": "A100-80G", "num_gpu_blocks": 900, "swap_space_gb": 32.0},
    "scheduler": {"policy": "chunked", "max_num_batched_tokens": 2048, "max_num_seqs": 128,
                  "hybrid_swap_threshold": 128},
    "workload": {"kind": "poisson", "rate": 6.0, "num_requests": N, "seed": 3,
                 "prompt_len": {"kind": "lognormal", "median": 600, "sigma": 0.6, "max": 3000}},
}
rows = []
for out_len in OUTPUTS:
    for bw in PCIE:
        for mode in ("recompute", "swap", "hybrid"):
            res = simulate(load_config(base, [
                f"scheduler.preemption={mode}", f"hardware.pcie_bandwidth_gbps={bw}",
                f'workload.output_len={{kind="constant", value={out_len}}}',
            ]))
            s = res.summary
            rows.append({"output_len": out_len, "pcie_GBps": bw, "preemption": mode,
                         "preemptions": s["num_preemptions"], "finished": s["num_finished"],
                         "mean_e2e_s": s["e2e_s"]["mean"], "p99_tpot_ms": s["tpot_s"]["p99"] * 1000,
                         "tok_per_s": s["throughput"]["output_tokens_per_s"],
                         "swap_blocks": int(res.steps["num_swap_out_blocks"].sum() + res.steps["num_swap_in_blocks"].sum())})
table = pd.DataFrame(rows)
table.pivot_table(index=["output_len", "pcie_GBps"], columns="preemption", values="mean_e2e_s").round(2)

# %%
# Sanity: memory pressure really caused preemptions, nobody was lost, and swap moved blocks only
# when swapping was allowed.
assert (table["preemptions"] > 0).any()
assert (table["finished"] == N).all()
assert (table.query("preemption == 'recompute'")["swap_blocks"] == 0).all()
assert (table.query("preemption == 'swap'")["swap_blocks"] > 0).any()

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, len(OUTPUTS), figsize=(4 * len(OUTPUTS), 3.3), sharey=False)
for ax, out_len in zip(axes, OUTPUTS):
    sub = table[table["output_len"] == out_len]
    for mode, grp in sub.groupby("preemption"):
        ax.plot(grp["pcie_GBps"], grp["mean_e2e_s"], marker="o", label=mode)
    ax.set(title=f"output {out_len} tokens", xlabel="PCIe GB/s", ylabel="mean E2E (s)", xscale="log")
axes[0].legend()
plt.tight_layout()

# %% [markdown]
# Swap's cost is bytes over the bus, so it falls as PCIe gets faster; recompute's cost is a
# re-prefill that grows with the victim's context. Long generations make victims' contexts long,
# which favours swap on a fast bus; short ones favour recompute. Hybrid takes the cheaper side by
# the victim's generated length.

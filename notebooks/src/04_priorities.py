# %% [markdown]
# # 4. Priorities: an interactive class and a batch class sharing replicas
#
# Interactive chat (short prompts, people waiting) and batch jobs (long documents, nobody waiting)
# share one replica. With `fcfs` the batch jobs' long prefills delay the chat requests; with
# `priority` (lower value first) the interactive class is admitted first and may preempt running
# batch requests when memory is short.

# %%
import os

import pandas as pd

from sim.config import load_config
from sim.runner import simulate

SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
N = 200 if SMALL else 1500

base = {
    "model": {"name": "Llama-3-8B"},
    "hardware": {"gpu": "L40S", "num_gpu_blocks": 1500},
    "scheduler": {"policy": "chunked", "max_num_batched_tokens": 1024, "max_num_seqs": 64},
    "workload": {
        "kind": "poisson", "rate": 5.0, "num_requests": N, "seed": 7,
        "classes": [
            {"name": "interactive", "priority": 0, "fraction": 0.6,
             "prompt_len": {"kind": "lognormal", "median": 200, "sigma": 0.5},
             "output_len": {"kind": "lognormal", "median": 120, "sigma": 0.5}},
            {"name": "batch", "priority": 1, "fraction": 0.4,
             "prompt_len": {"kind": "lognormal", "median": 1800, "sigma": 0.4, "max": 3500},
             "output_len": {"kind": "lognormal", "median": 300, "sigma": 0.5}},
        ],
    },
}
results = {queue: simulate(load_config(base, [f"scheduler.queue={queue}"])) for queue in ("fcfs", "priority")}

# %%
class_col = "class"
rows = []
for queue, res in results.items():
    for cls, grp in res.requests.groupby(class_col):
        rows.append({"queue": queue, "class": cls, "requests": len(grp),
                     "TTFT p50 (ms)": grp["ttft_s"].median() * 1000, "TTFT p99 (ms)": grp["ttft_s"].quantile(0.99) * 1000,
                     "E2E p50 (s)": grp["e2e_s"].median(), "preemptions": int(grp["num_preemptions"].sum())})
table = pd.DataFrame(rows).set_index(["queue", "class"]).round(1)
table

# %%
# Priority scheduling protects the interactive class's tail TTFT, and the batch class pays for it.
assert table.loc[("priority", "interactive"), "TTFT p99 (ms)"] < table.loc[("fcfs", "interactive"), "TTFT p99 (ms)"]
assert table.loc[("priority", "batch"), "E2E p50 (s)"] >= table.loc[("fcfs", "batch"), "E2E p50 (s)"] * 0.9

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 3.5))
for queue, res in results.items():
    for cls, grp in res.requests.groupby(class_col):
        v = grp["ttft_s"].dropna().sort_values() * 1000
        ax.plot(v.to_numpy(), (v.rank(method="first") / len(v)).to_numpy(), label=f"{queue} / {cls}",
                ls="-" if queue == "priority" else "--")
ax.set(xscale="log", xlabel="TTFT (ms)", ylabel="fraction", title="TTFT by class and queue order")
ax.legend(fontsize=8)
plt.tight_layout()

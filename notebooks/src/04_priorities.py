# %% [markdown]
# # 4. Priorities: an interactive class and a batch class sharing replicas
#
# Interactive chat (short prompts, people waiting) and batch jobs (long documents, nobody waiting)
# share one replica. With `fcfs` the batch jobs' long prefills delay the chat requests; with
# `priority` (lower value first) the interactive class is admitted first and may preempt running
# batch requests when memory is short.
#
# The comparison is made at a load the replica keeps up with. We first offer far more than it can
# serve: while the backlog lasts it hands out first tokens at the rate it sustains, which the
# summary reports. Then both queue orders get 70% of that rate. (Past it, every class's queue grows
# under `fcfs`, and the batch class's under `priority`: latencies then describe a backlog that grows
# with the run's length, and the summary says `saturated`.)

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
# what the replica sustains: the rate of first tokens while a far larger load's backlog lasts
overload = simulate(load_config(base, ["workload.rate=100"])).summary
assert overload["saturated"]
RATE = round(0.7 * overload["sustainable_rate"], 2)
print(f"the replica sustains about {overload['sustainable_rate']:.2f} req/s; offered: {RATE} req/s")
results = {queue: simulate(load_config(base, [f"scheduler.queue={queue}", f"workload.rate={RATE}"]))
           for queue in ("fcfs", "priority")}

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
# Both runs kept up with the load: the figures are a steady state, not a backlog's growth.
assert not any(res.summary["saturated"] for res in results.values())
# Priority scheduling protects the interactive class's tail TTFT, and the batch class pays for it:
# its tail TTFT grows, and its running requests are preempted more often to admit interactive ones.
assert table.loc[("priority", "interactive"), "TTFT p99 (ms)"] < table.loc[("fcfs", "interactive"), "TTFT p99 (ms)"]
assert table.loc[("priority", "batch"), "TTFT p99 (ms)"] > table.loc[("fcfs", "batch"), "TTFT p99 (ms)"]
assert table.loc[("priority", "batch"), "preemptions"] > table.loc[("fcfs", "batch"), "preemptions"]

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

# %% [markdown]
# Under `fcfs` a chat request that arrives behind a few batch prompts waits for their prefills, so
# the two classes share one TTFT tail. Under `priority` the interactive class is scheduled first
# and is never the victim of a preemption: its tail TTFT falls to a few hundred ms, while the batch
# class's tail grows and its requests are preempted more often. The medians move little: at 70% of
# what the replica sustains the queue is usually short, and priorities reorder its tail.

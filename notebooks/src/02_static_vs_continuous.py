# %% [markdown]
# # 2. Static vs continuous batching
#
# The design notes' opening example: one **2,000-token request** arrives together with **63 short
# ones**. Static batching (the classic padded baseline) forms a batch of 64, pads every prompt to the
# longest and keeps every slot busy until the longest generation ends. Continuous (iteration-level)
# batching lets finished requests leave and waiting ones join at every step.
#
# We count *useful* work (live tokens) against *padded* work and compare latency and throughput.

# %%
import os

import pandas as pd

from policies import Request
from sim.config import load_config
from sim.runner import simulate

SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
NUM_WAVES = 2 if SMALL else 6  # batches of 64 arriving one after another


class FixedWorkload:
    """A hand-made list of requests (the Workload protocol: start() and on_finish())."""

    def __init__(self, rows):
        self.rows = rows

    def start(self):
        return [Request(i, t, p, o) for i, (t, p, o) in enumerate(self.rows)]

    def on_finish(self, request, now):
        return []


def wave(t0: float) -> list:
    """One 2,000-token request (with a long answer) among 63 short chat requests, all at t0."""
    return [(t0, 2000, 512)] + [(t0 + 0.001 * k, 64 + 7 * (k % 9), 16 + 5 * (k % 13)) for k in range(1, 64)]


rows = [r for w in range(NUM_WAVES) for r in wave(2.0 * w)]
base = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "A100-80G"},
        "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 8192}}
results = {
    policy: simulate(load_config(base, [f"scheduler.policy={policy}"]), workload=FixedWorkload(rows))
    for policy in ("static", "continuous")
}

# %%
table = []
for policy, res in results.items():
    s, steps = res.summary, res.steps
    live = steps["num_prefill_tokens"].sum() + steps["num_decode_tokens"].sum()
    padded = steps["num_padding_tokens"].sum()
    table.append({
        "policy": policy,
        "output tok/s": round(s["throughput"]["output_tokens_per_s"]),
        "mean E2E (s)": round(s["e2e_s"]["mean"], 2),
        "p50 E2E short (s)": round(res.requests.query("num_prompt_tokens < 2000")["e2e_s"].median(), 3),
        "useful tokens": int(live),
        "padding tokens": int(padded),
        "padding fraction": round(padded / (live + padded), 3),
        "duration (s)": round(s["duration_s"], 2),
    })
table = pd.DataFrame(table).set_index("policy")
table

# %%
# The static batch wastes work and makes the short requests wait for the long one; continuous
# batching finishes them as soon as they are done.
assert table.loc["static", "padding fraction"] > 0.3
assert table.loc["continuous", "padding tokens"] == 0
assert table.loc["continuous", "output tok/s"] > table.loc["static", "output tok/s"]
assert table.loc["continuous", "p50 E2E short (s)"] < table.loc["static", "p50 E2E short (s)"]

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(12, 3.5), sharey=True)
for ax, (policy, res) in zip(axes, results.items()):
    st = res.steps
    ax.stackplot(st["start"], st["num_decode_tokens"], st["num_padding_tokens"], labels=["useful decode", "padding"])
    ax.set(title=policy, xlabel="time (s)", ylabel="tokens per step", ylim=(0, 70))
axes[0].legend(loc="upper right")
plt.tight_layout()

# %% [markdown]
# Under `static`, once the short answers are done the batch keeps 63 padded slots alive for the
# long request's remaining ~500 steps: most of the computed tokens are padding, and the next wave
# waits for the whole batch. Under `continuous` the short requests leave after their last token and
# the next wave's requests join the running long one.

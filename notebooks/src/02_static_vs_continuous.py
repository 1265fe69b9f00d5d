# %% [markdown]
# # 2. Static vs continuous batching
#
# The design notes' opening example: one **2,000-token request** arrives together with **63 short
# ones**. Static batching (the classic padded baseline) forms a batch of 64, pads every prompt to the
# longest and keeps every slot busy until the longest generation ends. (For the whole padded batch
# to fit in one step, the token budget is 64 x 2,048 tokens, as in
# `examples/long_among_short_static.toml`; with a smaller budget the static scheduler would form
# smaller batches.) Continuous (iteration-level) batching lets finished requests leave and waiting
# ones join at every step.
#
# We count *useful* work (live tokens) against *padded* work and compare latency and throughput.

# %%
import os

import pandas as pd

from policies import Request
from sim.config import load_config
from sim.runner import simulate

SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
NUM_WAVES = 2 if SMALL else 6  # groups of 64 requests arriving one after another
BATCH = 64
WAVE_GAP = 2.0  # seconds between groups


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
    return [(t0, 2000, 512)] + [(t0, 64 + 7 * (k % 9), 16 + 5 * (k % 13)) for k in range(1, BATCH)]


rows = [r for w in range(NUM_WAVES) for r in wave(WAVE_GAP * w)]
base = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "A100-80G"},
        # the budget lets one step hold the padded prefill of the whole batch (64 x 2,048 tokens)
        "scheduler": {"max_num_seqs": BATCH, "max_num_batched_tokens": BATCH * 2048}}
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
# Static batching really forms batches of 64: the requests that start together.
static_req, static_steps = results["static"].requests, results["static"].steps
batch_sizes = static_req.groupby("first_scheduled_time").size()
print("static batch sizes:", sorted(int(n) for n in batch_sizes.unique()))
assert batch_sizes.max() == BATCH
# Once the short answers are done, the long request decodes alone and the other 63 slots are padding:
# that is most of the static decode steps.
decode_steps = static_steps[static_steps["num_prefill_tokens"] == 0]
alone = decode_steps[(decode_steps["num_decode_tokens"] == 1) & (decode_steps["num_padding_tokens"] == BATCH - 1)]
print(f"static: {len(alone)} of {len(decode_steps)} decode steps carry the long request alone")
assert len(alone) > 0.5 * len(decode_steps)
# Most of the tokens the static batches compute are padding; continuous batching computes none, has
# the higher throughput, and finishes the short requests without waiting for the long one.
assert table.loc["static", "padding fraction"] > 0.5
assert table.loc["continuous", "padding tokens"] == 0
assert table.loc["continuous", "useful tokens"] == table.loc["static", "useful tokens"]
assert table.loc["continuous", "output tok/s"] > table.loc["static", "output tok/s"]
assert table.loc["continuous", "p50 E2E short (s)"] < table.loc["static", "p50 E2E short (s)"]
# Under continuous batching a wave's requests join the batch when they arrive, while the long
# request of the wave before is still running (its ~500 decode steps outlast the 2 s between waves).
cont_req = results["continuous"].requests
assert (cont_req["first_scheduled_time"] - cont_req["arrival_time"]).max() < WAVE_GAP
assert cont_req.query("num_prompt_tokens == 2000")["e2e_s"].min() > WAVE_GAP

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
# Under `static`, the batch's prefill pads every prompt to 2,000 tokens, and once the short answers
# are done the batch keeps 63 padded slots alive for the long request's remaining decode steps:
# most of the computed tokens are padding (the table's padding fraction), and the next wave waits
# for the whole batch. Under `continuous` the short requests leave after their last token and the
# next wave's requests join the running long one, so the same useful tokens take a fraction of
# the time.

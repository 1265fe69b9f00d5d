# %% [markdown]
# # 5. Prefill/decode disaggregation vs colocation
#
# With **colocation** every replica runs prefills and decodes in the same steps, so long prompts
# inflate the decodes' inter-token latency (even chunked, every step carries some prefill work).
# With **disaggregation** (DistServe, Splitwise, Mooncake) a prefill pool computes prompts and sends
# their KV over a link to a decode pool that only decodes: TPOT becomes steady, at the price of a
# KV transfer and of GPUs that can't help each other.
#
# We compare both layouts on the **same 4 GPUs**, measure goodput (requests/s meeting both TTFT and
# TPOT targets) per GPU as the load grows, and show when each wins.

# %%
import os

import pandas as pd

from sim.capacity.executor import SerialExecutor
from sim.capacity.slo import SLO
from sim.capacity.sweep import run_sweep

SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
N = 150 if SMALL else 800
RATES = (20.0, 40.0) if SMALL else (10.0, 20.0, 30.0, 40.0, 50.0)

base = {
    "model": {"name": "Llama-3-8B"},
    "hardware": {"gpu": "H100-SXM", "tp": 1},
    "scheduler": {"policy": "chunked", "max_num_batched_tokens": 2048, "max_num_seqs": 128},
    "workload": {"kind": "poisson", "num_requests": N, "seed": 0,
                 "prompt_len": {"kind": "lognormal", "median": 2000, "sigma": 0.5, "max": 6000},
                 "output_len": {"kind": "lognormal", "median": 200, "sigma": 0.5, "max": 1000}},
}
layouts = {
    "colocated 4x": ["cluster.num_replicas=4", "cluster.router=least_tokens"],
    "disaggregated 2P+2D": ["disaggregation.enabled=true", 'disaggregation.link="nvlink"',
                            "disaggregation.prefill={count=2, tp=1}", "disaggregation.decode={count=2, tp=1}"],
    "disaggregated 3P+1D": ["disaggregation.enabled=true", 'disaggregation.link="nvlink"',
                            "disaggregation.prefill={count=3, tp=1}", "disaggregation.decode={count=1, tp=1}"],
}
slo = SLO(ttft_s=1.0, tpot_s=0.015)
frames = []
for name, overrides in layouts.items():
    table = run_sweep(base, [{"workload.rate": r} for r in RATES], slo=slo, executor=SerialExecutor(),
                      base_overrides=overrides, progress=False)
    table["layout"] = name
    frames.append(table)
sweep = pd.concat(frames, ignore_index=True)
cols = ["layout", "workload.rate", "num_gpus", "ttft_s_p90", "tpot_s_p90", "slo_attainment", "goodput_rps_per_gpu"]
sweep[cols].round(3)

# %%
# Same GPU count everywhere, and every request accounted for.
assert (sweep["num_gpus"] == 4).all()
assert (sweep["num_finished"] + sweep["num_rejected"] == sweep["num_requests"]).all()
# Disaggregation's decode pool never runs prefills, so its TPOT tail is lower than colocation's.
high = sweep[sweep["workload.rate"] == RATES[-1]].set_index("layout")
assert high.loc["disaggregated 2P+2D", "tpot_s_p90"] < high.loc["colocated 4x", "tpot_s_p90"]
# at high load with a strict TPOT target the balanced disaggregated layout has the better goodput
# per GPU, while a layout with too few decode GPUs loses to colocation
assert high.loc["disaggregated 2P+2D", "goodput_rps_per_gpu"] > high.loc["colocated 4x", "goodput_rps_per_gpu"]
assert high.loc["disaggregated 3P+1D", "goodput_rps_per_gpu"] < high.loc["colocated 4x", "goodput_rps_per_gpu"]

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 3, figsize=(14, 3.5))
for name, grp in sweep.groupby("layout"):
    axes[0].plot(grp["workload.rate"], grp["ttft_s_p90"], marker="o", label=name)
    axes[1].plot(grp["workload.rate"], grp["tpot_s_p90"] * 1000, marker="o", label=name)
    axes[2].plot(grp["workload.rate"], grp["goodput_rps_per_gpu"], marker="o", label=name)
axes[0].set(title="TTFT p90", xlabel="rate (req/s)", ylabel="s", yscale="log")
axes[1].set(title="TPOT p90", xlabel="rate (req/s)", ylabel="ms")
axes[2].set(title="goodput per GPU", xlabel="rate (req/s)", ylabel="req/s/GPU")
axes[2].legend(fontsize=8)
plt.tight_layout()

# %% [markdown]
# Read the goodput panel: with a strict TPOT target the colocated replicas lose requests to
# prefill interference as the load grows, while the disaggregated decode pool keeps TPOT low; the
# prefill pool's size then sets the TTFT knee (3P+1D holds TTFT longer, 2P+2D has more decode
# room). At low load both meet the SLO, and colocation, which lets every GPU do either job, is as
# good or better. `servesim plan` searches these layouts for you.

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
# a rate sweep offers every rate the same requests (common random numbers: `run_sweep`), so each
# layout's curve moves with the load, not with a fresh sample at each rate
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
by = sweep.set_index(["layout", "workload.rate"])
coloc, bal, few = "colocated 4x", "disaggregated 2P+2D", "disaggregated 3P+1D"
# A decode pool never runs prefills: at every rate the balanced layout's TPOT tail is below
# colocation's, and the single decode GPU of 3P+1D, which carries every decode, has the higher tail
# of the two disaggregated layouts.
for r in RATES:
    assert by.loc[(bal, r), "tpot_s_p90"] < by.loc[(coloc, r), "tpot_s_p90"]
    assert by.loc[(few, r), "tpot_s_p90"] > by.loc[(bal, r), "tpot_s_p90"]
# At the lowest rate every layout meets the SLO for (nearly) every request, and colocation's goodput
# per GPU is as good as either disaggregated layout's (within 2%: at a load every layout serves,
# goodput is the offered rate, and which is ahead is the last request's finish, or one request
# missed).
low = sweep[sweep["workload.rate"] == RATES[0]].set_index("layout")
assert (low["slo_attainment"] >= 0.99).all()
assert low.loc[coloc, "goodput_rps_per_gpu"] >= 0.98 * low.drop(coloc)["goodput_rps_per_gpu"].max()
# The best goodput per GPU each layout reaches over the sweep, and the highest rate at which it
# still meets the SLO for 90% of requests.
best = pd.DataFrame({
    "peak goodput/GPU": sweep.groupby("layout")["goodput_rps_per_gpu"].max(),
    "at rate": sweep.loc[sweep.groupby("layout")["goodput_rps_per_gpu"].idxmax()].set_index("layout")["workload.rate"],
    "highest rate with SLO >= 90%": sweep[sweep["slo_attainment"] >= 0.9].groupby("layout")["workload.rate"].max(),
})
# The balanced disaggregated layout has the best peak goodput per GPU and sustains the SLO up to the
# highest rate; the layout with too few decode GPUs has the lowest peak, below colocation's.
assert best["peak goodput/GPU"].idxmax() == bal
assert best["peak goodput/GPU"].idxmin() == few
assert best.loc[bal, "highest rate with SLO >= 90%"] > best.loc[coloc, "highest rate with SLO >= 90%"]
assert best.loc[few, "highest rate with SLO >= 90%"] <= best.loc[coloc, "highest rate with SLO >= 90%"]
best.round(3)

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
# Read the TPOT and goodput panels and the table above. With a strict TPOT target the colocated
# replicas lose requests to prefill interference as the load grows, while the balanced 2P+2D
# layout's decode pool keeps TPOT low: it reaches the best goodput per GPU, and it keeps 90% of
# requests within the SLO up to a higher rate than the other two. Moving a GPU from decode to prefill (3P+1D) does not help: its one decode GPU
# carries every decode, so its TPOT tail is the higher of the two disaggregated layouts and its peak
# goodput per GPU is the lowest of the three, below colocation's. (When that decode GPU is full the
# decode side pulls no new KV, and the prefilled requests wait on the prefill GPUs holding it, so
# its TTFT can climb as well.) At the lowest rate every layout meets the SLO, and colocation, which
# lets every GPU do either job, is as good (to within a request or two). `servesim plan` searches these
# layouts for you.

# %% [markdown]
# # 6. Predict, then verify
#
# servesim's promise is that a prediction can be checked. Here we do the whole loop on this CPU
# with the tiny Llama of `examples/tiny-llama`:
#
# 1. **calibrate**: profile the engine's own ops (GEMMs, attention over context, norms, sampling,
#    the per-step host overhead) and fit latency curves. The shipped profile is used where it was
#    measured on this very CPU; on any other machine its op times are that machine's, so the
#    notebook calibrates here first (a few minutes);
# 2. **predict**: simulate the workload with the profiled latency model;
# 3. **verify**: replay the same workload on the real torch engine, with the same scheduler
#    objects, in wall-clock time, and compare step times and TTFT/TPOT/E2E.
#
# On a GPU the same notebook runs with `DEVICE = "cuda"`.

# %%
import os
import tempfile
from pathlib import Path

import pandas as pd

import torch

from calibrate.op_bench import device_name
from sim.latency.profile import Profile
from calibrate.validate import profile_mismatches, validate

SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
DEVICE = "cuda" if os.environ.get("SERVESIM_DEVICE") == "cuda" else "cpu"
EXAMPLES = Path("..").resolve() / "examples" if Path("../examples").is_dir() else Path("examples").resolve()
config = EXAMPLES / "validate-chunked-128.toml"
shipped = EXAMPLES / "profiles" / "tiny-llama-cpu.json"
torch.set_num_threads(1)  # validate's default: the engine runs on one thread, as the shipped profile did
mismatches = (profile_mismatches(Profile.load(shipped).meta, device_name(torch.device(DEVICE)), "float32", 1)
              if DEVICE == "cpu" and shipped.is_file() else ["no shipped profile for this device"])
# the shipped profile where it was measured on this machine; else calibrate now (quick grid), except
# in the test suite's short run, which keeps the shipped one and says so
profile = shipped if (not mismatches or SMALL) and shipped.is_file() and DEVICE == "cpu" else None
print("profile:", "calibrated here now" if profile is None else "the shipped one",
      *(f"\n  {line}" for line in mismatches if profile is not None))
out = Path(tempfile.mkdtemp(prefix="servesim-verify-"))

report = validate(config, DEVICE, profile, out, quick=True, progress=False,
                  overrides=["workload.num_requests=12"] if SMALL else [])
print("per-step error: median {median:.1f}%, p90 {p90:.1f}%".format(**report["step_time_abs_pct_error"]))

# %%
rows = [{"metric": m, "stat": s, "predicted": v["predicted"], "measured": v["measured"],
         "abs % error": v["abs_pct_error"]}
        for m, block in report["metrics"].items() for s, v in block.items()]
table = pd.DataFrame(rows)
table.round(4)

# %%
# The report is complete and its errors are consistent with its own figures.
for row in rows:
    if row["measured"] and row["predicted"] is not None:
        assert abs(abs(row["predicted"] - row["measured"]) / abs(row["measured"]) * 100 - row["abs % error"]) < 1e-6
assert (out / "validation.json").is_file() and (out / "steps.csv").is_file()

# %%
from IPython.display import Image, display

for png in ("cdfs.png", "steps.png"):
    if (out / png).is_file():
        display(Image(filename=str(out / png)))

# %% [markdown]
# **Reading it.** The per-step error says how well the per-op curves add up to a whole step for
# the batch compositions this scheduler really formed; the request metrics add queueing on top, so
# a small step bias accumulates into TTFT under load. On a shared CPU the measured times include
# waiting for a core (`details.json` in the report folder compares against CPU time to separate
# that). A profile measured on another machine (the first cell says so, and `details.json` keeps it
# under `profile_mismatches`) predicts that machine's op times: its errors here are then mostly the
# two machines' difference, several times those of a profile calibrated here.
# `servesim validate CONFIG --device cpu` writes the same report with an HTML page.

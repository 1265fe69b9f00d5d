"""Compare: two to four configurations on the same workload, one table and overlaid charts.

The workload is set once; each column changes only the scheduler (and optionally GPU/TP), which is
the usual question: "no chunking vs budget 512 vs 256".
"""
import _path  # noqa: F401
import streamlit as st

from policies.config import POLICIES, PREEMPTIONS
from ui import charts, summary
from ui.forms import config_form
from ui.runs import run_with_status, validate
from ui.state import kept

st.title("Compare")
st.caption("The same workload under two to four scheduler configurations.")

with st.container(border=True):
    base, overrides, errors = config_form(prefix="cmp.", defaults={"policy": "continuous"}, per_column=True)

# each column's own scheduler inputs; an error in any other field (shared by every column) goes under the form
COLUMN_FIELDS = ("scheduler.policy", "scheduler.max_num_batched_tokens", "scheduler.preemption")


def column_label(i: int, policy: str, budget) -> str:
    """The column's label: "policy budget" until the user edits it (a keyed text_input keeps its first
    value whatever `value` says, so the default is written into the session state while it is unedited)."""
    key, auto_key = kept(f"cmp.{i}.label"), f"cmp.{i}.auto"  # an edited label comes back after a page switch
    auto = f"{policy} {budget}"
    if st.session_state.get(key) in (None, st.session_state.get(auto_key)):
        st.session_state[key] = auto
    st.session_state[auto_key] = auto
    return st.text_input("Label", key=kept(key))  # the label as shown kept (the default just written)


n = st.radio("Configurations", (2, 3, 4), index=1, horizontal=True, key=kept("cmp.count"))
presets = [("continuous", 2048), ("chunked", 512), ("chunked", 256), ("static", 2048)]
variants = []
cols = st.columns(n)
for i, col in enumerate(cols):
    with col:
        policy_default, budget_default = presets[i]
        policy = st.selectbox("Policy", POLICIES, index=POLICIES.index(policy_default), key=kept(f"cmp.{i}.policy"))
        budget = st.number_input("Budget", value=budget_default, step=64, key=kept(f"cmp.{i}.budget"))
        preemption = st.selectbox("Preemption", PREEMPTIONS, key=kept(f"cmp.{i}.preempt"))
        label = column_label(i, policy, budget)
        sched = {"policy": policy, "max_num_batched_tokens": int(budget), "preemption": preemption}
        variants.append((label, sched, st.empty()))

clicked = st.button("Run comparison", type="primary", key="cmp.run")
resolved_all, bad, shown = {}, False, set()
for label, sched, slot in variants:
    cfg = {**base, "scheduler": {**base["scheduler"], **sched}}
    if sched["preemption"] != "recompute":
        cfg["hardware"] = {**cfg["hardware"], "swap_space_gb": 16.0}
    resolved, field, message = validate(cfg, overrides)
    if message:
        if field in COLUMN_FIELDS:
            slot.error(message)  # this column's own inputs
        elif message not in shown:  # a shared field: once, under the form
            errors.show(field, message)
            shown.add(message)
        bad = True
    else:
        resolved_all[label] = resolved
if len(resolved_all) < len(variants) and not bad:
    st.warning("Two configurations share a label; give each its own.")
elif not bad and (clicked or st.session_state.get("cmp.last") == resolved_all):
    st.session_state["cmp.last"] = resolved_all
    outs = {label: run_with_status(cfg, label) for label, cfg in resolved_all.items()}
    outs = {k: v for k, v in outs.items() if v is not None}
    if outs:
        for label, out in outs.items():  # what Simulate says above its cards, per column
            for line in out.notes:
                st.info(f"{label}: {line}")
            for line in [summary.saturation_message(out.summary), *summary.rejection_messages(out.summary)]:
                if line:
                    st.warning(f"{label}: {line}")
        st.dataframe(summary.comparison_table({k: v.summary for k, v in outs.items()}), use_container_width=True)
        for fig in charts.metric_cdfs({k: v.requests for k, v in outs.items()}):
            st.plotly_chart(fig, use_container_width=True)

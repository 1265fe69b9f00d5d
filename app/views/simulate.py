"""Simulate: one configuration, its summary, CDFs, step timeline and per-request timeline."""
import _path  # noqa: F401  (puts app/ on sys.path)
import pandas as pd
import streamlit as st

from fidelity.benchmarks import predicted_benchmarks
from ui import charts, summary
from ui.forms import config_form
from ui.runs import run_with_status, validate
from ui.state import kept

st.title("Simulate")
st.caption("Pick a model, GPU and scheduler, describe the traffic, and see the latency it gets.")

with st.container(border=True):
    config, overrides, errors = config_form(prefix="sim.", sweep=True)
    clicked = st.button("Run simulation", type="primary", key="sim.run")

resolved, field, message = validate(config, overrides)
if message:
    errors.show(field, message)
elif "trace" in config.get("workload", {}).get("kind", "") and "trace" not in config["workload"]:
    pass  # waiting for an upload
elif clicked or st.session_state.get("sim.last") == resolved:
    st.session_state["sim.last"] = resolved
    out = run_with_status(resolved)
    if out is not None:
        for line in out.notes:
            st.info(line)
        summary.cards(out.summary)
        summary.cost_cards(out.summary)
        if out.summary.get("padding_fraction"):
            st.info(f"Padding: {out.summary['padding_fraction']:.1%} of computed tokens were wasted on padding.")
        if "phase" in out.requests:  # a load generator's benchmarks: each as its client reports it
            st.markdown("**Benchmarks** (as the load generator would report them)")
            bench = pd.DataFrame(predicted_benchmarks(out.requests))
            st.dataframe(bench, use_container_width=True, hide_index=True)
            curve = bench.sort_values("requests_per_s")
            c1, c2 = st.columns(2)
            c1.plotly_chart(charts.load_curves(curve, "requests_per_s", {"ttft_mean_ms": "mean TTFT (ms)"},
                                               "TTFT against the achieved rate"), use_container_width=True)
            c2.plotly_chart(charts.load_curves(curve, "requests_per_s", {"itl_mean_ms": "mean ITL (ms)"},
                                               "ITL against the achieved rate"), use_container_width=True)
        tabs = st.tabs(["Latency CDFs", "Step timeline", "Request timeline", "Tables", "Download"])
        with tabs[0]:
            for fig in charts.metric_cdfs({"this run": out.requests}):
                st.plotly_chart(fig, use_container_width=True)
        with tabs[1]:
            st.plotly_chart(charts.step_timeline(out.steps), use_container_width=True)
        with tabs[2]:
            n = len(out.requests)
            start = st.slider("First request", 0, max(n - 1, 0), 0, key=kept("sim.window")) if n > 1 else 0
            st.plotly_chart(charts.request_timeline(out.requests, start=start, count=40), use_container_width=True)
        with tabs[3]:
            st.dataframe(out.requests, use_container_width=True, height=300)
            st.dataframe(out.steps, use_container_width=True, height=300)
        with tabs[4]:
            st.download_button("requests.csv", out.requests.to_csv(index=False), "requests.csv", key="dl.req")
            st.download_button("steps.csv", out.steps.to_csv(index=False), "steps.csv", key="dl.steps")
            import json

            st.download_button("summary.json", json.dumps(out.summary, indent=2, default=str), "summary.json",
                               key="dl.sum")
            st.download_button("config.toml", out.config_toml, "config.toml", key="dl.cfg")

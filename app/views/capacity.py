"""Capacity: SLO targets and a target rate in; the layouts that meet them, their GPU count and cost out.

Candidates (GPU type x TP x replicas, colocated or disaggregated) are simulated at the target rate
with `sim.capacity.planner.plan`; the winners' latency-vs-load curve comes from a rate sweep,
which offers every rate the same requests (common random numbers) unless told to draw afresh.
"""
import _path  # noqa: F401
import dataclasses
import json

import pandas as pd
import streamlit as st

from policies import ConfigError
from specs import get_gpu, gpu_names
from ui import charts
from ui.forms import config_form
from ui.runs import canonical, validate
from ui.state import keep_value, kept, with_upload_names
from ui.summary import cost_cards, load_banner
from sim.capacity.executor import SerialExecutor
from sim.capacity.planner import CandidateGrid, plan
from sim.capacity.search import held_common
from sim.capacity.slo import SLO
from sim.capacity.sweep import run_sweep
from sim.config import load_config
from sim.runner import simulate


@st.cache_data(show_spinner=False, max_entries=16)
def run_plan(config_json: str, rate: float, slo_targets: tuple, grid_items: tuple, price_items: tuple):
    """`sim.capacity.planner.plan`, cached by its inputs (every widget change reruns the page)."""
    return plan(json.loads(config_json), rate, SLO(*slo_targets), CandidateGrid(**dict(grid_items)),
                prices=dict(price_items), executor=SerialExecutor(), progress=False)


@st.cache_data(show_spinner=False, max_entries=16)
def run_curve(config_json: str, rates: tuple, slo_targets: tuple, overrides: tuple, common: bool = True
              ) -> pd.DataFrame:
    """A rate sweep of one layout (its overrides), cached by its inputs; `common`: the same requests
    at every rate (`sim.capacity.sweep.rate_streams`)."""
    return run_sweep(json.loads(config_json), [{"workload.rate": r} for r in rates], slo=SLO(*slo_targets),
                     executor=SerialExecutor(), base_overrides=list(overrides), progress=False,
                     common_random_numbers=common)


@st.cache_data(show_spinner=False, max_entries=8)
def run_autoscaled(config_json: str) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """An autoscaled run's (summary, replicas, requests), cached by its config (kept across reruns)."""
    run = simulate(load_config(json.loads(config_json)))
    return run.summary, run.replicas, run.requests


def gpus_text(n) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def curve_rates(target: float) -> list[float]:
    """The load curve's rates around `target`: 6 significant figures (never rounded down to 0)."""
    return [float(f"{target * f:.6g}") for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)]


st.title("Capacity")
st.caption("How many GPUs of which kind, in which layout, serve this traffic within this SLO, and at what cost?")

with st.container(border=True):
    base, overrides, errors = config_form(
        prefix="cap.", defaults={"num_requests": 150}, show_slo=False,
        hardware_note="The plan tries the candidates below (GPU types, TP degrees, replica counts) in place of "
                      "this GPU, TP and Replicas; the autoscaling section at the end runs this GPU and TP.",
        rate_note="Rate: the target rate below (these requests are offered at it).")

st.markdown("**Targets**")
c = st.columns(4)
target_rate = c[0].number_input("Target rate (req/s)", value=4.0, step=0.5, key=kept("cap.target"))
slo_ttft = c[1].number_input("TTFT SLO (s)", value=1.0, step=0.1, key=kept("cap.ttft"))
slo_tpot = c[2].number_input("TPOT SLO (s)", value=0.08, step=0.01, key=kept("cap.tpot"))
slo_e2e = c[3].number_input("E2E SLO (s, 0 = none)", value=0.0, step=1.0, key=kept("cap.e2e"))
target_slot = st.empty()
st.caption("Each candidate layout is offered the form's requests at the target rate (Poisson, gamma or "
           "constant arrivals), so the run spans requests / target rate seconds.")
plan_base = base  # the autoscaling section's stepped load sets its own rates: it takes `base`
if base.get("workload", {}).get("kind") not in ("closed_loop", "trace") and target_rate > 0:
    # the plan's base is offered the target rate: its window (`hold_window_of`: requests x target /
    # base rate) is then the requests the user typed, not a count scaled by a rate nobody sees
    plan_base = {**base, "workload": {**base["workload"], "rate": float(target_rate)}}

st.markdown("**Candidates**")
c = st.columns(4)
gpus = c[0].multiselect("GPU types", gpu_names(), default=["H100-SXM", "A100-80G"], key=kept("cap.gpus"))
tps = c[1].multiselect("TP degrees", [1, 2, 4, 8], default=[1, 2], key=kept("cap.tps"))
replicas = c[2].multiselect("Replica counts (colocated)", [1, 2, 3, 4, 6, 8], default=[1, 2, 4], key=kept("cap.reps"))
layouts = c[3].multiselect("Layouts", ["colocated", "disaggregated"], default=["colocated"], key=kept("cap.layouts"))
max_gpus = st.slider("At most this many GPUs", 1, 16, 8, key=kept("cap.maxgpus"))
# a data editor cannot be set through the session state: the prices it gave are kept by the page and
# are its data the next time (after a page switch too)
kept_prices = keep_value("cap.price_map") or {}
prices = st.data_editor(pd.DataFrame({"gpu": gpus, "USD per GPU-hour": [kept_prices.get(g, get_gpu(g).price_per_hour)
                                                                        for g in gpus]}),
                        key="cap.prices", disabled=["gpu"], hide_index=True)
price_map = {str(k): float(v) for k, v in zip(prices["gpu"], prices["USD per GPU-hour"])}
keep_value("cap.price_map", {**kept_prices, **price_map})
grid_slot = st.empty()
clicked = st.button("Find the cheapest layout", type="primary", key="cap.run")

resolved, field, message = validate(plan_base, overrides)
problem = None
if message and field == "workload.rate":  # the target's rate (the form has no Rate input here)
    problem = target_slot.error(message.replace("workload.rate", "target rate", 1))
elif message:
    errors.show(field, message)
elif target_rate <= 0:
    problem = target_slot.error("target rate: must be > 0 requests per second")
else:
    try:
        slo = SLO(ttft_s=slo_ttft or None, tpot_s=slo_tpot or None, e2e_s=slo_e2e or None)
        if slo.is_empty:
            raise ConfigError("slo: give at least one target")
    except ValueError as exc:
        problem = target_slot.error(str(exc))
    try:
        grid = CandidateGrid(gpus=tuple(gpus), tps=tuple(tps), replicas=tuple(replicas), layouts=tuple(layouts),
                             max_gpus=int(max_gpus))
    except ValueError as exc:
        problem = grid_slot.error(str(exc))

    inputs = None
    if problem is None:  # the SLO and the grid were built (an error above leaves one unset)
        inputs = (canonical(resolved), float(target_rate), (slo.ttft_s, slo.tpot_s, slo.e2e_s),
                  tuple(sorted(dataclasses.asdict(grid).items())), tuple(sorted(price_map.items())))
    result = None
    if inputs is not None and (clicked or st.session_state.get("cap.last") == inputs):
        st.session_state["cap.last"] = inputs
        try:  # a price or TP the planner refuses (plan.prices, plan.tps) is said here, not a traceback
            with st.spinner(f"Simulating {len(grid.candidates())} layouts at {target_rate} req/s..."):
                result = run_plan(*inputs)
        except ValueError as exc:
            message = with_upload_names(str(exc))
            if message.startswith("workload.rate:"):  # the plan's rate is the target's (the form has no Rate)
                problem = target_slot.error(message.replace("workload.rate", "target rate", 1))
            else:
                problem = grid_slot.error(message)
    if result is not None:
        table = result.table()
        if result.by_gpus is None:
            st.warning("No candidate layout meets the SLO at this rate. Try more GPUs, larger TP or looser targets.")
        else:
            c = st.columns(4)
            winners = (("Fewest GPUs", result.by_gpus), ("Lowest cost", result.by_cost),
                       ("Lowest cost per 1M tokens", result.by_token_cost),
                       ("Least energy per token", result.by_energy))
            for col, (title, row) in zip(c, winners):
                if row is None:
                    continue
                desc = (f"{row['replicas']} x {row['gpu']} TP{row['tp']}" if row["layout"] == "colocated"
                        else f"{row['gpu']}: prefill {row['prefill']}, decode {row['decode']}")
                per_m, joules = row.get("cost_per_million_output_tokens"), row.get("energy_j_per_output_token")
                headline = {  # each card shows the figure it is titled after
                    "Fewest GPUs": gpus_text(row["num_gpus"]),
                    "Lowest cost": f"${row['cost_per_hour']:.2f}/h",
                    "Lowest cost per 1M tokens": "-" if per_m is None else f"${per_m:.3g}",
                    "Least energy per token": "-" if joules is None else f"{joules:.3g} J",
                }[title]
                col.metric(title, headline, help=desc)
                col.caption(f"{row['layout']}: {desc}; {gpus_text(row['num_gpus'])}, ${row['cost_per_hour']:.2f}/h; "
                            f"SLO attainment {row['slo_attainment']:.0%}"
                            + (f"; ${per_m:.3g} per 1M output tokens" if per_m is not None else "")
                            + (f"; {joules:.3g} J per output token" if joules is not None else ""))
        show = [k for k in ("layout", "gpu", "tp", "replicas", "prefill", "decode", "num_gpus", "cost_per_hour",
                            "cost_per_million_output_tokens", "energy_j_per_output_token",
                            "slo_attainment", "slo_met", "saturated", "fits", "ttft_s_p90", "tpot_s_p90", "error")
                if k in table]
        st.dataframe(table[show].sort_values(["fits", "num_gpus"], ascending=[False, True]),
                     use_container_width=True, hide_index=True)

        if result.by_cost is not None:
            win = result.by_cost
            win_overrides = [o for o in table.loc[table["point"] == win["point"], "overrides"].iloc[0].split(";") if o]
            win_overrides = [o for o in win_overrides if not o.startswith("workload.rate=")]
            curve = None
            common = st.checkbox("Same requests at every rate", value=True, key=kept("cap.common"),
                                 help="Common random numbers: request i has the same lengths at every rate and "
                                      "its arrival time scales as 1/rate, so the curves move with the load alone. "
                                      "Off: each rate draws its workload afresh, as a single run does.")
            try:  # like the plan's: a rate the simulator refuses is said here, not a traceback
                with st.spinner("Latency vs load for the cheapest layout..."):
                    curve = run_curve(inputs[0], tuple(curve_rates(float(target_rate))), inputs[2],
                                      tuple(win_overrides), common)
            except (ValueError, FileNotFoundError) as exc:
                st.error(with_upload_names(f"latency vs load: {exc}"))
            if curve is not None:
                latency = curve.copy()
                for col in ("ttft_s_p90", "tpot_s_p90", "e2e_s_p90"):
                    if col in latency:
                        latency[col] = latency[col] * 1000
                rate_title = "offered rate (requests/s)"
                st.plotly_chart(charts.load_curves(latency, "workload.rate", {
                    "ttft_s_p90": "TTFT p90", "tpot_s_p90": "TPOT p90", "e2e_s_p90": "E2E p90"},
                    "Latency vs load (cheapest layout)", x_title=rate_title, y_title="p90 latency (ms, log scale)",
                    log_y=True), use_container_width=True)
                st.plotly_chart(charts.load_curves(curve, "workload.rate", {"slo_attainment": "SLO attainment"},
                                                   "SLO attainment vs load", x_title=rate_title,
                                                   y_title="share of requests within the SLO"),
                                use_container_width=True)
                # the curve's points keep the form's request count (no held window)
                st.caption("Common across rates: " + held_common(load_config(resolved).workload, hold_window=False,
                                                                 common=common))

st.divider()
st.subheader("Autoscaling")
st.caption("Traffic that rises and falls: replicas added as a metric crosses its target (each serves once its "
           "model has loaded) and drained away as it falls. GPU-hours count every replica while it is up.")
c = st.columns(4)
low_rate = c[0].number_input("Low rate (req/s)", value=1.0, step=0.5, key=kept("auto.low"))
high_rate = c[1].number_input("Peak rate (req/s)", value=8.0, step=0.5, key=kept("auto.high"))
stage_s = c[2].number_input("Seconds per stage", value=60.0, step=10.0, key=kept("auto.stage"))
metric = c[3].selectbox("Metric", ["queue", "kv_usage", "ttft_p90"], key=kept("auto.metric"))
c = st.columns(4)
auto_target = c[0].number_input("Target", value=4.0, step=0.5, key=kept("auto.target"),
                                help="queue: requests waiting per replica; kv_usage: 0-1; ttft_p90: seconds")
min_r = c[1].number_input("Min replicas", value=1, min_value=1, step=1, key=kept("auto.min"))
max_r = c[2].number_input("Max replicas", value=4, min_value=1, step=1, key=kept("auto.max"))
delay = c[3].number_input("Provisioning delay (s, 0 = weights / load bandwidth)", value=20.0, min_value=0.0,
                          step=5.0, key=kept("auto.delay"))
auto_slot = st.empty()
auto_clicked = st.button("Simulate the autoscaled fleet", key="auto.run")
auto = ["workload.kind=staged",
        f"workload.stages=[[{low_rate}, {stage_s}], [{high_rate}, {stage_s}], [{low_rate}, {stage_s}]]",
        "workload.num_requests=100000", "autoscaling.enabled=true", f"autoscaling.min_replicas={int(min_r)}",
        f"autoscaling.max_replicas={int(max_r)}", f'autoscaling.metric="{metric}"',
        f"autoscaling.target={auto_target}", f"autoscaling.interval_s={max(stage_s / 12, 1.0)}"]
if delay != 0:  # 0: the default estimate; a negative value (past the input's minimum) is reported by validation
    auto.append(f"autoscaling.provisioning_delay_s={delay}")
scaled, field, message = validate(base, list(overrides) + auto)
# shown after a click and on every rerun after it while the inputs stay the same (like the plan's result)
if auto_clicked or (scaled is not None and st.session_state.get("auto.last") == scaled):
    run = None
    if message:
        auto_slot.error(with_upload_names(message))
    else:
        try:  # what only the run checks (the model fits the TP; no disaggregation) is said here
            with st.spinner("Simulating the stepped load with autoscaling..."):
                run = run_autoscaled(canonical(scaled))
        except (ValueError, FileNotFoundError) as exc:
            auto_slot.error(with_upload_names(str(exc)))
    if run is not None:
        st.session_state["auto.last"] = scaled
        run_summary, run_replicas, run_requests = run
        load_banner(run_summary)
        scaling = run_summary["autoscaling"]
        c = st.columns(3)
        c[0].metric("Replicas up (max / mean)", f"{scaling['max_replicas_up']} / {scaling['mean_replicas_up']:.2f}")
        c[1].metric("Scale-ups / downs", f"{scaling['num_scale_ups']} / {scaling['num_scale_downs']}")
        c[2].metric("Provisioning delay", f"{scaling['provisioning_delay_s']:.3g} s")
        cost_cards(run_summary)
        st.plotly_chart(charts.replica_timeline(run_replicas, run_requests), use_container_width=True)

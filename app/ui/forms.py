"""The configuration form shared by the Simulate, Compare and Capacity pages.

Each input has a placeholder right under it; after the whole config is validated the first bad
field's message is written into its placeholder, so the error appears next to the input it names.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

import streamlit as st

from fidelity.workloads import SWEEP_STRATEGIES, sweep_workload
from policies.config import POLICIES, PREEMPTIONS, QUEUES
from records.files import write_content_file
from sim.cluster.router import ROUTERS
from specs import gpu_names, model_names
from specs.hardware import DTYPES, KV_CACHE_DTYPES
from ui.state import kept, kept_upload, remember_upload, with_upload_names

WORKLOAD_KINDS = ("poisson", "gamma", "constant", "closed_loop", "trace")
# a load generator's benchmarks one after another (`fidelity.workloads.sweep_workload`): offered
# where one run's curve is shown
SWEEP = "benchmark sweep"
LENGTH_KINDS = ("lognormal", "constant", "uniform")
# the Requests input's bound, and the count above which the form says how long the run will take:
# a run costs about half a millisecond per request here, more with long outputs or several replicas
MAX_REQUESTS = 1_000_000
WARN_REQUESTS = 100_000
SECONDS_PER_REQUEST = 5e-4


class FieldErrors:
    """Placeholders keyed by config field (`section.key`), filled after validation."""

    def __init__(self) -> None:
        self.slots: dict[str, object] = {}
        self.fallback = None

    def slot(self, field: str) -> None:
        self.slots[field] = st.empty()

    def show(self, field: str | None, message: str) -> None:
        """Write `message` under the input for `field` (or its section), else at the form's end."""
        key = field or ""
        target = self.slots.get(key)
        if target is None:  # e.g. "workload.prompt_len.median" -> "workload.prompt_len"
            for name, slot in self.slots.items():
                if key.startswith(name) or name.startswith(key + "."):
                    target = slot
                    break
        (target or self.fallback or st).error(with_upload_names(message))


def _length_inputs(label: str, field: str, prefix: str, default_median: int, errors: FieldErrors) -> dict:
    kind = st.selectbox(f"{label} length", LENGTH_KINDS, key=kept(f"{prefix}{field}.kind"))
    if kind == "constant":
        value = st.number_input(f"{label} tokens", value=default_median, step=1, key=kept(f"{prefix}{field}.value"))
        spec = {"kind": "constant", "value": int(value)}
    elif kind == "uniform":
        lo = st.number_input(f"{label} min", value=max(1, default_median // 2), step=1,
                             key=kept(f"{prefix}{field}.low"))
        hi = st.number_input(f"{label} max", value=default_median * 2, step=1, key=kept(f"{prefix}{field}.high"))
        spec = {"kind": "uniform", "low": int(lo), "high": int(hi)}
    else:
        median = st.number_input(f"{label} median", value=float(default_median), step=16.0,
                                 key=kept(f"{prefix}{field}.median"))
        sigma = st.number_input(f"{label} sigma (log-space)", value=0.8, step=0.1, key=kept(f"{prefix}{field}.sigma"))
        spec = {"kind": "lognormal", "median": float(median), "sigma": float(sigma)}
    errors.slot(f"workload.{field}")
    return spec


def _upload_trace(uploaded) -> str:
    """Save an uploaded trace (`name`, `getvalue()`) to a temporary file (its format is detected by
    the workload reader).

    The file is named by its content, so the page's reruns (one per widget change) reuse one file
    and one config: no new file each time, and the cached simulation is found again.
    """
    suffix = Path(uploaded.name).suffix or ".csv"
    path = str(write_content_file(tempfile.gettempdir(), "servesim-trace-", uploaded.getvalue(), suffix))
    remember_upload(path, uploaded.name)  # its errors name the user's file, not this copy
    return path


def _trace_input(prefix: str) -> str | None:
    """The uploaded trace's temporary path (None: nothing uploaded); the last upload is replayed
    after a page switch (and said so)."""
    upload = kept_upload("Trace (CSV: arrival_time,prompt_tokens,output_tokens; Azure CSV; Mooncake JSONL)",
                         f"{prefix}trace")
    if upload is None:
        st.info("Upload a trace file to replay it.")
        return None
    name, data, earlier = upload
    if earlier:
        st.caption(f"Replaying {name}, uploaded earlier; upload a file to replace it.")
    return _upload_trace(SimpleNamespace(name=name, getvalue=lambda: data))


def requests_note(n: int) -> None:
    """Say how long a run of `n` requests will take where it is long (its status box counts them)."""
    if n > WARN_REQUESTS:
        minutes = n * SECONDS_PER_REQUEST / 60
        st.warning(f"{n:,} requests: about {minutes:.0f} minutes of simulation (roughly "
                   f"{SECONDS_PER_REQUEST * 1000:g} ms per request, more with long outputs or several "
                   "replicas); the status box counts the requests as they end. Fewer requests give the same "
                   "latency figures for a steady load.")


def _sweep_inputs(prefix: str, errors: FieldErrors, seed: int) -> dict:
    """A benchmark sweep's strategy, rates, requests per benchmark and synthetic lengths, drawn with `seed`."""
    c1, c2, c3 = st.columns(3)
    strategy = c1.selectbox("Benchmarks", SWEEP_STRATEGIES, key=kept(f"{prefix}sw.kind"),
                            help="sweep: one at a time, all at once, then constant rates between the two")
    rate = c2.text_input("Rate", value="5", key=kept(f"{prefix}sw.rate"),
                         help="sweep: benchmarks; constant/poisson: req/s, a list (1,2,4) runs one each; "
                              "concurrent: streams")
    n = c3.number_input("Requests per benchmark", value=60, step=10, max_value=MAX_REQUESTS,
                        key=kept(f"{prefix}sw.n"))
    c1, c2, c3 = st.columns(3)
    prompt = c1.number_input("Prompt tokens (mean)", value=1024, step=64, key=kept(f"{prefix}sw.prompt"))
    output = c2.number_input("Output tokens (mean)", value=128, step=16, key=kept(f"{prefix}sw.output"))
    shared = c3.number_input("Shared prefix tokens", value=0, step=64, key=kept(f"{prefix}sw.prefix"))
    errors.slot("profile")
    requests_note(int(n))  # per benchmark: the sweep runs a few of them
    return sweep_workload(strategy, rate, int(n), int(prompt), int(output), int(shared), seed=seed)


def config_form(prefix: str = "", defaults: dict | None = None, workload: bool = True,
                show_slo: bool = True, sweep: bool = False, per_column: bool = False,
                hardware_note: str | None = None,
                rate_note: str | None = None) -> tuple[dict, list[str], FieldErrors]:
    """Render the inputs; return (config dict, extra `section.key=value` overrides, error slots).
    `sweep`: also offer a benchmark sweep as the workload (its benchmarks one after another).
    `per_column`: the page sets policy, token budget and preemption itself (Compare's columns), so
    the form leaves those inputs out (the config holds the defaults).
    `hardware_note`: said under the model and hardware inputs (what the page does with them).
    `rate_note`: the page sets `workload.rate` itself; the form shows this note in place of the Rate
    input and leaves the rate out of the config."""
    d = {"model": "Llama-3-8B", "gpu": "H100-SXM", "policy": "chunked", "budget": 512, **(defaults or {})}
    errors = FieldErrors()
    models, gpus = model_names(), gpu_names()

    st.markdown("**Model and hardware**")
    if hardware_note:
        st.caption(hardware_note)
    c1, c2, c3 = st.columns(3)
    model = c1.selectbox("Model", models, index=models.index(d["model"]) if d["model"] in models else 0,
                         key=kept(f"{prefix}model"))
    gpu = c2.selectbox("GPU", gpus, index=gpus.index(d["gpu"]) if d["gpu"] in gpus else 0, key=kept(f"{prefix}gpu"))
    tp = c3.selectbox("Tensor parallel", (1, 2, 4, 8), index=(1, 2, 4, 8).index(d.get("tp", 1)),
                      key=kept(f"{prefix}tp"))
    errors.slot("model.name")
    errors.slot("hardware")
    c1, c2, c3 = st.columns(3)
    # what-ifs of precision: FP8 or 4-/8-bit integer weights, an FP8 cache ("auto": the model's own)
    weights = c1.selectbox("Weights", DTYPES, key=kept(f"{prefix}dtype"),
                           help="auto: the model's; fp8: FP8 weights; w4a16 / w8a16: AWQ/GPTQ-style integer weights")
    kv_cache = c2.selectbox("KV cache", KV_CACHE_DTYPES, key=kept(f"{prefix}kvdtype"),
                            help="auto: the activations' 16 bits; fp8 halves the cache (twice the blocks)")
    errors.slot("model.dtype")
    c1, c2, _ = st.columns(3)
    replicas = c1.number_input("Replicas", value=int(d.get("replicas", 1)), step=1, key=kept(f"{prefix}replicas"))
    router = c2.selectbox("Router", ROUTERS, key=kept(f"{prefix}router"), disabled=replicas <= 1)
    errors.slot("cluster")

    st.markdown("**Scheduler**")
    c1, c2, c3 = st.columns(3)
    if per_column:  # the page's columns set these
        policy, budget, preemption = d["policy"], d["budget"], PREEMPTIONS[0]
    else:
        policy = c1.selectbox("Policy", POLICIES, index=POLICIES.index(d["policy"]), key=kept(f"{prefix}policy"))
        budget = c2.number_input("Token budget (max_num_batched_tokens)", value=int(d["budget"]), step=64,
                                 key=kept(f"{prefix}budget"))
    seqs = c3.number_input("max_num_seqs", value=int(d.get("max_num_seqs", 128)), step=8, key=kept(f"{prefix}seqs"))
    errors.slot("scheduler.max_num_batched_tokens")
    c1, c2, c3 = st.columns(3)
    queue = c1.selectbox("Queue order", QUEUES, key=kept(f"{prefix}queue"))
    if not per_column:
        preemption = c2.selectbox("Preemption", PREEMPTIONS, key=kept(f"{prefix}preemption"))
    prefix_cache = c3.checkbox("Prefix caching", value=bool(d.get("prefix_caching", False)), key=kept(f"{prefix}pc"))
    errors.slot("scheduler")

    config = {
        "model": {"name": model, "dtype": weights, "kv_cache_dtype": kv_cache},
        "hardware": {"gpu": gpu, "tp": int(tp)},
        "scheduler": {"policy": policy, "max_num_batched_tokens": int(budget), "max_num_seqs": int(seqs),
                      "queue": queue, "preemption": preemption},
        "cache": {"enable_prefix_caching": bool(prefix_cache)},
    }
    if replicas != 1:  # several replicas behind a router (a value < 1 is reported by validation)
        config["cluster"] = {"num_replicas": int(replicas), "router": router}
    if preemption != "recompute":
        config["hardware"]["swap_space_gb"] = 16.0

    if workload:
        st.markdown("**Workload**")
        c1, c2, c3 = st.columns(3)
        kind = c1.selectbox("Arrivals", WORKLOAD_KINDS + ((SWEEP,) if sweep else ()), key=kept(f"{prefix}wkind"))
        wl: dict = {"kind": kind, "seed": int(c3.number_input("Seed", value=int(d.get("seed", 0)), step=1,
                                                              key=kept(f"{prefix}seed")))}
        if kind == SWEEP:
            wl = _sweep_inputs(prefix, errors, wl["seed"])
        elif kind == "trace":
            trace = _trace_input(prefix)
            if trace is not None:
                wl["trace"] = trace
        else:
            if kind == "closed_loop":
                wl["num_users"] = int(c2.number_input("Concurrent users", value=32, step=1,
                                                      key=kept(f"{prefix}users")))
            elif rate_note:  # the page sets the rate (Capacity: its target rate)
                c2.caption(rate_note)
            else:
                wl["rate"] = float(c2.number_input("Rate (requests/s)", value=float(d.get("rate", 4.0)), step=0.5,
                                                   key=kept(f"{prefix}rate")))
                if kind == "gamma":
                    wl["cv"] = float(st.number_input("Burstiness (CV of inter-arrival times)", value=2.0, step=0.5,
                                                     key=kept(f"{prefix}cv")))
            errors.slot("workload.rate")
            wl["num_requests"] = int(st.number_input("Requests", value=int(d.get("num_requests", 200)), step=50,
                                                     max_value=MAX_REQUESTS, key=kept(f"{prefix}n")))
            requests_note(wl["num_requests"])
            errors.slot("workload.num_requests")
            c1, c2 = st.columns(2)
            with c1:
                wl["prompt_len"] = _length_inputs("Prompt", "prompt_len", prefix, int(d.get("prompt_median", 512)),
                                                  errors)
            with c2:
                wl["output_len"] = _length_inputs("Output", "output_len", prefix, int(d.get("output_median", 128)),
                                                  errors)
        errors.slot("workload")
        config["workload"] = wl

    if show_slo:
        st.markdown("**SLO (for goodput)**")
        c1, c2, c3 = st.columns(3)
        ttft = c1.number_input("TTFT target (s)", value=float(d.get("slo_ttft", 2.0)), step=0.1,
                               key=kept(f"{prefix}sttft"))
        tpot = c2.number_input("TPOT target (s)", value=float(d.get("slo_tpot", 0.1)), step=0.01,
                               key=kept(f"{prefix}stpot"))
        e2e = c3.number_input("E2E target (s, 0 = none)", value=0.0, min_value=0.0, step=1.0, key=kept(f"{prefix}se2e"))
        config["slo"] = {"ttft_s": float(ttft), "tpot_s": float(tpot)}
        if e2e != 0:  # 0 is "none"; a negative value (set past the input's minimum) is reported by validation
            config["slo"]["e2e_s"] = float(e2e)
        errors.slot("slo")

    raw = st.text_area("Advanced: extra settings, one `section.key=value` per line", value="",
                       key=kept(f"{prefix}extra"), height=68)
    overrides = [line.strip() for line in raw.splitlines() if line.strip()]
    errors.slot("--set")
    errors.fallback = st.empty()
    return config, overrides, errors

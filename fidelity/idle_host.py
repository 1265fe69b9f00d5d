"""The engine's per-step host time, measured where nothing else moves: requests alone in the engine.

A request that arrives at an idle engine and finishes before the next one arrives decodes one token
per step, alone. Its measured TPOT is then one decode step of batch 1: the GPU's kernels plus the
engine's host work between them (scheduling, input preparation, sampling, output handling). Less
what the GPU model alone predicts for that step (`idle_host_times`), it leaves the host time per
step, request by request, with no fitting and no queueing in the way; its median over a run is one
number per run, and a run is never predicted with its own. The same requests give the front end's
share of TTFT (`frontend_gaps`), where a client timed them too what its TTFT holds beyond the
server's (`client_gaps`, a line over prompt tokens: `client_line`), and the slowdown of a busy
engine's compute-bound GEMMs (`compute_factors`).

`IdleHostLayer` (`fidelity.host_layer`, re-exported here) is the file form (`fidelity/host/*.json`);
its `host_s_for(run)` is the median over the *other* runs (all of them for a run it never saw, such
as an unseen deployment of the same engine on the same GPU). Regenerate with `measure_layer`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fidelity.host_layer import FORMAT, HOST_DIR, VLLM_V1_H100, IdleHostLayer, shipped_layer  # noqa: F401 (re-exported)
from fidelity.host_overhead import HostOverhead
from fidelity.predict import gpu_latency_model, predict_run
from fidelity.run_config import config_dict_for_run
from fidelity.runs import async_scheduling
from fidelity.sources.guidellm_results import successes_with_spans
from policies import BatchPlan, Request, ScheduledSeq
from sim.config import load_config
from sim.latency.roofline import RooflineConstants


def alone(requests: pd.DataFrame) -> pd.Series:
    """Requests (index aligned) that ran with no other request in flight, from their own timings."""
    r = requests.sort_values("arrival_time")
    end = r["arrival_time"] + r["e2e_s"]
    prev_end = end.cummax().shift(1).fillna(-np.inf)
    next_arrival = r["arrival_time"].shift(-1).fillna(np.inf)
    return ((r["arrival_time"] > prev_end) & (end < next_arrival)).reindex(requests.index)


def one_decode_step(gpu_model, context_len: int) -> float:
    """GPU seconds of a decode step of one sequence whose KV holds `context_len` tokens."""
    seq = ScheduledSeq(Request(0, 0.0, context_len, 2), 1, context_len - 1, True)
    return float(gpu_model.step_time(BatchPlan(0, (seq,))))


def idle_host_times(run, gpu_model, min_output_tokens: int = 4, samples: int = 8) -> np.ndarray:
    """Host seconds per step of each request of `run` that was alone in the engine: its measured
    TPOT less the GPU time `gpu_model` (no host terms) gives its decode steps, averaged over
    `samples` context lengths between its first and last token. Empty for an engine with async
    scheduling (`fidelity.runs.async_scheduling`): there a lone decode step takes max(GPU, host),
    so its TPOT does not show the host time."""
    if async_scheduling(run.server):
        return np.zeros(0)
    meas = run.requests
    if not len(meas) or meas["tpot_s"].isna().all():
        return np.zeros(0)
    meas = meas[alone(meas) & (meas["num_output_tokens"] >= min_output_tokens) & meas["tpot_s"].notna()]
    out = []
    for r in meas.itertuples():
        ctx = np.linspace(r.num_prompt_tokens + 1, r.num_prompt_tokens + r.num_output_tokens - 1, samples)
        gpu = float(np.mean([one_decode_step(gpu_model, int(c)) for c in ctx]))
        out.append(r.tpot_s - gpu)
    return np.asarray(out, dtype=float)


def frontend_gaps(run) -> np.ndarray:
    """Seconds of the TTFT of each request alone in the engine spent outside it: TTFT - time in
    queue - time in prefill, from vLLM's own spans (the API process handing the request to the
    engine core, and the first token back); empty when the run has no such spans.

    Only requests alone count: with others running, the gap also holds the rest of the step the
    request arrived in (the engine core takes new requests between steps, and vLLM's queue time
    starts there): about half a step, 15-20 ms on the 34B runs, which the simulation already
    charges as the wait for the next step boundary.
    """
    path = Path(run.path) / "per_request_server_spans.csv"
    if not path.is_file():
        return np.zeros(0)
    df = pd.read_csv(path)
    need = ("ttft_s", "time_in_queue_s", "time_in_prefill_s", "start_unix_ns", "e2e_s")
    if any(c not in df for c in need):
        return np.zeros(0)
    df = df[alone(df.assign(arrival_time=df["start_unix_ns"] / 1e9)).to_numpy()]
    gap = (df["ttft_s"] - df["time_in_queue_s"] - df["time_in_prefill_s"]).to_numpy(float)
    # spans whose phases were not recorded (zeros) say nothing about the gap
    ok = np.isfinite(gap) & (df["time_in_prefill_s"].to_numpy(float) > 0) & (gap >= 0)
    return gap[ok]


def client_gaps(run) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, seconds) per request alone in the engine that its client timed too
    (guidellm's `guidellm_per_request.csv`, joined to vLLM's spans by response id): the client's
    TTFT less the span's. That is what lies outside the server's records: the client's send, HTTP
    and tokenizing before vLLM's arrival stamp, the first chunk's way back. Each is a difference of
    the two machines' clocks, in opposite directions, so their sum carries no clock offset.
    Empty without both files."""
    j = successes_with_spans(Path(run.path))
    need = ("ttft_ms", "ttft_s", "start_unix_ns", "e2e_s", "prompt_tokens")
    if j is None or any(c not in j for c in need):
        return np.zeros(0), np.zeros(0)
    # alone among all the engine's requests, those the client saw fail too
    spans = pd.read_csv(Path(run.path) / "per_request_server_spans.csv")
    lone = spans.loc[alone(spans.assign(arrival_time=spans["start_unix_ns"] / 1e9)).to_numpy(), "request_id"]
    j = j[j["request_id"].isin(set(lone.astype(str)))]
    gap = (j["ttft_ms"].astype(float) / 1e3 - j["ttft_s"].astype(float)).to_numpy(float)
    tokens = j["prompt_tokens"].to_numpy(float)
    ok = np.isfinite(gap) & np.isfinite(tokens) & (gap >= 0)
    return tokens[ok], gap[ok]


def client_line(tokens: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """(intercept, slope >= 0) of `seconds` over `tokens`, Theil-Sen (the median of pairwise slopes):
    a run's first request pays its warm-up (30 ms against 9), which would tilt a least-squares line."""
    x, y = np.asarray(tokens, float), np.asarray(seconds, float)
    i, j = np.triu_indices(len(x), k=1)
    keep = x[j] != x[i]
    slope = max(float(np.median((y[j][keep] - y[i][keep]) / (x[j][keep] - x[i][keep]))), 0.0) if keep.any() else 0.0
    return max(float(np.median(y - slope * x)), 0.0), slope


def measure_layer(runs, gpu_model: str = "aiconfigurator", min_requests: int = 5) -> IdleHostLayer:
    """The layer of `runs`: each run's median over its idle-engine requests (at least `min_requests`)."""
    per_run, counts, front, client = {}, {}, {}, {}
    for run in runs:
        gaps = frontend_gaps(run)
        if len(gaps) >= min_requests:
            front[run.name] = float(np.median(gaps))
        tokens, beyond = client_gaps(run)
        if len(beyond) >= min_requests:
            client[run.name] = client_line(tokens, beyond)
        config = load_config(config_dict_for_run(run))
        # kernel times as measured (factor 1): a one-sequence decode step is a weight read, which
        # the sustained-compute factor does not touch, and the layer must not depend on itself
        model, kind = gpu_latency_model(run, config, gpu_model, compute_factor=1.0)
        h = idle_host_times(run, model)
        if len(h) >= min_requests:
            per_run[run.name], counts[run.name] = max(float(np.median(h)), 0.0), int(len(h))
    compute = {}
    for run in runs:
        f = compute_factors(run, per_run.get(run.name), front.get(run.name, 0.0))
        if len(f) >= min_requests:
            compute[run.name] = float(np.median(f))
    return IdleHostLayer(per_run, source=", ".join(sorted({r.source for r in runs})), gpu_model=gpu_model,
                         num_requests=counts, frontend_per_run=front, compute_factor_per_run=compute,
                         client_frontend_per_run=client)


PROBE_FACTOR = 1.5


def compute_factors(run, host_s: float | None, frontend_s: float, min_share: float = 0.1) -> np.ndarray:
    """Per request alone in the engine (and in the simulation): the factor on the compute-bound
    share of the GEMMs (`calibrate.importers.aiconfigurator.sustained`: the clock a busy engine
    sustains under its power limit; memory-bound decode work is not slowed) that makes its
    predicted TTFT the measured one. An idle request's TTFT is its prefill steps, linear in the
    factor: two simulations (factor 1 and `PROBE_FACTOR`, the run's own host and front-end times)
    give the line. Requests whose prefill is less than `min_share` compute-bound at the probe say
    little and are left out (a 64-token chunk is a weight read)."""
    if host_s is None or not len(run.requests) or run.requests["ttft_s"].isna().all():
        return np.zeros(0)
    terms = HostOverhead(schedule_s=host_s, schedule_per_seq_s=RooflineConstants().per_seq_overhead_s,
                         frontend_s=frontend_s)
    sims = [predict_run(run, terms, gpu_model="aiconfigurator", compute_factor=f).requests for f in (1.0, PROBE_FACTOR)]
    t = [s.assign(req_id=s["req_id"].astype(str)).set_index("req_id") for s in sims]
    meas = run.requests.assign(req_id=run.requests["req_id"].astype(str))
    meas = meas[alone(meas).to_numpy()].set_index("req_id")
    ids = meas.index.intersection(t[0].index[alone(t[0]).to_numpy()])
    t1, t2, m = t[0].loc[ids, "ttft_s"], t[1].loc[ids, "ttft_s"], meas.loc[ids, "ttft_s"]
    slope = (t2 - t1) / (PROBE_FACTOR - 1.0)
    ok = (slope * (PROBE_FACTOR - 1.0) >= min_share * t1) & np.isfinite(m)
    return (1.0 + (m[ok] - t1[ok]) / slope[ok]).to_numpy(float)

"""Step time of vLLM on A100 from DistServe's fitted per-iteration coefficients (measured there).

DistServe's alignment data ships two profiles of OPT-13B/66B on A100-80GB, per-iteration fits of a
prefill and a decode (`DistServeLatencyModel`): `profiler-a100-80g.vllm.json` is labelled vLLM,
`profiler-a100-80g.distserve.json` DistServe's own engine. The vLLM runs' own steps choose between
them: in a prefill-only v0 engine, the gap between two first tokens bounds the next prefill's time
from above (`distserve_prefill_gaps`), and those bounds sit below the vllm file's prefill and near
the distserve file's. So prefill steps take the distserve file's prefill fit, and decode steps the
vllm file's decode fits: the runs' decodes are *slower* than either file (host work per sequence),
so they do not prefer the cheaper one. Figures: docs/results/2026-12-02-docstring-history.md.
Both files carry DistServe's alignment of its simulator to these very runs (`DISTSERVE_ALIGNMENT`):
`--fit source` divides it out, the other modes keep it and the report says so.

Also here: DistServe's vLLM runs (`load_distserve_run`, with the baseline's launch arguments) and
the v0 engine's host time read off their timestamps (`distserve_host_prior`).
"""
from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from fidelity.host_overhead import HostOverhead
from fidelity.runs import RealRun, ServerArgs, measured_table
from policies import BatchPlan, ConfigError


# --- DistServe's vLLM runs ----------------------------------------------------------------------
DISTSERVE_RUN_NAME = re.compile(r"^vllm-(\d+)-([\d.]+)\.exp$")
#: the source (campaign) of every run file here: DistServe's alignment data, A100, OPT-13B
DISTSERVE_SOURCE = "distserve-a100-opt13b"
#: why `reproduce` does not predict DistServe's own system's runs (said after what they are)
DISTSERVE_SYSTEM_NOTE = ", not one vLLM engine; benchmarks/distserve_replay.py replays those"
#: what each request of a run file records (times in seconds, latencies in ms)
RECORD_FIELDS = ("prompt_len", "output_len", "issue_time", "first_token_time", "complete_time", "ttft_ms",
                 "latency_ms")

# The vLLM baseline's launch command, read from DistServe's source history (not from its timings):
# `evaluation/2-benchmark-serving/2-start-api-server.py` as of 8f13114 (2024-04-23), the version
# current when the alignment data was committed (20a1633, 2024-04-23), and unchanged in these
# values through HEAD. Earlier versions (2024-04-17..22) launched with a budget of 65536, and the
# runs' co-scheduled prefills fit those better than this one's padding cap (module note below and
# docs/results/2026-12-02-transfer.md); which version made the runs is not recorded, so the one
# current at the data's commit is taken, choosing nothing by the runs.
DISTSERVE_VLLM_LAUNCH_ORIGIN = ("DistServe evaluation/2-benchmark-serving/2-start-api-server.py @ 8f13114 "
                                "(2024-04-23; the alignment data: 20a1633, 2024-04-23)")
DISTSERVE_VLLM_LAUNCH: dict[str, object] = {
    "max_num_batched_tokens": 16384, "max_num_seqs": 1024, "block_size": 16, "gpu_memory_utilization": 0.95,
    "swap_space": 16, "dtype": "float16", "seed": 0, "tensor_parallel_size": 1,
    # vLLM 0.2.3's cap on a padded prompt batch (its default too), simulated. Six of the eight runs
    # never pad past it; the two rate-2 runs do (a 323-token prompt padded to 1728 next to a
    # 1728-token one, `distserve_prefill_batches`): they look like another launch (bde5424's 524288,
    # docs/results/2026-12-02-distserve.md), but only their own timings say so, so the script stands
    "max_paddings": 256,
    "engine_use_ray": True, "worker_use_ray": True, "entrypoint": "vllm.entrypoints.api_server",
}
# What the runs' timings show agrees with the script's budget (`distserve_prefill_batches`): prompts
# whose first tokens arrive within 0.6 ms of each other were prefilled in one step, and five of the
# eight runs co-schedule 1699 + 1728 = 3427 prompt tokens in one step, above vLLM's default of 2048.
DISTSERVE_MAX_NUM_BATCHED_TOKENS = int(DISTSERVE_VLLM_LAUNCH["max_num_batched_tokens"])
DISTSERVE_UNMODELLED: dict[str, str] = {}
# The engine: DistServe's fork of vLLM v0.2.3 (interestingLSY/vllm distserve-baseline-vllm-v0.2.3, a
# timing-only diff from v0.2.3), read from DistServe's source, not from the runs' timings. v0.2.3 sizes
# its KV pool by torch's peak allocation (`hardware.memory_profiling = "v0-peak"`, `fidelity.run_config`)
DISTSERVE_VLLM_RELEASE = "0.2.3"
DISTSERVE_VLLM_RELEASE_ORIGIN = ("DistServe distserve/evaluation/0-test-single-forward-performance/INSTRUCTIONS.md "
                                 "@ 8f13114: 'We use version v0.2.3' (branch distserve-baseline-vllm)")
# first tokens closer than this were sampled by the same step (the gap between steps is >= 20 ms)
DISTSERVE_SAME_STEP_S = 0.002


def distserve_prefill_steps(path: Path) -> list[list[dict]]:
    """The request records of each prefill step of one DistServe vLLM run, in order, read off its
    measured first tokens (vLLM v0 runs prefill-only steps: requests whose first tokens arrive
    within `DISTSERVE_SAME_STEP_S` of each other were prefilled together)."""
    recs = ast.literal_eval(Path(path).read_text().split("\n", 1)[0])
    recs = sorted(recs, key=lambda r: r["first_token_time"])
    steps: list[list[dict]] = []
    last = -math.inf
    for r in recs:
        if r["first_token_time"] - last >= DISTSERVE_SAME_STEP_S:
            steps.append([])
        steps[-1].append(r)
        last = r["first_token_time"]
    return steps


def distserve_prefill_batches(path: Path) -> list[list[int]]:
    """The prompt lengths of each prefill step of one DistServe vLLM run (`distserve_prefill_steps`).
    Evidence for the server arguments the files do not record."""
    return [[int(r["prompt_len"]) for r in step] for step in distserve_prefill_steps(path)]


def distserve_prefill_gaps(path: Path) -> list[tuple[int, float]]:
    """(prompt tokens, seconds) for each one-prompt prefill step of one DistServe vLLM run whose
    request was already waiting when the previous prefill step ended: prefill-first, the v0 engine
    prefills it in the very next step, so the gap between the two steps' first tokens is that
    prefill's time plus any host time between steps (an upper bound on the prefill itself)."""
    steps = distserve_prefill_steps(path)
    gaps = []
    for prev, cur in zip(steps, steps[1:]):
        end = prev[0]["first_token_time"]
        if len(cur) == 1 and cur[0]["issue_time"] < end:
            gaps.append((int(cur[0]["prompt_len"]), cur[0]["first_token_time"] - end))
    return gaps


def distserve_requests(path: Path) -> pd.DataFrame:
    """The measured per-request table (`fidelity.runs.measured_table`) of one DistServe file, of its
    vLLM runs or of its own system's: the first line a Python literal list of `RECORD_FIELDS` records."""
    path = Path(path)
    try:
        recs = _read_exp(path)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        recs = None
    if not isinstance(recs, list) or not recs or not all(isinstance(r, dict) for r in recs):
        raise ConfigError(f"run: {path.name}: expected a list of per-request records on the first line")
    missing = [k for k in RECORD_FIELDS if any(k not in r for r in recs)]
    if missing:  # the inputs folder holds files of the same names: what was sent, not what was measured
        raise ConfigError(f"run: {path.name}: its records lack {', '.join(missing)} (a DistServe run records "
                          f"{', '.join(RECORD_FIELDS)}); a workload input is not a run")
    return measured_table({
        "arrival_time": np.array([r["issue_time"] for r in recs], dtype=float),
        "num_prompt_tokens": [int(r["prompt_len"]) for r in recs],
        "num_output_tokens": [int(r["output_len"]) for r in recs],
        "ttft_s": np.array([r["ttft_ms"] for r in recs]) / 1e3,
        "e2e_s": np.array([r["latency_ms"] for r in recs]) / 1e3,
    }, path)


def load_distserve_run(path: Path) -> RealRun:
    """One DistServe alignment file `vllm-N-RATE.exp`: vLLM serving OPT-13B on one A100-80GB.

    The file's first line is a Python literal list of per-request records (times in seconds of a
    monotonic clock, latencies in ms). vLLM of early 2024 (the v0 engine): no chunked prefill, no
    prefix caching; the engine arguments are the launch script's (`DISTSERVE_VLLM_LAUNCH`, listed
    in settings.csv with where they were read; those simulated otherwise, `DISTSERVE_UNMODELLED`).
    The KV capacity is vLLM 0.2.3's profiling rule (`specs.memory`, `hardware.memory_profiling =
    "v0-peak"`, set by `fidelity.run_config` from the release) at the script's 0.95:
    `profile_data/max_num_tokens.csv` next to the runs is the capacity of DistServe's *own* engine
    (its simulator's input for DistServe instances), not of the vLLM baseline.
    """
    path = Path(path)
    if not DISTSERVE_RUN_NAME.match(path.name):  # its folder also holds DistServe's own runs and the inputs
        own = f" (distserve-*.exp: DistServe's own disaggregated system{DISTSERVE_SYSTEM_NOTE})" \
            if path.name.startswith("distserve-") else ""
        raise ConfigError(f"run: {path.name} is not a DistServe vLLM run{own}; a run file must be one "
                          "(vllm-N-RATE.exp), else give a run's folder or a folder of runs")
    requests = distserve_requests(path)
    # the v0 engine (no chunked prefill) of DistServe's vLLM 0.2.3; budget, sequences, block size and
    # padding cap the script's
    launch = DISTSERVE_VLLM_LAUNCH
    server = ServerArgs(model="facebook/opt-13b", gpu="A100", tensor_parallel_size=1, max_model_len=2048,
                        max_num_batched_tokens=int(launch["max_num_batched_tokens"]),
                        max_num_seqs=int(launch["max_num_seqs"]), enable_chunked_prefill=False,
                        block_size=int(launch["block_size"]), enable_prefix_caching=False,
                        engine_version=DISTSERVE_VLLM_RELEASE, max_paddings=int(launch["max_paddings"]),
                        gpu_memory_utilization=float(launch["gpu_memory_utilization"]))
    recorded = {k: (v, DISTSERVE_VLLM_LAUNCH_ORIGIN) for k, v in launch.items()}
    recorded["engine_version"] = (DISTSERVE_VLLM_RELEASE, DISTSERVE_VLLM_RELEASE_ORIGIN)
    return RealRun(name=path.stem, source=DISTSERVE_SOURCE, path=path, server=server, requests=requests,
                   recorded_args=recorded, unmodelled_args=DISTSERVE_UNMODELLED, measured_by="distserve")


# --- DistServe's fitted coefficients ------------------------------------------------------------
PREFILL_FILE = "profiler-a100-80g.distserve.json"  # whose prefill fit vLLM's runs follow (module doc)

# The shipped files are byte for byte DistServe's 4c68ed9 (2024-05-01, "Realign the curve"), which
# baked into the profiled curves the fudge factors its simulator had applied at run time
# (`simdistserve/estimators/time_estimator.py`) while it was being aligned with these very runs
# (the alignment data 20a1633, 2024-04-23, and its `align_with_real.py`). Every entry of both files is
# its parent's (1f7fbf7) times these factors, exactly; the profiled curves are 3261c76's (2024-04-22).
# So the shipped coefficients hold a term fitted on the runs' own source: `pre_alignment` divides it
# out. Evidence and figures: docs/results/2026-12-02-distserve.md. Not tuned here: read off that history.
DISTSERVE_ALIGNED_IN = "DistServe 4c68ed9 (2024-05-01, 'Realign the curve')"
DISTSERVE_ALIGNMENT: dict[str, dict[str, tuple[float, str]]] = {  # file -> fit -> (factor, where it was set)
    "profiler-a100-80g.vllm.json": {
        # 8a653a7 (04-24, "Add fundge overhead"): x1.2, "Fudge factor of other overhead in the `step`
        # function, especially ray overhead"; raised to x1.4 by 3cb7744 (04-25)
        "prefill": (1.4, "DistServe 3cb7744 (2024-04-25; x1.2 since 8a653a7)"),
        "decoding_smallbs": (1.2, "DistServe 297ffdd (2024-04-25)"),
        "decoding_largebs": (1.2, "DistServe 297ffdd (2024-04-25)"),
    },
    "profiler-a100-80g.distserve.json": {  # DistServe's own engine: x1.05 in 8a653a7, x1.1 in 3cb7744
        "prefill": (1.1, "DistServe 3cb7744 (2024-04-25; x1.05 since 8a653a7)"),
    },
}


def alignment_note(used: list[tuple[str, str]], pre_alignment: bool) -> str:
    """One line for a report: which DistServe alignment factors the (file, fit) pairs `used` carry,
    or (`pre_alignment`) that they were divided out; "" when none does."""
    parts = [f"{fit} x{DISTSERVE_ALIGNMENT[name][fit][0]:g} ({name}; {DISTSERVE_ALIGNMENT[name][fit][1]})"
             for name, fit in used if fit in DISTSERVE_ALIGNMENT.get(name, {})]
    if not parts:
        return ""
    if pre_alignment:
        return ("DistServe coefficients with DistServe's alignment to these runs divided out (its profiled "
                f"curves, 3261c76): {'; '.join(parts)}, baked in by {DISTSERVE_ALIGNED_IN}")
    return ("DistServe coefficients INCLUDE DistServe's alignment of its simulator to these runs: "
            f"{'; '.join(parts)}, baked in by {DISTSERVE_ALIGNED_IN}")


def _coefficients(path: Path, model: str, tp: int, pre_alignment: bool = False) -> dict:
    """One (model, tp) entry of a coefficient file; `pre_alignment`: `DISTSERVE_ALIGNMENT` divided out."""
    data = json.loads(Path(path).read_text())
    try:
        entry = dict(data[model][str(tp)])
    except KeyError:
        raise ConfigError(f"hardware.profile: {path} has no coefficients for {model} at tp={tp}") from None
    if pre_alignment:
        for fit, (factor, _) in DISTSERVE_ALIGNMENT.get(Path(path).name, {}).items():
            entry[fit] = [v / factor for v in entry[fit]]
    return entry


class DistServeLatencyModel:
    """`step_time(plan)` from DistServe's coefficients for one (model, tp), in ms per iteration:

    - a prefill iteration: `a + b * sum(prompt lens) + c * sum(prompt len ** 2)`;
    - a decode iteration: `a + b * sum(context lens) + c * batch_size`, with one fit for batches
      below `decoding_large_small_bs_threshold` and another at or above it.

    The prefill fit is the distserve file's when it lies next to `path` (`PREFILL_FILE`;
    `own_prefill=True` keeps `path`'s), the decode fits `path`'s. A step mixing both (not produced
    by the prefill-first engine of that era) costs the sum. Padding entries of a prompt
    (`ScheduledSeq(is_padding=True)`, a padded prefill batch) lengthen their own request's prompt:
    the fit charges what the padded kernel computes, sum(len) and sum(len ** 2) over the padded
    lengths. `pre_alignment`: every fit with DistServe's alignment factors divided out
    (`DISTSERVE_ALIGNMENT`: the profiled curves, before DistServe aligned them with these runs).
    """

    def __init__(self, path: str | Path, model: str = "facebook/opt-13b", tp: int = 1,
                 own_prefill: bool = False, pre_alignment: bool = False) -> None:
        path = Path(path)
        c = _coefficients(path, model, tp, pre_alignment)
        self.prefill = c["prefill"]
        self.prefill_source = path.name
        sibling = path.with_name(PREFILL_FILE)
        if not own_prefill and sibling != path and sibling.is_file():
            self.prefill = _coefficients(sibling, model, tp, pre_alignment)["prefill"]
            self.prefill_source = sibling.name
        self.decode_source = path.name
        self.pre_alignment = pre_alignment
        self.decode_small = c["decoding_smallbs"]
        self.decode_large = c["decoding_largebs"]
        self.threshold = int(c["decoding_large_small_bs_threshold"])

    def alignment_note(self) -> str:
        """What the report says about DistServe's alignment factors in these coefficients."""
        used = [(self.prefill_source, "prefill"), (self.decode_source, "decoding_smallbs"),
                (self.decode_source, "decoding_largebs")]
        return alignment_note(used, self.pre_alignment)

    def prefill_ms(self, lens: list[int]) -> float:
        """One prefill iteration over prompts of `lens` tokens (padded lengths), in ms."""
        a, b, c = self.prefill
        return a + b * sum(lens) + c * sum(n * n for n in lens)

    def decode_ms(self, batch: int, context: int) -> float:
        """One decode iteration of `batch` sequences attending to `context` tokens in all, in ms."""
        a, b, c = self.decode_small if batch < self.threshold else self.decode_large
        return a + b * context + c * batch

    def step_time(self, plan: BatchPlan) -> float:
        lens: dict = {}  # req_id -> prompt tokens this step, its padding included
        ctx, batch = 0, 0
        padding = []
        for s in plan.seqs:
            if s.is_padding:
                padding.append(s)
            elif s.is_decode:
                batch += 1
                ctx += s.context_len
            else:
                lens[s.request.req_id] = s.num_tokens
        for s in padding:  # a prompt's padding lengthens it (even a 1-token one); else a padded decode
            rid = s.request.req_id
            if rid in lens:
                lens[rid] += s.num_tokens
            elif s.is_decode:
                batch += 1
                ctx += s.context_len
            else:
                lens[rid] = s.num_tokens
        ms = 0.0
        if lens:
            ms += self.prefill_ms(list(lens.values()))
        if batch:
            ms += self.decode_ms(batch, ctx)
        return max(ms, 1e-3) * 1e-3


# --- the v0 engine's host time, measured on the runs' own timestamps ---------------------------------
# DistServe's coefficients time the forward pass; the runs' requests also wait for the host work of
# vLLM v0's single process (sampling, detokenizing and streaming every running request's text, per
# step) and for the API front end before a prompt reaches the engine. Both are read off each run's
# measured timestamps, without simulating it (`measure_run_host`), and a run is predicted with the
# median over the *other* runs of its folder (`distserve_host_prior`), as `fidelity.idle_host`
# does for vLLM v1.
MIN_DECODE_STEPS = 10  # requests with fewer decode steps say little about a step's time
NUM_SAMPLES = 24  # points per request's decode window at which the running batch is read
MAX_IDLE_BATCH = 5  # front end: requests arriving while at most this many decode (little waiting)


def _read_exp(path: Path) -> list[dict]:
    return ast.literal_eval(Path(path).read_text().split("\n", 1)[0])


def measure_run_host(path: str | Path, model: DistServeLatencyModel) -> tuple[float, float]:
    """(host seconds per running sequence per decode step, front-end seconds per request) of one
    DistServe vLLM run (`vllm-N-RATE.exp`), from its measured timestamps alone.

    Per sequence: a request decodes `output_len - 1` steps between its first and last token; the
    prefill steps of other requests in that window (their first tokens, grouped by step as in
    `distserve_prefill_batches`) take `model.prefill_ms`; the rest, divided by the
    steps, is its measured decode step. The model's decode step for the batch actually running
    (requests between first and last token, contexts growing at their own measured rate) is
    subtracted; the run's value is sum(excess) / sum(running batch), a per-sequence time.
    Front end: requests that arrive with nothing waiting and at most `MAX_IDLE_BATCH` decoding, and
    are prefilled by the next step: TTFT - the prefill step - half the decode step in flight
    (GPU + the per-sequence host time); the median.
    """
    recs = _read_exp(path)
    t0 = min(r["issue_time"] for r in recs)
    issue = np.array([r["issue_time"] - t0 for r in recs])
    first = np.array([r["first_token_time"] - t0 for r in recs])
    done = np.array([r["complete_time"] - t0 for r in recs])
    lens = np.array([int(r["prompt_len"]) for r in recs])
    outs = np.array([int(r["output_len"]) for r in recs])
    per_token = np.where(outs > 1, (done - first) / np.maximum(outs - 1, 1), 1.0)  # s per decode step
    # prefill steps: first tokens within DISTSERVE_SAME_STEP_S of each other
    order = np.argsort(first)
    step_of = np.zeros(len(recs), dtype=int)
    for k in range(1, len(order)):
        gap = first[order[k]] - first[order[k - 1]]
        step_of[order[k]] = step_of[order[k - 1]] + (gap >= DISTSERVE_SAME_STEP_S)
    num_steps = int(step_of.max()) + 1
    step_time = np.array([first[step_of == s].min() for s in range(num_steps)])
    step_ms = np.array([model.prefill_ms(lens[step_of == s].tolist()) for s in range(num_steps)])

    def batch_at(t: float) -> tuple[int, float]:
        on = (first <= t) & (done > t)
        return int(on.sum()), float((lens[on] + (t - first[on]) / per_token[on]).sum())

    excess, batch = 0.0, 0.0
    for i in np.flatnonzero(outs - 1 >= MIN_DECODE_STEPS):
        a, b = first[i], done[i]
        stalls = step_ms[(step_time > a + DISTSERVE_SAME_STEP_S) & (step_time <= b + 1e-6)].sum()
        measured = ((b - a) * 1e3 - stalls) / (outs[i] - 1)
        points = a + (b - a) * (np.arange(NUM_SAMPLES) + 0.5) / NUM_SAMPLES
        composition = [batch_at(t) for t in points]
        excess += measured - np.mean([model.decode_ms(n, c) for n, c in composition])
        batch += np.mean([n for n, _ in composition])
    per_seq_ms = max(0.0, excess / batch) if batch else 0.0

    fronts = []
    for i in range(len(recs)):
        waiting = ((issue < issue[i]) & (first > issue[i])).sum()
        between = ((step_time > issue[i]) & (step_time < first[i] - DISTSERVE_SAME_STEP_S)).sum()
        n, c = batch_at(issue[i])
        if waiting or between or n > MAX_IDLE_BATCH:
            continue
        in_flight = 0.5 * (model.decode_ms(n, c) + per_seq_ms * n) if n else 0.0
        fronts.append((first[i] - issue[i]) * 1e3 - step_ms[step_of[i]] - in_flight)
    front_ms = max(0.0, float(np.median(fronts))) if fronts else 0.0
    return per_seq_ms * 1e-3, front_ms * 1e-3


_HOST: dict[tuple, tuple[float, float]] = {}  # (run file, coefficients file) -> measure_run_host


def distserve_host_prior(run, coefficients: str | Path):
    """`HostOverhead` for DistServe vLLM run `run`: the medians of `measure_run_host` over the other
    `vllm-*.exp` runs in its folder (never the run's own timestamps); no terms without another run."""
    model = DistServeLatencyModel(coefficients, run.server.model, run.server.tensor_parallel_size)
    others = [p for p in sorted(Path(run.path).parent.glob("vllm-*.exp"))
              if DISTSERVE_RUN_NAME.match(p.name) and p.resolve() != Path(run.path).resolve()]
    values = []
    for p in others:
        key = (str(p.resolve()), str(Path(coefficients).resolve()), model.prefill_source)
        if key not in _HOST:
            _HOST[key] = measure_run_host(p, model)
        values.append(_HOST[key])
    if not values:
        return HostOverhead()
    per_seq, front = np.median(np.array(values), axis=0)
    return HostOverhead(sample_per_seq_s=float(per_seq), frontend_s=float(front))

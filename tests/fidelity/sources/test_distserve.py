"""DistServe's A100 step-time model, the evidence behind its choices, and the v0 host time read off
the runs' timestamps (`fidelity.sources.distserve`, its run readers)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from policies import BatchPlan, Request, ScheduledSeq
from fidelity.sources.distserve import DistServeLatencyModel, distserve_host_prior, measure_run_host
from fidelity.sources.distserve import (DISTSERVE_MAX_NUM_BATCHED_TOKENS, distserve_prefill_batches,
                                        distserve_prefill_gaps, load_distserve_run)

MODEL = "facebook/opt-13b"
VLLM = {"prefill": [20.0, 0.14, 8e-6], "decoding_smallbs": [23.0, 6e-4, 0.06],
        "decoding_largebs": [20.0, 5e-4, 0.12], "decoding_large_small_bs_threshold": 95}
ENGINE = {**VLLM, "prefill": [18.0, 0.10, 7e-6]}


def write_profiles(folder: Path, sibling: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "profiler-a100-80g.vllm.json"
    path.write_text(json.dumps({MODEL: {"1": VLLM}}))
    if sibling:
        (folder / "profiler-a100-80g.distserve.json").write_text(json.dumps({MODEL: {"1": ENGINE}}))
    return path


def prompt_seq(req_id: int, n: int, padding: bool = False) -> ScheduledSeq:
    return ScheduledSeq(Request(req_id, arrival_time=0.0, num_prompt_tokens=max(n, 1), max_tokens=4), n, 0, not padding, padding)


def test_prefill_takes_the_sibling_engine_fit_unless_told_otherwise(tmp_path):
    path = write_profiles(tmp_path)
    plan = BatchPlan(0, (prompt_seq(0, 1000),))
    a, b, c = ENGINE["prefill"]
    assert DistServeLatencyModel(path).step_time(plan) == pytest.approx((a + b * 1000 + c * 1e6) * 1e-3)
    a, b, c = VLLM["prefill"]
    assert DistServeLatencyModel(path, own_prefill=True).step_time(plan) == pytest.approx((a + b * 1000 + c * 1e6) * 1e-3)
    lone = write_profiles(tmp_path / "alone", sibling=False)
    assert DistServeLatencyModel(lone).step_time(plan) == pytest.approx((a + b * 1000 + c * 1e6) * 1e-3)


def test_padding_is_charged_as_the_padded_prompt_lengths(tmp_path):
    """A padded batch of prompts 300 and 700 computes two 700-token prompts: sum(len) = 1400 and
    sum(len^2) = 2 * 700^2, i.e. the charged padding is sum(max_len - len_i) = 400 tokens."""
    model = DistServeLatencyModel(write_profiles(tmp_path))
    padded = BatchPlan(0, (prompt_seq(0, 700), prompt_seq(1, 300), prompt_seq(1, 400, padding=True)))
    unpadded = BatchPlan(0, (prompt_seq(0, 700), prompt_seq(1, 300)))
    assert model.step_time(padded) == pytest.approx(model.prefill_ms([700, 700]) * 1e-3)
    assert model.step_time(padded) > model.step_time(unpadded)
    assert padded.num_padding_tokens == 700 - 300
    one = BatchPlan(0, (prompt_seq(0, 700), prompt_seq(1, 699), ScheduledSeq(padded.seqs[1].request, 1, 699, False, True)))
    assert model.step_time(one) == pytest.approx(model.prefill_ms([700, 700]) * 1e-3)  # not a decode


def test_padded_continuous_batches_are_charged_in_the_simulator(tmp_path):
    """End to end through the scheduler: a padded batch costs the padded prefill."""
    from policies import CacheConfig, SchedulerConfig, StepResult
    from policies.schedulers import make_scheduler

    model = DistServeLatencyModel(write_profiles(tmp_path))
    sched = make_scheduler(SchedulerConfig(policy="continuous", max_num_batched_tokens=4096, max_model_len=2048,
                                           max_paddings=256), CacheConfig(num_gpu_blocks=1024))
    for i, n in enumerate((500, 300, 450, 400)):  # padding 200, +50, then +100 > 256: the last waits
        sched.add_request(Request(i, 0.0, n, 2), 0.0)
    plan = sched.schedule(0.0)
    assert plan.num_scheduled_tokens == {0: 500, 1: 300, 2: 450}
    assert plan.num_padding_tokens == 250
    assert model.step_time(plan) == pytest.approx(model.prefill_ms([500] * 3) * 1e-3)
    sched.update(plan, StepResult(model.step_time(plan), None, frozenset()), 0.1)


# --- the host time measured on a run's timestamps: synthetic runs with a known truth -------------

def lone_requests(model: DistServeLatencyModel, host_s: float, front_s: float, n: int = 6) -> list[dict]:
    """Requests far apart (each alone in the engine): TTFT = front end + prefill step; each decode
    step = the decode fit at its context + the host time of its one sequence."""
    recs, t = [], 100.0
    for i in range(n):
        p, out = 200 + 150 * i, 40 + 10 * i
        first = t + front_s + model.prefill_ms([p]) * 1e-3
        steps = [model.decode_ms(1, p + k) * 1e-3 + host_s for k in range(1, out)]
        done = first + sum(steps)
        recs.append({"prompt_len": p, "output_len": out, "issue_time": t, "first_token_time": first,
                     "complete_time": done, "ttft_ms": (first - t) * 1e3,
                     "tpot_ms": (done - first) / (out - 1) * 1e3, "latency_ms": (done - t) * 1e3})
        t = done + 5.0
    return recs


def write_exp(path: Path, recs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(repr(recs) + "\n{\n\tnum_requests: %d\n" % len(recs))
    return path


def test_only_a_measured_vllm_run_file_loads_as_a_run(tmp_path):
    """DistServe's folders also hold its own disaggregated runs and the workload inputs (same names,
    no timings): each is refused in one line naming what it is, never simulated as a vLLM run."""
    from policies import ConfigError

    model = DistServeLatencyModel(write_profiles(tmp_path / "profile_data"))
    recs = lone_requests(model, host_s=4e-4, front_s=0.02)
    from fidelity.run_folders import find_runs

    run_file = write_exp(tmp_path / "vllm-6-1.exp", recs)
    assert load_distserve_run(run_file).num_requests == len(recs)
    assert [r.name for r in find_runs(run_file)] == ["vllm-6-1"]  # `reproduce FILE`, as `--from-run FILE`
    with pytest.raises(ConfigError, match="^run: distserve-6-1.exp is not a DistServe vLLM run .*disaggregated"):
        load_distserve_run(write_exp(tmp_path / "distserve-6-1.exp", recs))
    inputs = [{"prompt_len": r["prompt_len"], "output_len": r["output_len"], "start_time": r["issue_time"]}
              for r in recs]
    with pytest.raises(ConfigError, match="^run: vllm-6-1.exp: its records lack issue_time, first_token_time"):
        load_distserve_run(write_exp(tmp_path / "inputs" / "vllm-6-1.exp", inputs))
    (tmp_path / "bad" / "vllm-6-1.exp").parent.mkdir()
    (tmp_path / "bad" / "vllm-6-1.exp").write_text("not a literal\n")
    with pytest.raises(ConfigError, match="^run: vllm-6-1.exp: expected a list of per-request records"):
        load_distserve_run(tmp_path / "bad" / "vllm-6-1.exp")


def test_measure_run_host_recovers_the_per_sequence_host_time_and_front_end(tmp_path):
    model = DistServeLatencyModel(write_profiles(tmp_path / "profile_data"))
    path = write_exp(tmp_path / "runs" / "vllm-6-1.exp", lone_requests(model, host_s=4e-4, front_s=0.02))
    per_seq, front = measure_run_host(path, model)
    assert per_seq == pytest.approx(4e-4, rel=0.05)
    assert front == pytest.approx(0.02, rel=0.02)


def test_host_prior_never_uses_the_runs_own_timestamps(tmp_path):
    coefficients = write_profiles(tmp_path / "profile_data")
    model = DistServeLatencyModel(coefficients)
    a = write_exp(tmp_path / "runs" / "vllm-6-1.exp", lone_requests(model, host_s=2e-4, front_s=0.01))
    b = write_exp(tmp_path / "runs" / "vllm-6-2.exp", lone_requests(model, host_s=6e-4, front_s=0.03))
    prior_a = distserve_host_prior(load_distserve_run(a), coefficients)
    prior_b = distserve_host_prior(load_distserve_run(b), coefficients)
    assert prior_a.sample_per_seq_s == pytest.approx(6e-4, rel=0.05)  # run b's, never a's own
    assert prior_b.sample_per_seq_s == pytest.approx(2e-4, rel=0.05)
    assert prior_a.frontend_s == pytest.approx(0.03, rel=0.02)


# --- the evidence in the shipped runs ----------------------------------------------------------------

def distserve_files(shared_data: Path) -> tuple[list[Path], Path]:
    root = shared_data / "groundtruth" / "distserve-a100-opt13b"
    runs = sorted((root / "data-ground-truth" / "opt-13b-sharegpt").glob("vllm-*.exp"))
    if not runs:
        pytest.skip(f"no DistServe vLLM runs under {root}")
    return runs, root / "profile_data" / "profiler-a100-80g.vllm.json"


def test_the_runs_prefill_batches_exceed_vllms_default_budget(shared_data):
    """The loader's budget is above every co-scheduled prefill and vLLM's default (2048) is below
    some; some steps (of the two rate-2 runs, another launch: the loader keeps the script's cap)
    pad a prompt by far more than vLLM 0.2.2-0.3's `max_paddings` (256)."""
    runs, _ = distserve_files(shared_data)
    batches = [b for path in runs for b in distserve_prefill_batches(path)]
    assert sum(len(b) for b in batches) == sum(load_distserve_run(p).num_requests for p in runs)
    largest = max(sum(b) for b in batches)
    assert 2048 < largest <= DISTSERVE_MAX_NUM_BATCHED_TOKENS
    assert max(len(b) * max(b) - sum(b) for b in batches) > 256


def test_the_runs_back_to_back_prefills_follow_the_chosen_prefill_fit(shared_data):
    """A back-to-back prefill's gap bounds its step time from above: its lower envelope must not sit
    above the chosen fit, and sits well below the vLLM file's own prefill (the reason for the choice)."""
    runs, coefficients = distserve_files(shared_data)
    chosen = DistServeLatencyModel(coefficients)
    own = DistServeLatencyModel(coefficients, own_prefill=True)
    gaps = np.array([g for path in runs for g in distserve_prefill_gaps(path)], dtype=float)
    for lo, hi in ((300, 600), (600, 1000), (1000, 1500), (1500, 2100)):
        band = gaps[(gaps[:, 0] >= lo) & (gaps[:, 0] < hi)]
        assert len(band) >= 30
        envelope_ms = np.percentile(band[:, 1], 10) * 1e3
        mid = [int(np.median(band[:, 0]))]
        assert envelope_ms == pytest.approx(chosen.prefill_ms(mid), rel=0.12)
        assert envelope_ms < 0.85 * own.prefill_ms(mid)


# DistServe 3261c76 (2024-04-22, "Add a few curves"): the profiled OPT-13B TP1 curves of the vLLM
# file, before DistServe's alignment factors were baked in (4c68ed9); copied from that commit
PROFILED_3261C76 = {"prefill": [15.751574849507277, 0.10036374192949256, 5.76898915900792e-06],
                    "decoding_smallbs": [19.562534173678987, 0.0004941120550644942, 0.05060571771697455],
                    "decoding_largebs": [16.8386301447433, 0.00040897725301957885, 0.10000261546561776]}
ENGINE_PREFILL_3261C76 = [16.456860431694288, 0.09264750660897617, 6.474785740229194e-06]


def test_pre_alignment_divides_out_distserves_factors(tmp_path):
    """`pre_alignment` divides each fit by its DistServe factor (x1.4 prefill, x1.2 decode for the
    vLLM file; x1.1 prefill for DistServe's engine); without it the file's values stand."""
    path = write_profiles(tmp_path)
    pre = DistServeLatencyModel(path, own_prefill=True, pre_alignment=True)
    assert pre.prefill == pytest.approx([v / 1.4 for v in VLLM["prefill"]])
    assert pre.decode_small == pytest.approx([v / 1.2 for v in VLLM["decoding_smallbs"]])
    assert pre.decode_large == pytest.approx([v / 1.2 for v in VLLM["decoding_largebs"]])
    assert DistServeLatencyModel(path, pre_alignment=True).prefill == pytest.approx([v / 1.1 for v in ENGINE["prefill"]])
    assert DistServeLatencyModel(path, own_prefill=True).prefill == pytest.approx(VLLM["prefill"])
    assert "divided out" in pre.alignment_note() and "3cb7744" in pre.alignment_note()
    assert "INCLUDE" in DistServeLatencyModel(path).alignment_note()


def test_the_shipped_files_divided_out_are_the_profiled_curves(shared_data):
    """The shipped coefficients with `DISTSERVE_ALIGNMENT` divided out are DistServe's profiled
    curves of 3261c76, fit by fit; as shipped, they are not (the factors are in them)."""
    _, coefficients = distserve_files(shared_data)
    pre = DistServeLatencyModel(coefficients, own_prefill=True, pre_alignment=True)
    for got, fit in ((pre.prefill, "prefill"), (pre.decode_small, "decoding_smallbs"), (pre.decode_large, "decoding_largebs")):
        assert got == pytest.approx(PROFILED_3261C76[fit], rel=1e-9)
    assert DistServeLatencyModel(coefficients, pre_alignment=True).prefill == pytest.approx(ENGINE_PREFILL_3261C76, rel=1e-9)
    shipped = DistServeLatencyModel(coefficients, own_prefill=True)
    assert shipped.prefill[0] == pytest.approx(1.4 * PROFILED_3261C76["prefill"][0])
    assert shipped.decode_small[0] == pytest.approx(1.2 * PROFILED_3261C76["decoding_smallbs"][0])


def test_six_of_the_runs_never_pad_past_the_cap_and_neither_does_the_simulation(shared_data):
    """vLLM 0.2.3's `max_paddings` (256, the launch script's): the six runs of one server session never
    pad a prefill batch past it, and the simulated DistServe run never does (its scheduler has the cap)."""
    from fidelity.predict import predict_run

    runs, _ = distserve_files(shared_data)
    six = [p for p in runs if p.stem not in ("vllm-100-2", "vllm-200-2")]
    assert len(six) == 6
    assert all(len(b) * max(b) - sum(b) <= 256 for p in six for b in distserve_prefill_batches(p))
    run = load_distserve_run(next(p for p in runs if p.stem == "vllm-100-2"))  # this run pads past it
    req = predict_run(run, host="source-out").requests
    batches = req.groupby("first_token_time")["num_prompt_tokens"].apply(list)  # one prefill step each
    assert (batches.map(len) > 1).any()  # prompts are co-scheduled ...
    assert max(len(b) * max(b) - sum(b) for b in batches) <= 256  # ... within the cap


def test_an_impossible_latency_names_the_run_file_and_row(tmp_path):
    from policies import ConfigError

    recs = lone_requests(DistServeLatencyModel(write_profiles(tmp_path / "profile_data")), host_s=4e-4, front_s=0.02)
    recs[1]["ttft_ms"] = -5.0
    path = write_exp(tmp_path / "vllm-6-1.exp", recs)
    with pytest.raises(ConfigError, match=f"^{path}: row 2: ttft_s: a latency cannot be negative"):
        load_distserve_run(path)

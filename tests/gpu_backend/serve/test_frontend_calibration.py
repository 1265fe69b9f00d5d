"""Front-end calibration (calibrate.frontend) on the tiny tokenizer, with the probe
engine behind the real app (uvicorn on a thread, the client in its own process): fast, no model.

Invariants, not copied numbers: tokenizing takes longer for longer prompts; the ingress contains the
tokenization, so each request's ingress exceeds the server's encode of its prompt; the fitted
terms are positive; the profile reads back into the simulator's [frontend] section.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from calibrate.frontend import (  # noqa: E402
    calibrate_frontend, fit_line, fit_nonnegative_line, prompt_text, time_tokenizer,
)
from calibrate.probe_engine import probe_server  # noqa: E402
from sim.frontend import FrontendConfig  # noqa: E402

LENGTHS = (16, 512, 3072)  # spread wide, so the per-token slope stands well above timing noise
STEP_S, KS = 0.002, (2, 3)  # the probe's step (a sleep: no step is shorter); the concurrent phases' requests


@pytest.fixture(scope="module")
def profile(tokenizer):
    return calibrate_frontend(probe_server(tokenizer, step_s=STEP_S), prompt_lengths=LENGTHS, num_repeats=7,
                              num_output_tokens=4, num_warmup=2, progress=False, concurrency=KS)


def test_prompt_text_has_the_asked_number_of_tokens(tokenizer):
    for n in (1, 16, 300):
        assert len(tokenizer.encode(prompt_text(tokenizer, n), add_special_tokens=False)) == n


def test_tokenizing_takes_longer_for_longer_prompts(tokenizer):
    prompts = {n: prompt_text(tokenizer, n) for n in (16, 256, 4096)}
    times = time_tokenizer(tokenizer, prompts, num_repeats=15)
    assert times[16] < times[256] < times[4096]


def test_fit_line_recovers_a_line():
    intercept, slope = fit_line([1, 10, 100, 1000], [0.5 + 0.002 * x for x in (1, 10, 100, 1000)])
    assert intercept == pytest.approx(0.5) and slope == pytest.approx(0.002)


def test_terms_are_positive_and_the_ingress_holds_the_tokenizer(profile):
    fe, m = profile["frontend"], profile["measurements"]
    assert fe["request_overhead_s"] > 0 and fe["tokenize_s_per_token"] > 0 and fe["stream_overhead_s"] > 0
    assert fe["engine_s_per_output"] >= 0 and fe["engine_s_per_step"] >= 0
    assert m["prompt_tokens"] == sorted(m["prompt_tokens"])
    # the tokenizer's own time grows with the prompt (in-process, quiet); the ingress medians cross the
    # HTTP stack on a shared 2-core machine, so their order at 16 vs 3072 tokens is noise-prone
    assert m["tokenizer_encode_s_median"][0] < m["tokenizer_encode_s_median"][-1]
    # the request is tokenized on its way in: each request's ingress holds the server's encode of it
    # (timed in the server, so machine load moves both; a separate timing of the text need not agree)
    for ingresses, encodes in zip(m["ingress_s"], m["served_encode_s"]):
        assert len(ingresses) == len(encodes) == 7
        assert all(0 < encode < ingress for ingress, encode in zip(ingresses, encodes))
    # the server's arrival stamp lies inside the ingress, after the client's send
    assert 0 < m["ingress_before_server_stamp_s_median"] < m["ingress_s_median"][0]
    # the probe spells whole words: every token made a chunk of its own, so every request pairs
    assert m["num_first_chunks_paired"] == m["num_requests"] == 7 * len(LENGTHS)
    assert m["num_requests_not_fully_paired"] == 0
    # the callback runs on the engine thread, so the engine's token interval includes it
    assert m["token_interval_s_median_streamed"] > m["engine_callback_s_per_output"]


def test_both_phases_are_recorded_and_the_fit_goes_through_them(profile):
    fe, phases = profile["frontend"], profile["measurements"]["phases"]
    assert [ph["outputs_per_step"] for ph in phases] == [1, *KS]
    for ph in phases:
        assert ph["streamed_intervals_s"] and ph["bare_intervals_s"]
        # the probe's steps sleep STEP_S: no interval is shorter, streamed or bare
        assert min(ph["streamed_intervals_s"] + ph["bare_intervals_s"]) >= STEP_S - 1e-6
        assert ph["extra_s_median"] == pytest.approx(ph["streamed_s_median"] - ph["bare_s_median"])
    # one at a time: every length 7 times, every third one's bare twin; then 7 rounds of each k, each way
    assert (phases[0]["num_streamed_requests"], phases[0]["num_bare_requests"]) == (7 * len(LENGTHS), 7)
    for ph, k in zip(phases[1:], KS):
        assert ph["num_streamed_requests"] == ph["num_bare_requests"] == 7 * k
    # the one-at-a-time phase is the legacy summary
    assert phases[0]["streamed_s_median"] == profile["measurements"]["token_interval_s_median_streamed"]
    # the charge at 1, 2, 3 outputs per step is the non-negative line fitted through the extras
    want = fit_nonnegative_line([1, *KS], [ph["extra_s_median"] for ph in phases])
    assert (fe["engine_s_per_step"], fe["engine_s_per_output"]) == want


def test_shared_gaps_count_only_steps_all_requests_ran_in():
    from types import SimpleNamespace

    from calibrate.frontend import _shared_gaps

    a = SimpleNamespace(token_times=[0.0, 1.0, 2.0, 3.0, 4.0])
    b = SimpleNamespace(token_times=[1.0, 2.0, 3.0, 4.0, 5.0])  # joined one step late, ended one later
    # shared steps: 1->2, 2->3, 3->4 (a's 0->1 ran without b, b's 4->5 without a)
    assert _shared_gaps([a, b]) == [1.0] * 6


def test_fit_nonnegative_line_keeps_both_terms_non_negative():
    assert fit_nonnegative_line([1, 4], [0.7, 1.0]) == pytest.approx((0.6, 0.1))  # feasible: the plain line
    a, b = fit_nonnegative_line([1, 4], [0.6, 0.5])  # falling: slope 0, the mean
    assert (a, b) == pytest.approx((0.55, 0.0))
    a, b = fit_nonnegative_line([1, 4], [0.1, 0.8])  # negative intercept: a line through the origin
    assert a == 0.0 and b == pytest.approx((0.1 + 4 * 0.8) / 17)
    assert fit_nonnegative_line([1, 4], [-0.1, -0.2]) == (0.0, 0.0)


def test_bad_concurrency_is_refused(tokenizer):
    for bad in (1, 2.5, True, (2, 1), (), "4"):
        with pytest.raises(ValueError, match=r"^concurrency: need integers >= 2"):
            calibrate_frontend(probe_server(tokenizer), num_repeats=3, progress=False, concurrency=bad)


def test_the_profile_is_what_the_simulator_reads(profile, tmp_path):
    from calibrate.frontend_profile import write_profile

    path = write_profile(profile, tmp_path / "fe.json")
    fe = FrontendConfig.from_profile(path)
    assert fe.enabled and fe.request_overhead_s == profile["frontend"]["request_overhead_s"]
    assert path.with_suffix(".png").stat().st_size > 0  # the engine-share figure beside it
    meta = json.loads(path.read_text())["metadata"]
    assert meta["date"] and len(meta["load_average_before"]) == 3 and meta["machine"]


def test_lengths_that_do_not_fit_the_model_are_refused(tokenizer):
    from gpu_backend.serve.config import ServeConfig
    from gpu_backend.serve.server import OpenAIServer

    small = OpenAIServer(probe_server(tokenizer).engine, tokenizer, ServeConfig(), max_model_len=256,
                         make_sampling=None)
    with pytest.raises(ValueError, match=r"^prompt_lengths: 512 tokens \+ 16 outputs do not fit"):
        calibrate_frontend(small, prompt_lengths=(16, 512), num_repeats=3, progress=False)
    with pytest.raises(ValueError, match=r"^prompt_lengths: need at least two distinct lengths"):
        calibrate_frontend(small, prompt_lengths=(16, 16), num_repeats=3, progress=False)


def test_cli_writes_a_profile_with_the_probe_engine(tmp_path, capsys):
    from pathlib import Path

    from servesim.cli import main

    config = Path(__file__).resolve().parents[3] / "examples" / "serve-tiny.toml"
    out = tmp_path / "fe.json"
    assert main(["serve", str(config), "--calibrate-frontend", str(out), "--probe-engine",
                 "--calibrate-repeats", "3"]) == 0
    printed = capsys.readouterr().out
    assert "[frontend]" in printed and "engine_s_per_output" in printed
    assert FrontendConfig.from_profile(out).enabled
    assert main(["serve", str(config), "--calibrate-frontend", str(out), "--calibrate-repeats", "1"]) == 2
    assert capsys.readouterr().err.strip().startswith("servesim serve: error: --calibrate-repeats: must be >= 3")


def test_in_process_clients_stream_at_once_too(tokenizer):
    """The thread-backed client (a per-process clock) also runs the concurrent phase: k streams share steps."""
    profile = calibrate_frontend(probe_server(tokenizer, step_s=STEP_S), prompt_lengths=(16, 64), num_repeats=3,
                                 num_output_tokens=6, num_warmup=1, progress=False, in_process=True, concurrency=2)
    assert profile["measurements"]["client"] == "thread"
    k_phase = profile["measurements"]["phases"][1]
    assert k_phase["outputs_per_step"] == 2 and k_phase["streamed_intervals_s"]

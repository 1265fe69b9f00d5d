"""Front-end calibration (gpu_backend.serve.frontend_calibration) on the tiny tokenizer, with the probe
engine behind the real app (uvicorn on a thread, the client in its own process): fast, no model.

Invariants, not copied numbers: tokenizing takes longer for longer prompts; the ingress contains the
tokenization, so each median ingress exceeds the tokenizer's own time on that prompt; the fitted
terms are positive; the profile reads back into the simulator's [frontend] section.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from gpu_backend.serve.frontend_calibration import (  # noqa: E402
    calibrate_frontend, fit_line, probe_server, prompt_text, time_tokenizer,
)
from sim.frontend import FrontendConfig  # noqa: E402

LENGTHS = (16, 512, 3072)  # spread wide, so the per-token slope stands well above timing noise


@pytest.fixture(scope="module")
def profile(tokenizer):
    return calibrate_frontend(probe_server(tokenizer, step_s=0.002), prompt_lengths=LENGTHS, num_repeats=7,
                              num_output_tokens=4, num_warmup=2, progress=False)


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


def test_terms_are_positive_and_the_ingress_grows_with_the_prompt(profile):
    fe, m = profile["frontend"], profile["measurements"]
    assert fe["request_overhead_s"] > 0 and fe["tokenize_s_per_token"] > 0 and fe["stream_overhead_s"] > 0
    assert fe["engine_s_per_output"] >= 0
    assert m["prompt_tokens"] == sorted(m["prompt_tokens"])
    assert m["ingress_s_median"][0] < m["ingress_s_median"][-1]
    # the request is tokenized on its way in: its ingress holds at least the tokenizer's own time
    for ingress, encode in zip(m["ingress_s_median"], m["tokenizer_encode_s_median"]):
        assert ingress > encode
    # the server's arrival stamp lies inside the ingress, after the client's send
    assert 0 < m["ingress_before_server_stamp_s_median"] < m["ingress_s_median"][0]
    # the probe spells whole words: every token made a chunk of its own, so every request pairs
    assert m["num_first_chunks_paired"] == m["num_requests"] == 7 * len(LENGTHS)
    assert m["num_requests_not_fully_paired"] == 0
    # the callback runs on the engine thread, so the engine's token interval includes it
    assert m["token_interval_s_median_streamed"] > m["engine_callback_s_per_output"]


def test_the_profile_is_what_the_simulator_reads(profile, tmp_path):
    from gpu_backend.serve.frontend_calibration import write_profile

    path = write_profile(profile, tmp_path / "fe.json")
    fe = FrontendConfig.from_profile(path)
    assert fe.enabled and fe.request_overhead_s == profile["frontend"]["request_overhead_s"]
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

"""The front-end model (sim.frontend, [frontend]): ingress before the scheduler, egress per token.

Theory: a lone request's TTFT grows by exactly ingress + egress and its TPOT not at all; with the
front end off, `simulate` equals a replica fed directly at the arrival times (the pre-frontend loop).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from policies import ConfigError, Request
from sim.config import config_to_toml, load_config
from sim.frontend import FrontendConfig
from sim.runner import simulate
from sim.latency.base import host_split
from sim_helpers import ConstantLatency, make_requests, make_sched, run_requests

STEP_S, PER_TOKEN_S = 0.004, 2e-5  # a constant-time latency model: step = STEP_S + PER_TOKEN_S * tokens


class ListWorkload:
    """A fixed list of requests (fresh copies each run), no follow-ups."""

    def __init__(self, specs: list[tuple[float, int, int]]) -> None:
        self.specs = specs  # (arrival_time, num_prompt_tokens, max_tokens)

    def start(self) -> list[Request]:
        return [Request(i, a, p, m) for i, (a, p, m) in enumerate(self.specs)]

    def on_finish(self, request, now):
        return []


def make_config(frontend: dict | None = None, **scheduler):
    data = {"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100-SXM"},
            "scheduler": {"policy": "chunked", "max_num_batched_tokens": 512, **scheduler}}
    if frontend is not None:
        data["frontend"] = frontend
    return load_config(data)


def run(specs, frontend=None, **scheduler):
    return simulate(make_config(frontend, **scheduler), latency_model=ConstantLatency(STEP_S, PER_TOKEN_S),
                    workload=ListWorkload(specs))


def test_a_lone_request_pays_ingress_once_and_egress_on_every_token():
    fe = {"request_overhead_s": 0.0013, "tokenize_s_per_token": 3e-6, "stream_overhead_s": 0.0007}
    prompt, out = 300, 20
    base = run([(0.5, prompt, out)]).requests.iloc[0]
    shifted = run([(0.5, prompt, out)], fe).requests.iloc[0]
    ingress = fe["request_overhead_s"] + fe["tokenize_s_per_token"] * prompt
    egress = fe["stream_overhead_s"]
    assert shifted["arrival_time"] == base["arrival_time"] == 0.5  # still the client's send time
    assert shifted["first_scheduled_time"] == pytest.approx(0.5 + ingress, abs=1e-12)
    assert shifted["queue_s"] == pytest.approx(ingress, abs=1e-12)
    assert shifted["ttft_s"] == pytest.approx(base["ttft_s"] + ingress + egress, abs=1e-12)
    assert shifted["e2e_s"] == pytest.approx(base["e2e_s"] + ingress + egress, abs=1e-12)
    assert shifted["tpot_s"] == pytest.approx(base["tpot_s"], abs=1e-12)
    assert shifted["max_itl_s"] == pytest.approx(base["max_itl_s"], abs=1e-12)
    # and the lone request's TTFT is the theory's sum: ingress + one prefill step + egress
    assert shifted["ttft_s"] == pytest.approx(ingress + STEP_S + PER_TOKEN_S * prompt + egress, abs=1e-12)


def test_the_engine_share_lengthens_each_step_by_its_outputs():
    charge = 5e-5
    prompt, out = 40, 12
    base = run([(0.0, prompt, out), (0.0, prompt, out)])
    charged = run([(0.0, prompt, out), (0.0, prompt, out)], {"engine_s_per_output": charge})
    # both prompts fit one step (2 outputs); then every decode step carries both requests (2 outputs)
    np.testing.assert_allclose(charged.steps["duration"].to_numpy(), base.steps["duration"].to_numpy() + 2 * charge,
                               rtol=0, atol=1e-12)
    a, b = base.requests.iloc[0], charged.requests.iloc[0]
    assert b["tpot_s"] == pytest.approx(a["tpot_s"] + 2 * charge, abs=1e-12)
    assert b["ttft_s"] == pytest.approx(a["ttft_s"] + 2 * charge, abs=1e-12)
    # a lone request's step carries one output
    one = run([(0.0, prompt, out)], {"engine_s_per_output": charge}).requests.iloc[0]
    assert one["tpot_s"] == pytest.approx(STEP_S + PER_TOKEN_S + charge, abs=1e-12)


@pytest.mark.parametrize("k", [1, 4])
def test_a_step_streaming_k_outputs_costs_the_per_step_term_once_and_the_per_output_term_k_times(k):
    per_step, per_output = 6e-4, 5e-5
    specs = [(0.0, 40, 12)] * k  # all k prompts fit the first step; every later step decodes all k
    base = run(specs)
    charged = run(specs, {"engine_s_per_step": per_step, "engine_s_per_output": per_output})
    np.testing.assert_allclose(charged.steps["duration"].to_numpy(),
                               base.steps["duration"].to_numpy() + per_step + per_output * k, rtol=0, atol=1e-12)
    a, b = base.requests.iloc[0], charged.requests.iloc[0]
    assert b["tpot_s"] == pytest.approx(a["tpot_s"] + per_step + per_output * k, abs=1e-12)
    # theory for the lone/k-concurrent decode: step + k tokens' time + the front end's share
    assert b["tpot_s"] == pytest.approx(STEP_S + PER_TOKEN_S * k + per_step + per_output * k, abs=1e-12)


def test_a_step_that_streams_nothing_pays_no_per_step_term():
    # a 1,200-token prompt under a 512-token budget: two prefill chunks that sample nothing, then one that does
    base = run([(0.0, 1200, 3)])
    charged = run([(0.0, 1200, 3)], {"engine_s_per_step": 1e-3})
    extra = charged.steps["duration"].to_numpy() - base.steps["duration"].to_numpy()
    np.testing.assert_allclose(extra, [0.0, 0.0] + [1e-3] * (len(extra) - 2), rtol=0, atol=1e-12)


def test_the_engine_share_is_host_time_in_the_steps_parts():
    """Async scheduling overlaps host parts with the GPU (`sim.latency.base.host_split`): the
    engine's per-output charge is one, the inner model's step stays device time."""
    scheduler = make_sched("chunked")
    for r in make_requests(2, prompt=40, max_tokens=3):
        scheduler.add_request(r, 0.0)
    plan = scheduler.schedule(0.0)  # both whole prompts: each samples its first token
    model = FrontendConfig(engine_s_per_step=6e-4, engine_s_per_output=5e-5).charge(ConstantLatency(STEP_S))
    device, host = host_split(model, plan)
    assert device == pytest.approx(ConstantLatency(STEP_S).step_time(plan), abs=1e-15)
    assert host == pytest.approx(6e-4 + 2 * 5e-5, abs=1e-15)
    assert device + host == pytest.approx(model.step_time(plan), abs=1e-15)


def test_zero_engine_terms_leave_the_latency_model_itself():
    model = ConstantLatency(STEP_S)
    assert FrontendConfig(request_overhead_s=0.001, stream_overhead_s=0.001).charge(model) is model
    assert FrontendConfig(engine_s_per_step=1e-4).charge(model) is not model


@pytest.mark.parametrize("latency", ["roofline", "constant"])
def test_the_charged_model_keeps_the_fast_path_exact(latency):
    """The decode fast path over a charged model gives the step-by-step loop's tables."""
    fe = {"request_overhead_s": 0.001, "stream_overhead_s": 0.0005, "engine_s_per_output": 4e-5,
          "engine_s_per_step": 3e-4}
    cfg = load_config({"workload": {"kind": "poisson", "rate": 30.0, "num_requests": 80, "seed": 3,
                                    "prompt_len": {"kind": "uniform", "low": 10, "high": 600},
                                    "output_len": {"kind": "uniform", "low": 1, "high": 120}},
                       "frontend": fe})

    def once(fast: bool):
        return simulate(cfg, latency_model=ConstantLatency(STEP_S, PER_TOKEN_S) if latency == "constant" else None,
                        fast_decode=fast)
    fast, slow = once(True), once(False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.steps, slow.steps)
    from sim.latency import build_latency_model
    from sim.decode_replay import decode_time_function

    assert decode_time_function(FrontendConfig(**fe).charge(build_latency_model(cfg))) is not None  # fast path on
    charged = FrontendConfig(**fe).charge(ConstantLatency(1.0))
    assert not charged.is_pure()  # an unknown model is not assumed pure


def test_ingress_and_egress_leave_step_durations_alone():
    fe = {"request_overhead_s": 0.002, "stream_overhead_s": 0.001}
    base, shifted = run([(0.0, 64, 16)]), run([(0.0, 64, 16)], fe)
    np.testing.assert_array_equal(base.steps["duration"].to_numpy(), shifted.steps["duration"].to_numpy())
    np.testing.assert_allclose(shifted.steps["start"].to_numpy(), base.steps["start"].to_numpy() + 0.002, atol=1e-12)


def test_a_short_prompt_sent_later_can_reach_the_scheduler_first():
    # request 0 sends 2,000 tokens at t=0 (ingress 0.2 s), request 1 sends 10 tokens at t=0.001
    fe = {"tokenize_s_per_token": 1e-4}
    t = run([(0.0, 2000, 4), (0.001, 10, 4)], fe, max_model_len=4096).requests.set_index("req_id")
    assert t.loc[1, "first_scheduled_time"] == pytest.approx(0.001 + 10 * 1e-4, abs=1e-12)
    assert t.loc[0, "first_scheduled_time"] >= 0.2
    assert t.loc[1, "finish_time"] < t.loc[0, "first_scheduled_time"]  # it was done before the long one arrived


def test_zero_frontend_equals_the_replica_fed_at_arrival_times():
    """The pre-frontend loop as a reference: requests submitted straight to a Replica at arrival."""
    from records.results import requests_table, steps_table

    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(0.02, 60))
    prompts, outs = rng.integers(5, 700, 60), rng.integers(1, 60, 60)
    specs = [(float(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outs)]
    got = run(specs, {"request_overhead_s": 0.0, "tokenize_s_per_token": 0.0, "stream_overhead_s": 0.0,
                      "engine_s_per_output": 0.0, "engine_s_per_step": 0.0})
    recorder = run_requests(_sched_like(make_config()), ConstantLatency(STEP_S, PER_TOKEN_S),
                            make_requests(60, arrivals, prompts, outs))
    want_requests = requests_table(recorder.requests, recorder.replica_of)
    pd.testing.assert_frame_equal(got.requests.reset_index(drop=True), want_requests.reset_index(drop=True))
    pd.testing.assert_frame_equal(got.steps, steps_table(recorder.steps))


def _sched_like(config):
    """The scheduler `simulate` builds for `config`."""
    from policies.schedulers import make_scheduler
    from sim.runner import build_cache_config

    return make_scheduler(config.scheduler, build_cache_config(config))


def test_closed_loop_users_send_again_when_their_client_has_the_last_token():
    fe = {"request_overhead_s": 0.003, "stream_overhead_s": 0.002}
    cfg = load_config({"workload": {"kind": "closed_loop", "num_users": 1, "num_requests": 5, "think_time": 0.0},
                       "frontend": fe})
    t = simulate(cfg, latency_model=ConstantLatency(0.01)).requests.sort_values("arrival_time")
    # one user: each request is sent the moment the client saw the previous one's last token
    np.testing.assert_allclose(t["arrival_time"].to_numpy()[1:], t["finish_time"].to_numpy()[:-1], atol=1e-12)
    np.testing.assert_allclose(t["first_scheduled_time"] - t["arrival_time"], 0.003, atol=1e-12)


@pytest.mark.parametrize("key, value, words", [
    ("request_overhead_s", -0.001, "must be >= 0"),
    ("stream_overhead_s", "fast", "expected a number"),
    ("tokenize_s_per_token", float("inf"), "finite"),
    ("tokenize_s_per_token", float("nan"), "expected a number, got nan"),
    ("engine_s_per_output", -1e-5, "must be >= 0"),
    ("engine_s_per_step", float("nan"), "expected a number, got nan"),
    ("engine_s_per_step", -1e-4, "must be >= 0"),
    ("stream_delay", 0.001, "unknown key; allowed keys: request_overhead_s, tokenize_s_per_token, "
                            "stream_overhead_s, engine_s_per_output, engine_s_per_step"),
])
def test_bad_frontend_values_give_one_line_naming_the_field(key, value, words):
    with pytest.raises(ConfigError) as exc:
        make_config({key: value})
    message = str(exc.value)
    assert message.startswith(f"frontend.{key}: ") and words in message and "\n" not in message


def test_the_cli_turns_a_bad_frontend_value_into_exit_2(tmp_path, capsys):
    from servesim.cli import main

    path = tmp_path / "c.toml"
    path.write_text('[frontend]\nstream_overhead_s = -1\n')
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "frontend.stream_overhead_s: must be >= 0" in err[0]


def test_frontend_round_trips_through_the_saved_config(tmp_path):
    cfg = make_config({"request_overhead_s": 0.0011, "tokenize_s_per_token": 2.5e-6, "stream_overhead_s": 0.0009,
                       "engine_s_per_output": 1.5e-5, "engine_s_per_step": 4.5e-4})
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(cfg))
    assert load_config(path).frontend == cfg.frontend


def test_a_cluster_with_a_frontend_is_refused_not_ignored():
    cfg = load_config({"cluster": {"num_replicas": 2}, "frontend": {"request_overhead_s": 0.001}})
    with pytest.raises(ConfigError, match=r"^frontend: "):
        simulate(cfg, latency_model=ConstantLatency(0.01))


def test_profile_file_reads_back_its_terms(tmp_path):
    import json

    fe = FrontendConfig(0.001, 2e-6, 0.0005, 3e-5)
    path = tmp_path / "fe.json"
    path.write_text(json.dumps({"format": "servesim-frontend", "frontend": {"request_overhead_s": 0.001,
                                "tokenize_s_per_token": 2e-6, "stream_overhead_s": 0.0005,
                                "engine_s_per_output": 3e-5}}))
    assert FrontendConfig.from_profile(path) == fe
    assert load_config({"frontend": __import__("tomllib").loads(fe.to_toml())["frontend"]}).frontend == fe
    path.write_text(json.dumps({"format": "servesim-overhead"}))
    with pytest.raises(ConfigError, match="frontend profile: .* is not a 'servesim-frontend' file"):
        FrontendConfig.from_profile(path)


def test_the_summary_carries_ttft_as_parts_that_sum_to_the_mean_ttft(tmp_path):
    fe = {"request_overhead_s": 0.0013, "tokenize_s_per_token": 3e-6, "stream_overhead_s": 0.0007}
    specs = [(0.01 * i, 100 + 37 * i, 8) for i in range(30)]  # a burst: some requests wait in the queue
    result = run(specs, fe)
    parts = result.summary["ttft_parts"]
    names = ("client_send_s", "api_server_s", "engine_queue_s", "prefill_steps_s", "first_chunk_s")
    assert sum(parts[k] for k in names) == pytest.approx(result.summary["ttft_s"]["mean"], rel=1e-12)
    prompts = np.array([p for _, p, _ in specs])
    assert parts["api_server_s"] == pytest.approx(0.0013 + 3e-6 * prompts.mean(), rel=1e-12)
    assert parts["first_chunk_s"] == 0.0007 and parts["engine_queue_s"] > 0 and parts["client_send_s"] == 0
    # a lone request: no queue, one prefill step (the theory's sum)
    lone = run([(0.5, 300, 4)], fe).summary["ttft_parts"]
    assert lone["engine_queue_s"] == pytest.approx(0.0, abs=1e-12)
    assert lone["prefill_steps_s"] == pytest.approx(STEP_S + PER_TOKEN_S * 300, abs=1e-12)
    # the streamed run (the CLI's) carries the same parts
    streamed = simulate(make_config(fe), latency_model=ConstantLatency(STEP_S, PER_TOKEN_S),
                        workload=ListWorkload(specs), out=tmp_path, stream=True).summary["ttft_parts"]
    assert streamed == pytest.approx(parts, rel=1e-12)

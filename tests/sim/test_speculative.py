"""Speculative decoding in the simulator: the theory's step count (Leviathan et al.), vLLM v1's token
accounting (drafts count against the budget, computed tokens for accepted ones only), and the verify and
proposer costs charged by width."""
from __future__ import annotations

import dataclasses
import tomllib

import pytest

from policies import (BatchPlan, CacheConfig, ConfigError, Request, ScheduledSeq, SchedulerConfig, SpeculativeConfig,
                      StepResult, make_scheduler)
from policies.speculative import AcceptanceSampler, NgramProposer
from sim.config import config_to_toml, load_config
from sim.latency import RooflineLatencyModel
from sim.latency.base import host_split
from sim.build import build_cache_config
from sim.runner import simulate
from sim.speculative import build_scheduler, with_proposer
from sim.workload import build_workload
from specs import bytes_per_block, get_gpu, get_model, kv_cache_bytes


def expected_tokens(a: float, k: int) -> float:
    """E[tokens per verify step] for one acceptance rate a over k drafts (Leviathan et al. 2023)."""
    return (1 - a ** (k + 1)) / (1 - a)


def single(k: int = 3, a=0.8, seed: int = 0, output: int = 512, method: str = "ngram", **spec):
    cfg = {"model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100-SXM"},
           "scheduler": {"policy": "vllm"},
           "workload": {"kind": "poisson", "rate": 1.0, "num_requests": 1, "seed": seed,
                        "prompt_len": {"kind": "constant", "value": 256},
                        "output_len": {"kind": "constant", "value": output}},
           "speculative": {"method": method, "num_speculative_tokens": k, "acceptance_rate": a, **spec}}
    return load_config(cfg)


def step_moments(rates) -> tuple[float, float]:
    """Mean and variance of the tokens one verify step emits (1 + accepted drafts)."""
    probs, p = [], 1.0
    for a in rates:  # P(exactly i drafts accepted) = a_1 ... a_i (1 - a_{i+1})
        probs.append(p * (1 - a))
        p *= a
    probs.append(p)
    mean = sum((i + 1) * q for i, q in enumerate(probs))
    return mean, sum((i + 1) ** 2 * q for i, q in enumerate(probs)) - mean ** 2


def decode_steps(result) -> int:
    return int((result.steps["num_prefill_tokens"] == 0).sum())


def test_decode_steps_of_one_request_match_leviathan():
    """512 output tokens, k = 3, a = 0.8: decode steps within 5% of 512 / E, for every seed. With
    independent draws one run's sd would be sqrt(T var / mean^3) (T = 511 decode tokens), 3.1% of
    the count; the stratified draws keep each run well inside that."""
    k, a, seeds = 3, 0.8, 20
    mean, var = step_moments([a] * k)
    assert mean == pytest.approx(expected_tokens(a, k))
    sd = (511 * var / mean ** 3) ** 0.5
    results = [simulate(single(k, a, seed)) for seed in range(seeds)]
    counts = [decode_steps(r) for r in results]
    predicted = 512 / expected_tokens(a, k)
    assert all(abs(n - predicted) / predicted < 0.05 for n in counts), (counts, predicted)
    assert all(abs(n - 511 / mean) < sd + 1 for n in counts), counts  # + 1: the last steps draft fewer
    for result in results:
        row, s, steps = result.requests.iloc[0], result.summary, result.steps
        assert row["num_output_tokens"] == 512 and row["finish_reason"] == "length"
        # every decode step verifies drafts but perhaps the last (max_tokens - 1 reached: none to propose)
        assert decode_steps(result) - 1 <= s["speculative"]["num_drafts"] <= decode_steps(result)
        assert s["speculative"]["mean_acceptance_length"] == pytest.approx(1 + s["mean_accepted_tokens"])
        assert steps["num_spec_tokens"].max() == k  # 3 drafts a verify, fewer only near max_tokens
    # accepted drafts per verify: a + a^2 + a^3 in expectation; per verified draft a third of that
    accepted = sum(r.summary["speculative"]["num_accepted_tokens"] for r in results)
    drafts = sum(r.summary["speculative"]["num_drafts"] for r in results)
    assert accepted / drafts == pytest.approx(expected_tokens(a, k) - 1, rel=0.03)


def test_per_position_rates_and_no_acceptance():
    """A list of rates is per position; rate 0 gives one token a step (the plain decode count)."""
    zero = simulate(single(3, 0.0, output=100))
    assert decode_steps(zero) == 99 and zero.summary["acceptance_rate"] == 0.0
    rates = [0.9, 0.5, 0.2]
    sampler = AcceptanceSampler(rates, seed=3)
    e = sampler.expected_tokens()
    assert e == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    draws = [sampler(3) for _ in range(20000)]
    assert abs(1 + sum(draws) / len(draws) - e) < 0.03
    # each draw has the exact distribution: P(exactly i accepted) = a_1 ... a_i (1 - a_{i+1})
    exact = [1 - 0.9, 0.9 * 0.5, 0.45 * 0.8, 0.09]
    for i, q in enumerate(exact):
        assert draws.count(i) / len(draws) == pytest.approx(q, abs=0.01)
    assert AcceptanceSampler(rates, seed=3)(1) in (0, 1) and AcceptanceSampler([1.0], seed=0)(5) == 1
    mean, var = step_moments(rates)
    assert mean == pytest.approx(e)
    counts = [decode_steps(simulate(single(3, rates, seed=seed, output=512))) for seed in range(8)]
    sd = (511 * var / mean ** 3) ** 0.5
    assert abs(sum(counts) / 8 - 511 / mean) < 3 * sd / 8 ** 0.5 + 1, counts


def test_runs_repeat_and_both_loops_agree():
    config = single(4, 0.7, output=300)
    a = simulate(config)
    b = simulate(config, fast_decode=False)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert simulate(config).steps.equals(a.steps)


def loaded_config(**spec):
    return load_config({
        "model": {"name": "Llama-3-8B"}, "hardware": {"gpu": "H100-SXM", "num_gpu_blocks": 300},
        "scheduler": {"policy": "vllm", "max_num_batched_tokens": 256, "max_num_seqs": 32},
        "workload": {"kind": "poisson", "rate": 40.0, "num_requests": 120, "seed": 5,
                     "prompt_len": {"kind": "uniform", "low": 16, "high": 400},
                     "output_len": {"kind": "uniform", "low": 1, "high": 300}},
        "speculative": {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.6, **spec}})


def test_invariants_under_load():
    """Every request ends, the blocks' bookkeeping holds after every step, every block comes back,
    budgets hold with draft tokens counted, and a request keeps the blocks of its rejected drafts."""
    config = loaded_config()
    scheduler = build_scheduler(config, build_cache_config(config))
    bm = scheduler.block_manager
    requests = sorted(build_workload(config.workload, config.scheduler.max_model_len).start(),
                      key=lambda r: r.arrival_time)
    now, i, steps, preempted, verified = 0.0, 0, 0, 0, 0
    while i < len(requests) or scheduler.has_unfinished():
        while i < len(requests) and requests[i].arrival_time <= now:
            scheduler.add_request(requests[i], now)
            i += 1
        plan = scheduler.schedule(now)
        if plan.is_empty:
            now = requests[i].arrival_time
            continue
        assert plan.num_tokens <= config.scheduler.max_num_batched_tokens
        assert plan.num_seqs <= config.scheduler.max_num_seqs
        for seq in plan.seqs:
            drafts = (plan.spec_token_ids or {}).get(seq.req_id)
            if drafts:
                verified += len(drafts)
                assert seq.num_tokens == 1 + len(drafts) <= 5 and seq.samples
                r = seq.request
                assert len(r.block_table) * bm.block_size >= seq.num_computed_tokens + seq.num_tokens
                assert len(r.output_token_ids) + len(drafts) < r.max_tokens  # never drafts past max_tokens
        preempted += len(plan.preempted)
        now += 0.01
        scheduler.update(plan, StepResult(0.01), now)
        bm.check_invariants()
        for r in scheduler.running:  # vLLM v1: blocks are freed with the request, never after a verify
            if r.num_output_tokens:
                assert len(r.block_table) >= bm.blocks_for(r.num_computed_tokens)
        steps += 1
    assert all(r.is_finished and r.num_output_tokens == r.max_tokens for r in requests)
    assert bm.num_free_gpu_blocks == bm.num_gpu_blocks
    assert verified > 1000 and preempted > 0  # the load did preempt (drafts are dropped then)


def test_a_loaded_run_ends_and_reports():
    result = simulate(loaded_config())
    s = result.summary
    assert s["num_finished"] == 120 and (result.requests["num_output_tokens"] == result.requests["max_tokens"]).all()
    # accepted / verified drafts: (a + a^2 + a^3 + a^4) / 4 when every verify carries 4 drafts
    assert abs(s["acceptance_rate"] - (expected_tokens(0.6, 4) - 1) / 4) < 0.05
    assert (result.steps["num_prefill_tokens"] + result.steps["num_decode_tokens"] <= 256).all()
    off = simulate(dataclasses.replace(loaded_config(), speculative=SpeculativeConfig()))
    assert "speculative" not in off.summary and s["num_steps"] < off.summary["num_steps"]


def test_budget_trims_drafts_like_vllm():
    """With 3 tokens of budget left a decode of 4 drafts verifies only 2 (the rest are dropped)."""
    sc = SchedulerConfig(policy="vllm", max_num_batched_tokens=3, max_num_seqs=3, max_model_len=512)
    s = make_scheduler(sc, CacheConfig(num_gpu_blocks=64), SpeculativeConfig("ngram", 4, 1.0))
    s.acceptance = AcceptanceSampler([1.0] * 4)
    s.add_request(Request(0, 0.0, 3, 50), 0.0)
    plan = s.schedule(0.0)
    s.update(plan, StepResult(0.01), 0.01)  # prefill: one token, 4 drafts proposed
    assert s.running[0].spec_token_ids == [0, 0, 0, 0]
    plan = s.schedule(0.01)
    assert plan.num_tokens == 3 and plan.spec_token_ids == {0: (0, 0)}
    s.update(plan, StepResult(0.01), 0.02)
    assert s.running[0].num_output_tokens == 1 + 3 and s.running[0].num_computed_tokens == 6


@pytest.mark.parametrize("method, lookahead", [("ngram", 0), ("mtp", 3), ("draft", 3)])
def test_mtp_and_draft_proposers_reserve_lookahead_slots(method, lookahead):
    """vLLM v1 allocates num_lookahead_tokens = k slots past a running request's tokens for EAGLE/MTP
    and draft models (their proposer writes KV), none for ngram. 5 blocks of 4 (+1: v1's null block):
    `a` verifies 1 + 3 drafts from 6 computed tokens (10 tokens: 3 blocks; 13 with the lookahead: 4).
    `b`'s 8-token prompt fits the 2 blocks left by ngram only; under MTP it waits (its admission would
    have been preempted a step later)."""
    spec = SpeculativeConfig(method, 3, draft_model="Llama-2-7B" if method == "draft" else None)
    assert spec.num_lookahead_tokens == lookahead
    sc = SchedulerConfig(policy="vllm", max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512)
    s = make_scheduler(sc, CacheConfig(block_size=4, num_gpu_blocks=5 + 1, enable_prefix_caching=False), spec)
    a, b = Request("a", 0.0, 6, 10), Request("b", 0.0, 8, 4)
    s.add_request(a, 0.0)
    now, plans = 0.0, []
    for i in range(3):
        if i == 1:
            s.add_request(b, now)
        plans.append(s.schedule(now))
        s.update(plans[-1], StepResult(0.01, num_accepted={r: 0 for r in plans[-1].num_scheduled_tokens}), now + 0.01)
        now += 0.01
    if lookahead:
        assert [p.num_scheduled_tokens for p in plans] == [{"a": 6}, {"a": 4}, {"a": 4}]
        assert len(a.block_table) == 4 and b.num_preemptions == 0
    else:
        assert plans[1].num_scheduled_tokens == {"a": 4, "b": 8} and plans[2].preempted == ("b",)


def test_executor_acceptances_and_tokens_are_kept():
    """An engine reports accepted counts and sampled tokens: the request keeps the accepted drafts
    and the sampled token, computed tokens step back by the rejected drafts."""
    sc = SchedulerConfig(policy="vllm", max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512)
    s = make_scheduler(sc, CacheConfig(block_size=4, num_gpu_blocks=64), SpeculativeConfig("ngram", 3))
    s.proposer = lambda req: [7, 8, 9]
    req = Request(0, 0.0, 6, 20, prompt_token_ids=list(range(6)))
    s.add_request(req, 0.0)
    plan = s.schedule(0.0)
    s.update(plan, StepResult(0.01, sampled_token_ids={0: 5}), 0.01)
    plan = s.schedule(0.01)
    assert plan.spec_token_ids == {0: (7, 8, 9)} and plan.seqs[0].num_tokens == 4
    assert len(req.block_table) == 3  # 10 tokens of KV slots in blocks of 4
    s.update(plan, StepResult(0.01, sampled_token_ids={0: 4}, num_accepted={0: 1}), 0.02)
    # 2 drafts rejected: computed tokens step back, the third block (their slots) stays with the request
    assert req.output_token_ids == [5, 7, 4] and req.num_computed_tokens == 8 and len(req.block_table) == 3
    assert (req.num_drafts, req.num_draft_tokens, req.num_accepted_tokens) == (1, 3, 1)
    s.block_manager.check_invariants()


def test_verify_step_costs_its_width_and_the_proposer():
    """The roofline charges a verify of 1 + k tokens more than a decode (LM head over every draft,
    attention over the chunk); a draft model adds k of its decode passes, MTP one target layer's."""
    spec, gpu = get_model("Llama-3-8B"), get_gpu("H100-SXM")
    lm = RooflineLatencyModel(spec, gpu)
    reqs = [Request(i, 0.0, 1000, 100) for i in range(8)]
    decode = BatchPlan(0, tuple(ScheduledSeq(r, 1, 1000, True) for r in reqs))
    verify = BatchPlan(0, tuple(ScheduledSeq(r, 4, 1000, True) for r in reqs),
                       spec_token_ids={r.req_id: (0, 0, 0) for r in reqs})
    assert verify.totals.num_spec_tokens == 24 and verify.num_decode_tokens == 32 and verify.num_prefill_tokens == 0
    t_dec, t_ver = lm.step_time(decode), lm.step_time(verify)
    assert t_dec < t_ver < 1.5 * t_dec  # memory bound: 4x the tokens for little more time
    base = single(3, 0.8)
    assert with_proposer(lm, base).step_time(verify) == t_ver  # ngram: host-side lookup, charged 0
    draft = with_proposer(lm, single(3, 0.8, method="draft", draft_model="Llama-2-7B"))
    small = RooflineLatencyModel(get_model("Llama-2-7B"), gpu)
    one_pass = small.decode_step_time(8, 8 * 1004) - small.constants.step_overhead_s - 8 * small.constants.per_seq_overhead_s
    assert draft.step_time(verify) - t_ver == pytest.approx(3 * one_pass, rel=0.01)
    mtp = with_proposer(lm, single(3, 0.8, method="mtp"))
    extra = mtp.step_time(verify) - t_ver
    assert 0 < extra < 0.25 * (draft.step_time(verify) - t_ver)  # one layer + head vs a whole 7B model
    # the parts async scheduling splits by (sim.latency.base.host_split) sum to the step, the proposer's on the GPU
    for model in (draft, mtp):
        device, host = host_split(model, verify)
        assert device + host == pytest.approx(model.step_time(verify), rel=1e-12)
        assert host == pytest.approx(lm.breakdown(verify)["overhead"], rel=1e-12)


def test_config_errors_name_the_field():
    cases = [
        ({"method": "eagle"}, "speculative.method"),
        ({"method": "ngram"}, "speculative.num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "speculative.num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 1.5}, "speculative.acceptance_rate"),
        ({"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": [0.5, 0.5]},
         "speculative.acceptance_rate"),
        ({"method": "draft", "num_speculative_tokens": 3}, "speculative.draft_model"),
        ({"method": "ngram", "num_speculative_tokens": 3, "draft_model": "Llama-2-7B"}, "speculative.draft_model"),
        ({"num_speculative_tokens": 3}, "speculative.num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 3, "k": 3}, "speculative.k"),
    ]
    for section, field in cases:
        with pytest.raises(ConfigError) as exc:
            load_config({"speculative": section})
        msg = str(exc.value)
        assert msg.startswith(field) and "\n" not in msg, msg
    with pytest.raises(ConfigError, match="^speculative.acceptance_rate: the simulator needs it"):
        simulate(load_config({"speculative": {"method": "ngram", "num_speculative_tokens": 2},
                              "workload": {"num_requests": 1}}))
    with pytest.raises(ConfigError, match="^speculative.method: .*policy chunked or vllm"):
        simulate(load_config({"scheduler": {"policy": "static"}, "workload": {"num_requests": 1},
                              "speculative": {"method": "ngram", "num_speculative_tokens": 2,
                                              "acceptance_rate": 0.5}}))


def test_set_overrides_and_toml_round_trip():
    config = load_config({}, ["speculative.method=mtp", "speculative.num_speculative_tokens=2",
                              "speculative.acceptance_rate=[0.8, 0.6]"])
    assert config.speculative == SpeculativeConfig("mtp", 2, (0.8, 0.6))
    assert config.speculative.rates() == (0.8, 0.6)
    assert load_config(tomllib.loads(config_to_toml(config))) == config


def test_ngram_proposer_looks_up_the_earliest_longest_match():
    p = NgramProposer(k=3, min_n=2, max_n=3)
    assert p.propose_ids([1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3]) == [4, 9, 2]  # earliest "2 3" (no "x 2 3" repeat)
    assert p.propose_ids([1, 2, 3, 4, 1, 2, 3]) == [4, 1, 2]  # longest first: "1 2 3"
    assert p.propose_ids([1, 2, 3, 4]) == []
    assert p.propose_ids([5, 5]) == []  # n = 2 needs a token after an earlier match
    assert NgramProposer(k=2, min_n=1, max_n=1).propose_ids([5, 5]) == [5]


def test_streamed_and_cluster_runs_report_it_too():
    config = single(3, 0.8, output=200)
    memory = simulate(config).summary
    streamed = simulate(config, stream=True).summary
    for key in ("acceptance_rate", "mean_accepted_tokens", "speculative"):
        assert streamed[key] == memory[key]
    two = load_config({**_as_table(loaded_config()), "cluster": {"num_replicas": 2}})
    result = simulate(two)
    assert result.summary["num_finished"] == 120 and result.summary["speculative"]["num_drafts"] > 0
    assert set(result.requests["replica"]) == {"0", "1"}


def _as_table(config) -> dict:
    return tomllib.loads(config_to_toml(config))


def test_a_proposer_takes_its_weights_and_kv_from_the_cache():
    """A draft model's weights come off the KV budget and every block holds its layers' KV too;
    MTP's one layer costs far less; ngram nothing."""
    off = build_cache_config(load_config({"model": {"name": "Llama-3-8B"}})).num_gpu_blocks
    ngram = build_cache_config(single(3, 0.8)).num_gpu_blocks
    draft_config = single(3, 0.8, method="draft", draft_model="Llama-2-7B")
    draft = build_cache_config(draft_config).num_gpu_blocks
    mtp = build_cache_config(single(3, 0.8, method="mtp")).num_gpu_blocks
    target, small = get_model("Llama-3-8B"), get_model("Llama-2-7B")
    hw = draft_config.hardware
    sched = draft_config.scheduler
    free = kv_cache_bytes(target, hw, sched.max_num_batched_tokens, sched.max_num_seqs, small.num_params)
    assert draft == free // (bytes_per_block(target, 1, 16) + bytes_per_block(small, 1, 16))
    assert ngram == off and draft < mtp < off and mtp > 0.9 * off

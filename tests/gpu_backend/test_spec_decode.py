"""Speculative decoding in the engine: n-gram drafts verified by the real forward pass over 1 + k
tokens per sequence, accepted greedily. Greedy outputs equal decoding without it (and
transformers'), every block comes back, KV is written only where the plans put tokens, and the
measured acceptance is in the results as the simulator reports it."""
import pytest
import torch

from calibrate.engine_config import build_engine
from engine_factories import TINY_CONFIG, make_prompt, make_request
from gpu_backend.engine import Engine, EngineConfig
from gpu_backend.sampling_params import SamplingParams
from policies import CacheConfig, ConfigError, SchedulerConfig, SpeculativeConfig
from sim.config import load_config
from sim.runner import simulate
from sim.workload import build_workload


def make_engine(model, k=0, budget=2048, num_gpu_blocks=256, block_size=8, prefix=False, max_num_seqs=8,
                lookup=(2, 4)) -> Engine:
    spec = SpeculativeConfig("ngram", k, prompt_lookup_min=lookup[0], prompt_lookup_max=lookup[1]) if k \
        else SpeculativeConfig()
    config = EngineConfig(model=model.config, speculative=spec,
                          scheduler=SchedulerConfig(policy="vllm", max_num_batched_tokens=budget,
                                                    max_num_seqs=max_num_seqs, max_model_len=512),
                          cache=CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks,
                                            enable_prefix_caching=prefix))
    engine = Engine(config, "cpu", model=model)
    engine.kv_cache.fill_(float("nan"))
    engine.expected_slots = set()
    engine.plans = []
    execute = engine.runner.execute

    def recording_execute(plan):
        bs = engine.kv_cache.block_size
        for s in plan.seqs:
            table = s.request.block_table
            engine.expected_slots.update((table[p // bs], p % bs) for p in range(s.num_computed_tokens, s.context_len))
        engine.plans.append(plan)
        return execute(plan)

    engine.runner.execute = recording_execute
    return engine


def serve(engine, prompts, max_tokens, **kw):
    reqs = [make_request(i, p, max_tokens, **kw) for i, p in enumerate(prompts)]
    for r in reqs:
        engine.add_request(r)
    engine.run_until_done()
    return reqs


def check_invariants(engine, reqs):
    bm = engine.scheduler.block_manager
    assert bm.num_free_gpu_blocks == bm.num_gpu_blocks, "blocks leaked"
    assert all(r.is_finished for r in reqs) and not engine.scheduler.has_unfinished()
    written = ~engine.kv_cache.buffer.isnan().all(-1).all(-1)  # [L, 2, N, B]
    allowed = torch.zeros_like(written[0, 0])
    for b, o in engine.expected_slots:
        allowed[b, o] = True
    assert not (written & ~allowed).any(), "KV written outside allotted slots"


def repetitive(n, seed):
    """A prompt that repeats itself, so prompt lookup has something to find."""
    motif = make_prompt(7 + seed % 5, seed=seed)
    return (motif * (n // len(motif) + 1))[:n]


PROMPTS = [repetitive(n, 500 + n) for n in (30, 45, 21, 60)] + [make_prompt(25, seed=77)]


@pytest.fixture(scope="module")
def plain(tiny_model):
    engine = make_engine(tiny_model)
    return [r.output_token_ids for r in serve(engine, PROMPTS, 40)]


@pytest.mark.parametrize("k, budget, block_size", [(3, 2048, 8), (5, 2048, 4), (4, 13, 8), (1, 2048, 16)])
def test_greedy_outputs_equal_decoding_without_it(tiny_model, hf_ref, plain, k, budget, block_size):
    engine = make_engine(tiny_model, k, budget=budget, block_size=block_size)
    reqs = serve(engine, PROMPTS, 40)
    assert [r.output_token_ids for r in reqs] == plain
    for r, p in zip(reqs, PROMPTS):
        hf_ref.assert_same_greedy(p, r.output_token_ids)
    check_invariants(engine, reqs)
    verify = [p for p in engine.plans if p.spec_token_ids]
    assert verify, "no step verified drafts"
    for plan in engine.plans:
        assert plan.num_tokens <= budget
        for req_id, drafts in (plan.spec_token_ids or {}).items():
            [seq] = [s for s in plan.seqs if s.req_id == req_id]
            assert seq.num_tokens == 1 + len(drafts) and seq.samples and 1 <= len(drafts) <= k
    # the measured acceptance, in the results as the simulator's summary has it
    result = engine.result()
    s = result.summary
    accepted = sum(r.num_accepted_tokens for r in reqs)
    assert accepted > 0 and s["speculative"]["num_accepted_tokens"] == accepted
    assert s["speculative"]["num_drafts"] == sum(len(p.spec_token_ids) for p in verify)
    assert s["speculative"]["num_draft_tokens"] == sum(p.totals.num_spec_tokens for p in verify)
    assert s["acceptance_rate"] == pytest.approx(accepted / s["speculative"]["num_draft_tokens"])
    assert (result.requests["num_accepted_tokens"] == [r.num_accepted_tokens for r in reqs]).all()
    assert result.steps["num_spec_tokens"].sum() == s["speculative"]["num_draft_tokens"]
    # a request's sampling steps each emit 1 + its accepted drafts: every accepted draft saved a step
    for r in reqs:
        assert sum(1 for p in engine.plans for s in p.seqs if s.samples and s.request is r) == 40 - r.num_accepted_tokens


def test_with_prefix_caching_and_preemption(tiny_model, hf_ref, plain):
    """A pool too small for all (recompute preemptions drop the drafts) and prefix caching on
    (draft slots are never cached): still the same tokens, every block back."""
    engine = make_engine(tiny_model, 4, num_gpu_blocks=30, block_size=4, prefix=True)
    reqs = serve(engine, PROMPTS, 40)
    assert sum(r.num_preemptions for r in reqs) > 0
    assert [r.output_token_ids for r in reqs] == plain
    check_invariants(engine, reqs)


def test_streamed_outputs_carry_every_accepted_token(tiny_model, plain):
    engine = make_engine(tiny_model, 3)
    got = {}
    reqs = [make_request(i, p, 40) for i, p in enumerate(PROMPTS)]
    for r in reqs:
        engine.add_request(r, on_output=lambda out: got.setdefault(out.req_id, []).extend(out.new_token_ids))
    engine.run_until_done()
    assert [got[i] for i in range(len(PROMPTS))] == plain


def oracle_engine(model, plain, k):
    """An engine whose proposer knows the greedy answer: its drafts are the next k tokens of it."""
    engine = make_engine(model, k)
    engine.scheduler.proposer = lambda req: plain[req.req_id][req.num_output_tokens:req.num_output_tokens + k]
    engine.steps = []
    engine.step_hooks.append(lambda plan, result: engine.steps.append((plan, result)))
    return engine


def test_right_drafts_are_all_accepted(tiny_model, plain):
    """Drafts equal to the target's greedy tokens are all accepted: 1 + k tokens a step."""
    k = 4
    engine = oracle_engine(tiny_model, plain, k)
    reqs = serve(engine, PROMPTS, 40)
    assert [r.output_token_ids for r in reqs] == plain
    assert len(engine.steps) == 1 + -(-39 // (k + 1))  # the prefill, then 1 + k tokens a step
    assert all(r.num_accepted_tokens == r.num_draft_tokens == 39 - r.num_drafts for r in reqs)
    assert engine.result().summary["acceptance_rate"] == 1.0
    check_invariants(engine, reqs)


def test_a_stop_token_among_accepted_drafts_ends_the_request_there(tiny_model, plain):
    """A stop token that arrives as an accepted draft ends the request at that token: the drafts
    after it and the verify's own token are dropped."""
    k, i = 4, 0
    # an output position that an oracle's draft fills after another draft, its token new to the output
    j = next(j for j in range(1, 40) if j % (k + 1) >= 2 and plain[i][j] not in plain[i][:j])
    stop = plain[i][j]
    engine = oracle_engine(tiny_model, plain, k)
    [r] = serve(engine, [PROMPTS[i]], 40, sampling=SamplingParams(stop_token_ids=(stop,)), ignore_eos=False)
    assert r.finish_reason.value == "stop" and r.output_token_ids == plain[i][:j + 1]
    plan, result = engine.steps[-1]
    assert plan.spec_token_ids[i].index(stop) == result.num_accepted[i] >= 1
    assert result.sampled_token_ids[i] == stop and i in result.stopped
    check_invariants(engine, [r])


def test_sampled_requests_get_no_drafts_and_other_methods_are_refused(tiny_model):
    engine = make_engine(tiny_model, 3)
    reqs = serve(engine, PROMPTS[:2], 20, sampling=SamplingParams(temperature=0.8, seed=1))
    assert all(r.num_drafts == 0 for r in reqs) and not any(p.spec_token_ids for p in engine.plans)
    with pytest.raises(ConfigError, match="^speculative.method: the engine proposes by n-gram"):
        EngineConfig(model=tiny_model.config, speculative=SpeculativeConfig("draft", 3, draft_model="x"))


def test_a_servesim_config_runs_on_the_engine_with_the_simulators_summary():
    """`[speculative]` of a servesim config reaches the engine (calibrate.engine_config); its results
    have the simulator's keys, the engine's acceptance measured, the simulator's drawn."""
    config = load_config({
        "model": {"name": str(TINY_CONFIG), "dtype": "float32"}, "hardware": {"num_gpu_blocks": 512},
        "scheduler": {"policy": "vllm", "max_num_batched_tokens": 256, "max_num_seqs": 16, "max_model_len": 512},
        "workload": {"kind": "poisson", "rate": 40.0, "num_requests": 12, "seed": 3,
                     "prompt_len": {"kind": "uniform", "low": 4, "high": 48},
                     "output_len": {"kind": "constant", "value": 30}},
        "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.5,
                        "prompt_lookup_min": 2, "prompt_lookup_max": 4}})
    engine = build_engine(config, "cpu")
    assert engine.config.speculative == config.speculative
    result = engine.run_workload(build_workload(config.workload, config.scheduler.max_model_len), progress=False)
    simulated = simulate(config)
    assert set(result.summary) == set(simulated.summary) and "speculative" in result.summary
    assert list(result.requests.columns) == list(simulated.requests.columns)
    assert list(result.steps.columns) == list(simulated.steps.columns)
    assert result.summary["speculative"]["num_accepted_tokens"] == result.requests["num_accepted_tokens"].sum() > 0
    assert (result.requests["num_output_tokens"] == 30).all()

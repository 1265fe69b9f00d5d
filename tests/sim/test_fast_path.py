"""Decode stretches replayed (`sim.decode_replay`, the replica's fast path) give exactly the
step-by-step loop's results.

Every comparison runs the same simulation twice, `fast_decode=False` and `True`, and requires
the `requests` and `steps` tables to be equal bit for bit (no tolerance), plus the summary. The
workloads are drawn at random over policies, queues, preemption modes, memory pressure, budgets
smaller than the batch, closed loops, shared prefixes (prefix caching with token ids), time limits
and several replicas, so that arrivals, finishes, block boundaries and preemptions all land inside
or at the edge of decode runs.
"""
from __future__ import annotations

import math
import random

import pandas as pd
import pytest
import simpy

from policies import BatchPlan, ScheduledSeq
from records.results import Recorder, requests_table, steps_table
from sim.config import load_config
from sim.decode_replay import DecodeReplay, decode_time_function
from sim.mixed_replay import MixedReplay
from sim.latency import ConstantLatencyModel, LatencyModel, RooflineLatencyModel
from sim.replica import Replica
from specs import get_gpu, get_model
from sim.runner import simulate
from sim_helpers import make_requests, make_sched
import policies.schedulers  # noqa: F401,E402  (every policy class defined)
from policies.chunked_scheduler import ChunkedScheduler  # noqa: E402
from policies.scheduler import Scheduler  # noqa: E402
from sim.mixed_replay import REPRODUCED  # noqa: E402


def run_both(monkeypatch, config, latency_model=None):
    """(step-by-step result, fast result, number of the fast one's steps that were never planned by
    `Scheduler.schedule`: replayed in decode stretches or mixed ones)."""
    from policies.scheduler import Scheduler

    planned = []
    original = Scheduler.schedule

    def counting(self, now):
        plan = original(self, now)
        if not plan.is_empty:
            planned.append(plan.step_id)
        return plan

    monkeypatch.setattr(Scheduler, "schedule", counting)
    results = []
    for fast in (False, True):
        planned.clear()
        results.append(simulate(config, latency_model=latency_model, fast_decode=fast))
        if not fast:
            assert len(planned) >= len(results[0].steps), "the fast path ran although it was turned off"
    return results[0], results[1], len(results[1].steps) - len(planned)


def assert_identical(slow, fast):
    pd.testing.assert_frame_equal(slow.requests, fast.requests, check_exact=True)
    pd.testing.assert_frame_equal(slow.steps, fast.steps, check_exact=True)
    assert _nan_equal(slow.summary, fast.summary)


def _nan_equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_nan_equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def random_config(seed: int):
    """A small random scenario; about half of them under memory pressure."""
    rnd = random.Random(seed)
    policy = rnd.choice(["chunked", "chunked", "vllm", "continuous", "static"])
    queue = rnd.choice(["fcfs", "priority"])
    preemption = "recompute" if policy == "vllm" else rnd.choice(["recompute", "swap", "hybrid"])
    kind = rnd.choice(["poisson", "gamma", "closed_loop", "closed_loop"])
    data = {
        "model": {"name": "Llama-2-7B"},
        "hardware": {"gpu": rnd.choice(["H100-SXM", "A100-80G"]), "swap_space_gb": 1.0,
                     "num_gpu_blocks": rnd.choice([None, 60, 120, 400])},
        "scheduler": {"policy": policy, "queue": queue, "preemption": preemption,
                      "max_num_batched_tokens": rnd.choice([8, 64, 256, 2048]),
                      "max_num_seqs": rnd.choice([3, 16, 256]), "max_model_len": 2048,
                      "hybrid_swap_threshold": 8},
        "cache": {"block_size": rnd.choice([4, 16])},
        "workload": {"kind": kind, "num_requests": rnd.randint(20, 60), "seed": seed,
                     "prompt_len": {"kind": "lognormal", "median": rnd.choice([20, 200]), "sigma": 1.0,
                                    "max": 900},
                     "output_len": {"kind": "lognormal", "median": 30, "sigma": 1.0, "max": 300}},
    }
    if policy != "continuous" and data["scheduler"]["max_num_batched_tokens"] < 16:
        data["scheduler"]["max_num_batched_tokens"] = 8  # fewer tokens than running requests: no runs
    elif policy in ("continuous", "static"):
        data["scheduler"]["max_num_batched_tokens"] = 2048
    if policy in ("continuous", "vllm"):  # vLLM refuses a budget below max_num_seqs (chunked allows it)
        sched = data["scheduler"]
        sched["max_num_seqs"] = min(sched["max_num_seqs"], sched["max_num_batched_tokens"])
    if kind == "closed_loop":
        data["workload"].update(num_users=rnd.choice([2, 8, 24]), think_time=rnd.choice([0.0, 0.05, 1.0]))
    else:
        data["workload"]["rate"] = rnd.choice([1.0, 5.0, 40.0])
    if queue == "priority" and kind != "closed_loop":
        data["workload"]["classes"] = [{"name": "hi", "priority": 0, "fraction": 0.3},
                                       {"name": "lo", "priority": 1, "fraction": 0.7}]
    if rnd.random() < 0.5:  # shared prefixes give prompts token ids (prefix caching hashes them)
        data["workload"].update(num_prefix_groups=2, prefix_len=rnd.choice([16, 40]), users_per_group=3)
    if rnd.random() < 0.3:
        data["cache"]["enable_prefix_caching"] = True
    if rnd.random() < 0.25:
        data["sim"] = {"max_sim_time_s": rnd.choice([0.5, 3.0])}
    if rnd.random() < 0.2 and data["hardware"]["num_gpu_blocks"] is None:
        data["cluster"] = {"num_replicas": 2, "router": "round_robin"}
    if data["hardware"]["num_gpu_blocks"] is None:
        del data["hardware"]["num_gpu_blocks"]
    return load_config(data)


@pytest.mark.parametrize("seed", range(24))
def test_random_scenarios_are_identical_with_and_without_decode_runs(monkeypatch, seed):
    slow, fast, _ = run_both(monkeypatch, random_config(seed))
    assert_identical(slow, fast)


def azure_like(num_requests: int = 150, **overrides):
    return load_config("examples/azure_conv_fit.toml",
                       [f"workload.num_requests={num_requests}", "workload.rate=7.0"]
                       + [f"{k}={v}" for k, v in overrides.items()])


def test_the_benchmark_scenario_is_identical_and_mostly_replayed(monkeypatch):
    slow, fast, replayed = run_both(monkeypatch, azure_like())
    assert_identical(slow, fast)
    assert replayed > 0.5 * len(fast.steps)  # the fast path really carries the decode stretches


@pytest.mark.parametrize("policy", [None, "continuous"])
def test_memory_pressure_preemptions_inside_decode_stretches(monkeypatch, policy):
    # a few hundred blocks for Azure-like lengths: runs must end where the free blocks do (continuous,
    # vLLM v0: at the decode after the last free block is taken, whether it needs a block or not)
    overrides = {"hardware.num_gpu_blocks": 300, "workload.rate": 50}
    if policy:
        overrides["scheduler.policy"] = policy
    config = azure_like(60, **overrides)
    slow, fast, replayed = run_both(monkeypatch, config)
    assert_identical(slow, fast)
    assert slow.summary["num_preemptions"] > 0 and replayed > 0


class MaxContextLatency(LatencyModel):
    """A pure latency model without `decode_step_times`: the replica times runs on their exact plans.

    It depends on each sequence's own context (not only their sum), so a wrong plan shows.
    """

    def is_pure(self) -> bool:
        return True

    def step_time(self, plan: BatchPlan) -> float:
        longest = max((s.num_computed_tokens + s.num_tokens for s in plan.seqs), default=0)
        return 1e-3 + 1e-6 * longest + 1e-5 * plan.num_tokens + 1e-7 * (plan.step_id % 7)


@pytest.mark.parametrize("latency_model", [MaxContextLatency(), ConstantLatencyModel(0.01, 1e-5)],
                         ids=["pure-step-time", "constant"])
def test_other_latency_models_are_identical(monkeypatch, latency_model):
    slow, fast, replayed = run_both(monkeypatch, azure_like(80), latency_model=latency_model)
    assert_identical(slow, fast)
    assert replayed > 0


def test_the_profiled_model_is_identical(monkeypatch):
    from pathlib import Path

    from sim.latency.profiled import ProfiledLatencyModel

    examples = Path(__file__).resolve().parents[2] / "examples"
    profiled = ProfiledLatencyModel.from_file(examples / "profiles" / "tiny-llama-cpu.json")
    slow, fast, replayed = run_both(monkeypatch, azure_like(80), latency_model=profiled)
    assert_identical(slow, fast)
    assert replayed > 0


def test_a_profile_with_after_prefill_costs_is_identical(monkeypatch):
    """The decode replay charges the factors and the curve's seconds on a stretch's first steps after
    a prefill as the loop does step by step (the mixed replay stands aside for such a profile)."""
    from pathlib import Path

    from sim.latency.profile import Profile
    from sim.latency.profiled import ProfiledLatencyModel

    examples = Path(__file__).resolve().parents[2] / "examples"
    profile = Profile.load(examples / "profiles" / "tiny-llama-cpu.json")
    profile.meta["after_prefill_excess"] = [0.4, 0.2, 0.1]
    profile.meta["after_prefill_curve"] = {"prefill_tokens": [16, 256], "excess_s": [[2e-4, 1e-4], [1e-3, 4e-4]]}
    warm = ProfiledLatencyModel(profile)
    slow, fast, replayed = run_both(monkeypatch, azure_like(80), latency_model=warm)
    assert_identical(slow, fast)
    assert replayed > 0
    # and the factors did something: the same workload without them ends sooner
    plain = simulate(azure_like(80), latency_model=ProfiledLatencyModel.from_file(
        examples / "profiles" / "tiny-llama-cpu.json"))
    assert slow.steps.duration.sum() > plain.steps.duration.sum()


class Recording:
    """Not a `LatencyModel` (so it declares nothing): every step must reach `step_time`."""

    def __init__(self) -> None:
        self.plans = []

    def step_time(self, plan: BatchPlan) -> float:
        self.plans.append(plan.step_id)
        return 0.01


def test_a_model_that_does_not_opt_in_sees_every_plan(monkeypatch):
    model = Recording()
    result = simulate(azure_like(40), latency_model=model, fast_decode=True)
    assert model.plans == list(range(len(result.steps)))


def test_decode_time_function_takes_only_what_a_model_declares():
    class Wrapper:  # forwards attributes like sim.cluster.disaggregated.PreloadedKVLatency
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def step_time(self, plan):
            return self.inner.step_time(plan) * 2

    class ModelWrapper(Wrapper, LatencyModel):  # a LatencyModel's defaults win over the forwarding
        pass

    class Slower(ConstantLatencyModel):  # changes step_time, so gives up the inherited formula
        def step_time(self, plan):
            return 2 * super().step_time(plan)

        def decode_step_times(self, num_seqs, context_sum, num_steps):
            return None

    assert decode_time_function(Wrapper(ConstantLatencyModel())) is None
    assert decode_time_function(ModelWrapper(ConstantLatencyModel())) is None
    assert decode_time_function(Slower()) is not None  # pure: timed on exact plans
    sched = make_sched("chunked")
    for r in make_requests(2, prompt=5, max_tokens=9):
        sched.add_request(r)
    sched.update(sched.schedule(0.0), _Result(), 0.1)
    assert decode_time_function(Slower(0.01))(sched.running, sched.step_id, 2, 12, 0, 3) == [0.02] * 3


class _Result:
    duration = 0.1
    sampled_token_ids = None
    stopped = frozenset()


@pytest.mark.parametrize("model, tp", [("Llama-2-7B", 1), ("Llama-2-70B", 4), ("Mixtral-8x7B", 2)])
def test_roofline_decode_step_time_is_step_time_bit_for_bit(model, tp):
    m = RooflineLatencyModel(get_model(model), get_gpu("H100-SXM"), tp=tp)
    rnd = random.Random(tp)
    reqs = make_requests(64, prompt=10, max_tokens=10)
    for _ in range(200):
        n = rnd.randint(1, 64)
        contexts = [rnd.randint(1, 8000) for _ in range(n)]
        plan = BatchPlan(0, tuple(ScheduledSeq(reqs[i], 1, c, True) for i, c in enumerate(contexts)))
        assert m.decode_step_time(n, sum(contexts) + n) == m.step_time(plan) == sum(m.breakdown(plan).values())
        later = BatchPlan(0, tuple(ScheduledSeq(reqs[i], 1, c + 5, True) for i, c in enumerate(contexts)))
        assert m.decode_step_times(n, sum(contexts) + n, 6)[5] == m.step_time(later)


@pytest.mark.parametrize("model, tp", [("Llama-2-7B", 1), ("Mixtral-8x7B", 2)])
def test_roofline_step_time_is_the_sum_of_its_breakdown_bit_for_bit(model, tp):
    """`step_time` adds the terms itself (no dict); any plan: prefills, decodes, padding, swaps, copies."""
    m = RooflineLatencyModel(get_model(model), get_gpu("A100-80G"), tp=tp)
    rnd = random.Random(7)
    reqs = make_requests(32, prompt=10, max_tokens=10)
    for _ in range(300):
        seqs = tuple(ScheduledSeq(reqs[i], rnd.choice([1, 1, rnd.randint(1, 600)]), rnd.choice([0, rnd.randint(1, 5000)]),
                                  rnd.random() < 0.7, rnd.random() < 0.1) for i in range(rnd.randint(0, 32)))
        pairs = tuple((i, i) for i in range(rnd.choice([0, 0, 3])))
        plan = BatchPlan(0, seqs, swap_out_blocks=pairs, swap_in_blocks=pairs[:1],
                         blocks_to_copy=pairs[:rnd.choice([0, 2])])
        assert m.step_time(plan) == sum(m.breakdown(plan).values())


@pytest.mark.parametrize("policy", ["chunked", "continuous"])
def test_every_consumer_reads_the_plans_alike(policy):
    """One `seqs` list per plan: the plan's counts, the steps table's and the roofline's agree on it,
    and each entry is the share of the step its request was advanced by."""
    from policies.batch_plan import ScheduledSeqs
    from policies.batch_plan import plan_totals as totals_of
    from records.results import count_tokens, record_step
    from sim.latency.roofline import plan_totals

    sched = make_sched(policy, num_gpu_blocks=400, block_size=4, max_num_batched_tokens=64, max_num_seqs=64,
                       max_model_len=2048)
    rnd = random.Random(3)
    prompts, outputs = [rnd.randint(1, 90) for _ in range(40)], [rnd.randint(1, 60) for _ in range(40)]
    reqs = make_requests(40, arrivals=[0.01 * i for i in range(40)], prompt=prompts, max_tokens=outputs)
    model = RooflineLatencyModel(get_model("Llama-2-7B"), get_gpu("H100-SXM"), block_size=4)
    num_decodes, num_compact, now, i = 0, 0, 0.0, 0
    while sched.has_unfinished() or i < 40:
        while i < 40 and reqs[i].arrival_time <= now:
            sched.add_request(reqs[i], now)
            i += 1
        plan = sched.schedule(now)
        decodes = [s for s in plan.seqs if s.is_decode]
        num_decodes += len(decodes)
        entries = tuple(plan.seqs)  # the compact leading decodes written out
        num_compact += isinstance(plan.seqs, ScheduledSeqs)
        assert plan.seqs == entries and len(plan.seqs) == len(entries)
        assert plan.totals == totals_of(entries)
        assert plan.sampling_requests() == [s.request for s in entries if s.samples]
        assert count_tokens(entries) == (plan.num_prefill_tokens, plan.num_decode_tokens, plan.num_padding_tokens)
        record = record_step(plan, now, 0.01, sched)
        assert (record.num_prefill_tokens, record.num_decode_tokens, record.num_seqs) == \
            (plan.num_prefill_tokens, plan.num_decode_tokens, plan.num_seqs)
        assert plan.num_decode_tokens == len(decodes)
        assert plan_totals(plan)[6] == sum(s.context_len for s in decodes)
        assert model.step_time(plan) == sum(model.breakdown(plan).values())
        for s in plan.seqs:
            assert s.request.num_computed_tokens == s.num_computed_tokens + s.num_tokens
            assert s.samples == (s.request.num_computed_tokens == s.request.num_tokens)
        assert [s.req_id for s in plan.seqs] == [r.req_id for r in sched.running if r.req_id in
                                                  plan.num_scheduled_tokens]  # running order
        now += 0.01
        sched.update(plan, _Result(), now)
    assert num_decodes > 100 and num_compact > 10


def _state(sched):
    bm = sched.block_manager
    return ([(r.req_id, r.state, r.num_computed_tokens, list(r.output_token_ids), list(r.token_times),
              list(r.block_table), r.finish_time) for r in sched.running],
            list(bm.free_queue), list(bm.ref_counts), sched.step_id, len(bm.holders))


@pytest.mark.parametrize("num_gpu_blocks", [20, 24, 1000])
def test_advance_is_the_step_by_step_state(num_gpu_blocks):
    """The scheduler alone: a replayed stretch leaves the state step-by-step leaves (blocks included)."""
    def prepared():
        sched = make_sched("chunked", num_gpu_blocks=num_gpu_blocks, block_size=4, max_num_batched_tokens=512)
        for r in make_requests(6, prompt=[5, 9, 12, 3, 7, 16], max_tokens=[30, 12, 40, 25, 9, 33]):
            sched.add_request(r)
        sched.update(sched.schedule(0.0), _Result(), 0.1)
        return sched

    fast, slow = prepared(), prepared()
    horizon = fast.decode_horizon()
    assert horizon == 8  # the request with max_tokens 9 finishes at the 8th step from here
    ends = [0.1 + 0.01 * (j + 1) for j in range(horizon)]
    replay = DecodeReplay(simpy.Environment(), fast, decode_time_function(ConstantLatencyModel()), Recorder(), "0")
    k, used, finished = replay.advance(ends)
    usage = []
    for j in range(k):
        plan = slow.schedule(ends[j] - 0.01)
        assert all(s.num_tokens == 1 for s in plan.seqs) and len(plan.seqs) == 6 and not plan.preempted
        usage.append(slow.block_manager.num_used_gpu_blocks)
        done = slow.update(plan, _Result(), ends[j])
    assert k > 0
    assert used == usage and [r.req_id for r in finished] == [r.req_id for r in done]
    assert _state(fast) == _state(slow)
    if num_gpu_blocks < 1000:  # the free blocks ran out before the horizon: the run stops short
        assert k < horizon
        plan = slow.schedule(1.0)
        assert plan.preempted or plan.swapped_out
    else:
        assert k == horizon and [r.max_tokens for r in finished] == [9]


def test_a_v0_stretch_ends_at_the_decode_that_finds_no_free_block():
    """`continuous` (vLLM v0: a decode needs a free block, used or not). 3 blocks of 8: a (1 token)
    and b (6) hold one each; b takes the last free one 2 steps on, so the 4th step (a's decode finds
    none) preempts, though a needs a new block only at its 8th."""
    def prepared():
        sched = make_sched("continuous", num_gpu_blocks=3, block_size=8)
        for r in make_requests(2, prompt=[1, 6], max_tokens=18):
            sched.add_request(r)
        sched.update(sched.schedule(0.0), _Result(), 0.1)
        return sched

    fast, slow = prepared(), prepared()
    ends = [0.1 + 0.01 * (j + 1) for j in range(fast.decode_horizon())]
    replay = DecodeReplay(simpy.Environment(), fast, decode_time_function(ConstantLatencyModel()), Recorder(), "0")
    k, _, _ = replay.advance(ends)
    for j in range(k):
        plan = slow.schedule(ends[j] - 0.01)
        assert len(plan.seqs) == 2 and not plan.preempted
        slow.update(plan, _Result(), ends[j])
    assert k == 3 and _state(fast) == _state(slow)
    assert slow.schedule(1.0).preempted == (1,)


def test_no_run_while_someone_prefills_or_could_be_admitted():
    sched = make_sched("chunked", max_num_seqs=2)
    a, b, c = make_requests(3, prompt=8, max_tokens=20)
    sched.add_request(a)
    assert sched.decode_horizon() == 0  # waiting, seat free
    sched.update(sched.schedule(0.0), _Result(), 0.1)
    assert sched.decode_horizon() == 19
    sched.add_request(b)
    assert sched.decode_horizon() == 0
    sched.update(sched.schedule(0.1), _Result(), 0.2)
    sched.add_request(c)  # every seat taken, fcfs: c cannot get in, the decodes run on
    assert sched.decode_horizon() == 18
    assert make_sched("static").decode_horizon() == 0


@pytest.mark.parametrize("durations", [(0.01, 0.013), (0.01, 0.01)])
def test_replicas_sharing_an_environment_are_identical(durations):
    """Each replica's run stops before the other's next step (equal step times tie on the clock)."""
    def run(fast_decode):
        env = simpy.Environment()
        replicas = [Replica(env, make_sched("chunked", num_gpu_blocks=64, block_size=4),
                            ConstantLatencyModel(d), name=str(i), fast_decode=fast_decode)
                    for i, d in enumerate(durations)]
        ended = []
        for i, replica in enumerate(replicas):
            replica.on_finish.append(lambda r, now: ended.append((r.req_id, now)))
            for r in make_requests(4, prompt=[20, 3, 40, 9], max_tokens=[50, 7, 60, 31], start_id=10 * i):
                replica.submit(r)
        env.run()
        return ended, [steps_table(r.recorder.steps) for r in replicas], \
            [requests_table(r.recorder.requests) for r in replicas], [r.busy_time for r in replicas]

    slow, fast = run(False), run(True)
    assert slow[0] == fast[0] and slow[3] == fast[3]
    for a, b in zip(slow[1] + slow[2], fast[1] + fast[2]):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def random_chunked_config(seed: int):
    """A random chunked-prefill scenario, where the mixed (prefill + decode) stretches of
    `sim.mixed_replay` carry most steps: budgets below and above the batch, prefill thresholds,
    few seats, a watermark, memory pressure, closed loops, time limits."""
    rnd = random.Random(1000 + seed)
    kind = rnd.choice(["poisson", "poisson", "closed_loop"])
    data = {
        "model": {"name": "Llama-2-7B"},
        "hardware": {"gpu": rnd.choice(["H100-SXM", "A100-80G"]), "swap_space_gb": 1.0,
                     "num_gpu_blocks": rnd.choice([None, None, 80, 150, 400])},
        "scheduler": {"policy": rnd.choice(["chunked", "chunked", "vllm"]), "queue": "fcfs",
                      "preemption": "recompute", "max_num_batched_tokens": rnd.choice([16, 48, 128, 512]),
                      "max_num_seqs": rnd.choice([2, 5, 32, 256]), "max_model_len": 2048,
                      "long_prefill_token_threshold": rnd.choice([0, 0, 0, 24, 100])},
        "cache": {"block_size": rnd.choice([4, 16]), "watermark": rnd.choice([0.0, 0.0, 0.05])},
        "workload": {"kind": kind, "num_requests": rnd.randint(30, 90), "seed": seed,
                     "prompt_len": {"kind": "lognormal", "median": rnd.choice([10, 60, 300]), "sigma": 1.0,
                                    "max": 900},
                     "output_len": {"kind": "lognormal", "median": rnd.choice([1, 8, 40]), "sigma": 1.0,
                                    "max": 300}},
    }
    if kind == "closed_loop":
        data["workload"].update(num_users=rnd.choice([2, 8, 24]), think_time=rnd.choice([0.0, 0.05, 1.0]))
    else:
        data["workload"]["rate"] = rnd.choice([2.0, 10.0, 60.0])
    if rnd.random() < 0.2:
        data["sim"] = {"max_sim_time_s": rnd.choice([0.5, 3.0])}
    if data["hardware"]["num_gpu_blocks"] is None:
        del data["hardware"]["num_gpu_blocks"]
    if rnd.random() < 0.5:  # vLLM 0.19+: a waiting request needs its whole sequence's blocks free
        data["scheduler"]["reserve_full_isl"] = True
    sched = data["scheduler"]
    if sched["policy"] == "vllm":  # vLLM refuses a budget below max_num_seqs (chunked allows it)
        sched["max_num_seqs"] = min(sched["max_num_seqs"], sched["max_num_batched_tokens"])
    return load_config(data)


@pytest.mark.parametrize("seed", range(30))
def test_mixed_stretches_are_identical(monkeypatch, seed):
    slow, fast, replayed = run_both(monkeypatch, random_chunked_config(seed))
    assert_identical(slow, fast)
    assert replayed > 0 or not len(fast.steps)


def test_mixed_stretches_carry_most_steps_and_leave_the_blocks_counted(monkeypatch):
    """Over the random chunked scenarios the fast path plans few steps, and after each mixed
    stretch the block manager's bookkeeping holds (blocks counted as schedule() would)."""
    original = MixedReplay.run
    runs = []

    def checking(self, now):
        out = yield from original(self, now)
        if out is not None:
            runs.append(now)
            self.scheduler.block_manager.check_invariants()
        return out

    monkeypatch.setattr(MixedReplay, "run", checking)
    steps = replayed = 0
    for seed in range(12):
        slow, fast, n = run_both(monkeypatch, random_chunked_config(seed))
        steps, replayed = steps + len(fast.steps), replayed + n
    assert runs and replayed > 0.5 * steps


def test_a_replica_not_alone_stops_its_mixed_stretches_at_every_event(monkeypatch):
    """Behind a router reading the replicas' state (least tokens, in one environment) the stretches
    end before each arrival; the results still match step by step."""
    config = azure_like(120, **{"cluster.num_replicas": 3, "cluster.router": "least_tokens"})
    slow, fast, replayed = run_both(monkeypatch, config)
    assert_identical(slow, fast)
    assert replayed > 0


def test_the_mixed_replay_takes_only_what_it_reproduces():
    from policies.chunked_scheduler import ChunkedScheduler
    from sim.mixed_replay import replayable, totals_time_function

    class Slower(ConstantLatencyModel):  # a new step_time without a new totals_step_time: not used
        def step_time(self, plan):
            return 2 * super().step_time(plan)

    assert totals_time_function(ConstantLatencyModel()) is not None
    assert totals_time_function(Slower()) is None
    assert totals_time_function(MaxContextLatency()) is None
    assert replayable(make_sched("chunked")) and not replayable(make_sched("continuous"))
    assert not replayable(make_sched("chunked", queue="priority"))

    class Other(ChunkedScheduler):  # a subclass that schedules differently is not replayed
        def _schedule_waiting(self, step):
            return None

    sched = make_sched("chunked")
    sched.__class__ = Other
    assert not replayable(sched)


@pytest.mark.parametrize("limit", [1.37, 2.05, 3.3, 4.81])
def test_a_time_limit_inside_a_carried_stretch(monkeypatch, limit):
    """The run stops at sim.max_sim_time_s inside a step: that step is not recorded, its requests are
    aborted as they are (a stretch carried through an arrival never runs past the limit)."""
    slow, fast, replayed = run_both(monkeypatch, azure_like(80, **{"sim.max_sim_time_s": limit,
                                                                   "workload.rate": 30}))
    assert_identical(slow, fast)
    assert replayed > 0 and fast.summary["num_aborted"] > 0


@pytest.mark.parametrize("model, tp, gpu", [("Llama-2-7B", 1, "H100-SXM"), ("CodeLlama-34B", 2, "A100-80G"),
                                            ("Mixtral-8x7B", 2, "H100-SXM")])
def test_roofline_totals_step_time_is_step_time_bit_for_bit(model, tp, gpu):
    """A step timed from its sums (the mixed stretches) is `step_time` of its plan, bit for bit."""
    from policies.batch_plan import ScheduledSeqs
    from sim.mixed_replay import totals_time_function

    m = RooflineLatencyModel(get_model(model), get_gpu(gpu), tp=tp)
    fast = totals_time_function(m)
    rnd = random.Random(11)
    reqs = make_requests(40, prompt=10, max_tokens=10)
    for _ in range(300):
        n = rnd.randint(0, 30)
        decodes, contexts = reqs[:n], [rnd.randint(1, 8000) for _ in range(n)]
        rest = tuple(ScheduledSeq(reqs[30 + i], rnd.randint(1, 600), rnd.choice([0, rnd.randint(1, 4000)]),
                                  rnd.random() < 0.5) for i in range(rnd.randint(0 if n else 1, 4)))
        plan = BatchPlan(0, ScheduledSeqs(decodes, contexts, rest) if n else rest)
        assert fast(plan.totals) == m.totals_step_time(plan.totals) == m.step_time(plan)


def test_every_policy_declaring_mixed_runs_keeps_the_chunked_pass():
    """sim.mixed_replay reproduces ChunkedScheduler's pass; a policy that declares `mixed_runs` must not
    override any method of it (else the replay would silently differ from the loop)."""
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    declaring = [cls for cls in subclasses(Scheduler) if cls.mixed_runs and cls.__module__.startswith("policies.")]
    assert ChunkedScheduler in declaring
    for cls in declaring:
        assert issubclass(cls, ChunkedScheduler), cls
        overridden = [name for name in REPRODUCED if getattr(cls, name) is not getattr(ChunkedScheduler, name)]
        assert not overridden, (cls.__name__, overridden)


@pytest.mark.parametrize("seed", range(20))
def test_client_timeouts_are_identical_with_and_without_fast_paths(monkeypatch, seed):
    """A client timeout (`workload.request_timeout_s`) gives every request a deadline that both fast
    paths must end their stretches before (the replica aborts at the boundary at or after it):
    random scenarios of both kinds, the timeout short enough that many requests time out."""
    import dataclasses

    rnd = random.Random(3000 + seed)
    config = (random_chunked_config if seed % 2 else random_config)(seed)
    timeout = rnd.choice([0.05, 0.2, 0.5, 1.5])
    config = dataclasses.replace(config, workload=dataclasses.replace(config.workload, request_timeout_s=timeout))
    slow, fast, replayed = run_both(monkeypatch, config)
    assert_identical(slow, fast)
    table = fast.requests
    done = table["finish_reason"].isin(["length", "stop"])
    assert (table.loc[done, "finish_time"] <= table.loc[done, "arrival_time"] + timeout).all()


def test_timeouts_inside_carried_and_decode_stretches(monkeypatch):
    """The benchmark scenario overloaded, with a timeout: most steps still replayed, many requests
    timed out, the tables the loop's."""
    slow, fast, replayed = run_both(monkeypatch, azure_like(200, **{"workload.rate": 15,
                                                                    "workload.request_timeout_s": 2.0}))
    assert_identical(slow, fast)
    assert 20 < fast.summary["num_timed_out"] < 180 and replayed > len(fast.steps) // 2

"""Replica: the one loop as a SimPy process, with the real policies.Scheduler."""
from __future__ import annotations

import itertools

import numpy as np

import pytest
import simpy

from sim.replica import Replica
from records.results import Recorder, preemption_table, requests_table, steps_table
from sim_helpers import ConstantLatency, check_preemption_intervals, make_requests, make_sched, run_requests


@pytest.mark.parametrize("policy, budget", [("chunked", 32), ("chunked", 4096), ("continuous", 4096),
                                            ("static", 4096)])
def test_a_lone_requests_e2e_is_the_sum_of_its_step_times(policy, budget):
    # step times differ with the tokens computed, so a wrong sum cannot match by accident
    latency = ConstantLatency(0.01, per_token=1e-4)
    req = make_requests(1, arrivals=[0.5], prompt=100, max_tokens=10)[0]
    rec = run_requests(make_sched(policy, max_num_batched_tokens=budget), latency, [req])
    steps = steps_table(rec.steps)
    assert req.finish_reason.value == "length" and req.num_output_tokens == 10
    assert req.token_times[-1] - req.arrival_time == pytest.approx(steps["duration"].sum(), rel=1e-12)
    assert sum(latency.calls) == pytest.approx(steps["duration"].sum())
    # TTFT: the steps up to and including the one that sampled the first token
    prefill_steps = -(-100 // budget)
    assert req.first_token_time - req.arrival_time == pytest.approx(steps["duration"][:prefill_steps].sum())
    assert len(steps) == prefill_steps + 9  # then one decode step per further token
    assert req.first_scheduled_time == req.arrival_time


def test_idle_replica_waits_for_the_next_arrival_and_steps_never_overlap():
    reqs = make_requests(3, arrivals=[0.0, 0.01, 10.0], prompt=40, max_tokens=5)
    rec = run_requests(make_sched("chunked"), ConstantLatency(0.02), reqs)
    steps = steps_table(rec.steps)
    ends = steps["start"] + steps["duration"]
    assert (steps["start"].iloc[1:].to_numpy() >= ends.iloc[:-1].to_numpy() - 1e-12).all()
    busy_until = max(reqs[0].finish_time, reqs[1].finish_time)
    assert not ((steps["start"] >= busy_until) & (steps["start"] < 10.0)).any()  # asleep in between
    assert reqs[2].first_scheduled_time == pytest.approx(10.0)  # no wait: the replica woke at its arrival
    assert reqs[1].first_scheduled_time == pytest.approx(0.02)  # arrived mid-step: joins at the next step


def test_rejected_requests_end_at_once_reach_the_hook_and_stay_in_the_results():
    env = simpy.Environment()
    ended = []
    replica = Replica(env, make_sched("chunked", max_model_len=64), ConstantLatency(0.01),
                      on_finish=lambda r, now: ended.append((r.req_id, now)))
    ok, too_long = make_requests(2, prompt=[10, 100], max_tokens=4)
    replica.submit(ok)
    replica.submit(too_long)
    env.run()
    assert (too_long.req_id, 0.0) in ended and ok.req_id in [i for i, _ in ended]
    table = requests_table(replica.recorder.requests)
    assert list(table["finish_reason"]) == ["length", "rejected"]
    assert replica.num_outstanding == 0


def test_aborted_requests_reach_the_hook_and_free_their_place():
    ended = []
    env = simpy.Environment()
    replica = Replica(env, make_sched("chunked", max_num_seqs=1), ConstantLatency(0.01),
                      on_finish=lambda r, now: ended.append((r.req_id, r.finish_reason.value, now)))
    first, second, third = make_requests(3, prompt=20, max_tokens=50)
    for r in (first, second, third):
        replica.submit(r)

    def client():
        yield env.timeout(0.105)
        replica.abort(first.req_id)  # through the replica: the hook runs at once
        yield env.timeout(0.1)
        replica.scheduler.abort_request(second.req_id, env.now)  # behind its back: seen at the next step

    env.process(client())
    env.run()
    assert ended[0] == (0, "aborted", pytest.approx(0.105))
    assert ended[1][:2] == (1, "aborted") and ended[1][2] == pytest.approx(0.21)
    assert ended[2][:2] == (2, "length")
    assert third.first_scheduled_time < 0.3  # the seat was handed on
    assert replica.num_outstanding == 0 and not replica.scheduler.has_unfinished()


def test_several_replicas_share_one_env_behind_a_router():
    env = simpy.Environment()
    recorder = Recorder()
    replicas = [Replica(env, make_sched("chunked"), ConstantLatency(0.01), recorder, name=f"r{i}") for i in range(3)]
    ended = []
    for rep in replicas:
        rep.on_finish.append(lambda r, now: ended.append(r.req_id))
    reqs = make_requests(30, arrivals=[i * 0.005 for i in range(30)], prompt=50, max_tokens=8)
    pick = itertools.cycle(replicas)

    def router():
        for r in reqs:
            if r.arrival_time > env.now:
                yield env.timeout(r.arrival_time - env.now)
            # least outstanding work, ties round-robin
            target = min(replicas, key=lambda rep: (rep.num_outstanding_tokens(), next(pick) is rep))
            target.submit(r)

    env.process(router())
    env.run()
    assert sorted(ended) == list(range(30))
    steps = steps_table(recorder.steps)
    assert set(steps["replica"]) == {"r0", "r1", "r2"}
    table = requests_table(recorder.requests, recorder.replica_of)
    assert set(table["replica"]) == {"r0", "r1", "r2"}
    assert all(rep.num_outstanding_tokens() == 0 for rep in replicas)
    # each replica's steps are sequential on its own clock
    for _, s in steps.groupby("replica"):
        ends = (s["start"] + s["duration"]).to_numpy()
        assert (s["start"].to_numpy()[1:] >= ends[:-1] - 1e-12).all()


def test_outstanding_tokens_shrink_as_work_is_done():
    env = simpy.Environment()
    replica = Replica(env, make_sched("chunked", max_num_batched_tokens=64), ConstantLatency(0.01))
    req = make_requests(1, prompt=128, max_tokens=4)[0]
    replica.submit(req)
    seen = []

    def probe():
        while not req.is_finished:
            seen.append(replica.num_outstanding_tokens())
            yield env.timeout(0.01)

    env.process(probe())
    env.run()
    assert all(a >= b for a, b in zip(seen, seen[1:]))
    assert replica.num_outstanding_tokens() == 0


def test_a_non_positive_step_time_is_an_error():
    class Zero:
        def step_time(self, plan):
            return 0.0

    with pytest.raises(ValueError, match="^latency model"):
        run_requests(make_sched("chunked"), Zero(), make_requests(1))


@pytest.mark.parametrize("wake", [True, False])
def test_wake_lets_an_idle_replica_use_blocks_freed_outside_its_loop(wake):
    # the replica's only request waits for blocks another owner holds (a disaggregated KV hold):
    # freeing them is no submit, so only wake() gets the replica to look again
    from policies import Request

    env = simpy.Environment()
    replica = Replica(env, make_sched("chunked", num_gpu_blocks=4), ConstantLatency(0.01))
    bm = replica.scheduler.block_manager
    holder = Request("hold", 0.0, 64, 1)
    assert bm.allocate_slots(holder, 64)  # all 4 blocks of 16 tokens
    req = make_requests(1, prompt=30, max_tokens=2)[0]
    replica.submit(req)

    def release():
        yield env.timeout(1.0)
        bm.free(holder)
        if wake:
            replica.wake()

    env.process(release())
    env.run(until=5.0)
    if wake:
        assert req.first_scheduled_time == pytest.approx(1.0) and req.finish_reason.value == "length"
    else:
        assert req.first_scheduled_time is None and replica.is_idle
    replica.wake()  # waking a replica with nothing new to do is harmless: it sleeps again
    env.run(until=6.0)
    assert req.is_finished and replica.is_idle


@pytest.mark.parametrize("policy, preemption, queue", [("chunked", "recompute", "fcfs"), ("chunked", "swap", "fcfs"),
                                                       ("continuous", "hybrid", "fcfs"),
                                                       ("continuous", "recompute", "priority")])
def test_preemption_intervals_under_memory_pressure(tmp_path, policy, preemption, queue):
    # 16 requests needing ~40 blocks of 4 tokens each at their end share 40 blocks: many preemptions
    import pandas as pd

    sched = make_sched(policy, num_gpu_blocks=40, block_size=4, num_cpu_blocks=200, preemption=preemption,
                       queue=queue, max_num_batched_tokens=64, max_num_seqs=16, hybrid_swap_threshold=8)
    reqs = make_requests(16, arrivals=[0.003 * i for i in range(16)], prompt=[10 + 7 * (i % 5) for i in range(16)],
                         max_tokens=[30 + 11 * (i % 4) for i in range(16)])
    for i, r in enumerate(reqs):
        r.priority = i % 3  # priority queue: admissions preempt lower-priority runners too
    rec = run_requests(sched, ConstantLatency(0.01, per_token=1e-4), reqs)
    assert all(r.finish_reason.value == "length" for r in reqs)
    assert sum(r.num_preemptions for r in reqs) >= 5, "the scenario no longer preempts"
    check_preemption_intervals(reqs)
    # each interval runs from a step that preempted to the start of the step that ran it again
    steps = steps_table(rec.steps)
    table = requests_table(rec.requests)
    intervals = preemption_table(table)
    assert len(intervals) == table["num_preemptions"].sum()
    preempting = (steps["num_preempted"] > 0) | (steps["num_swap_out_blocks"] > 0)  # recompute | swap
    assert set(intervals["preempted_at"]) <= set(steps.loc[preempting, "start"])
    assert set(intervals["resumed_at"]) <= set(steps["start"])
    # the column survives a CSV round trip (what the app reads back)
    table.to_csv(tmp_path / "requests.csv", index=False)
    pd.testing.assert_frame_equal(preemption_table(pd.read_csv(tmp_path / "requests.csv")), intervals)


def test_the_first_step_after_an_idle_wait_pays_the_models_after_idle_time():
    latency = ConstantLatency(0.02)
    latency.after_idle_s = 0.005
    # request 0 finds the replica idle since t=0 (it waited), request 1 arrives mid-step (no wait),
    # request 2 arrives after the replica slept again
    reqs = make_requests(3, arrivals=[0.5, 0.51, 10.0], prompt=40, max_tokens=3)
    rec = run_requests(make_sched("chunked"), latency, reqs)
    steps = steps_table(rec.steps)
    first = {round(s, 9) for s in (0.5, 10.0)}
    woke = steps["start"].round(9).isin(first)
    assert woke.sum() == 2
    assert steps["duration"][woke].tolist() == pytest.approx([0.025, 0.025])  # 0.02 + after_idle
    assert steps["duration"][~woke].tolist() == pytest.approx([0.02] * int((~woke).sum()))
    assert reqs[0].first_token_time - reqs[0].arrival_time == pytest.approx(0.025)
    assert reqs[2].first_token_time - reqs[2].arrival_time == pytest.approx(0.025)


def test_a_model_with_an_after_idle_cost_is_charged_by_the_length_of_the_wait():
    latency = ConstantLatency(0.02)
    latency.after_idle_s = 1.0  # unused: the cost by idle length wins
    latency.after_idle_cost = lambda idle_s: 0.01 * idle_s
    reqs = make_requests(2, arrivals=[0.5, 10.0], prompt=40, max_tokens=3)
    rec = run_requests(make_sched("chunked"), latency, reqs)
    steps = steps_table(rec.steps)
    first_end = reqs[0].finish_time
    # request 0 waited from t=0, request 1 from the end of request 0's last step (waits in a row add up)
    assert reqs[0].first_token_time - 0.5 == pytest.approx(0.02 + 0.005)
    assert reqs[1].first_token_time - 10.0 == pytest.approx(0.02 + 0.01 * (10.0 - first_end))
    assert (steps["duration"] > 0.0205).sum() == 2


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_async_scheduling_a_mid_step_arrival_joins_the_step_after_next(async_scheduling):
    """vLLM's async scheduling plans step n+1 while step n runs: a request that arrives during step
    n is first scheduled at the end of step n+1 (without it: at the end of step n). One that
    arrives while the engine is idle is scheduled at once either way."""
    env = simpy.Environment()
    replica = Replica(env, make_sched("chunked"), ConstantLatency(0.02), async_scheduling=async_scheduling)
    first, mid, idle = make_requests(3, prompt=16, max_tokens=6)
    replica.submit(first)

    def later(delay, request):
        yield env.timeout(delay)
        replica.submit(request)

    env.process(later(0.03, mid))  # during the second step (0.02-0.04)
    env.process(later(5.0, idle))
    env.run()
    expected = 0.06 if async_scheduling else 0.04
    assert mid.first_scheduled_time == pytest.approx(expected)
    assert idle.first_scheduled_time == pytest.approx(5.0)
    for r in (first, mid, idle):
        assert r.finish_reason.value == "length" and r.num_output_tokens == 6


class SplitLatency:
    """Device time per token plus host time per sequence, as a `breakdown` (no `step_time` shortcut)."""

    def __init__(self, device_per_token: float, host_s: float, host_per_seq: float = 0.0) -> None:
        self.device_per_token, self.host_s, self.host_per_seq = device_per_token, host_s, host_per_seq

    def breakdown(self, plan) -> dict[str, float]:
        return {"linear": 0.01 + self.device_per_token * plan.num_tokens,
                "overhead": self.host_s + self.host_per_seq * plan.num_seqs}

    def step_time(self, plan) -> float:
        return sum(self.breakdown(plan).values())


@pytest.mark.parametrize("host_s", [0.002, 0.03])  # hidden behind the GPU, then longer than it
def test_async_scheduling_hides_host_work_behind_the_previous_step(host_s):
    """With async scheduling a step that follows another at once takes max(device, host); the first
    step after an idle wait has nothing to hide behind and takes device + host. Without it every
    step takes device + host."""
    durations = {}
    for async_scheduling in (False, True):
        latency = SplitLatency(1e-4, host_s, host_per_seq=1e-4)
        reqs = make_requests(3, arrivals=[0.0, 0.0, 20.0], prompt=50, max_tokens=8)
        rec = Recorder()
        env = simpy.Environment()
        replica = Replica(env, make_sched("chunked"), latency, rec, async_scheduling=async_scheduling)
        for r in reqs:
            env.process(_submit_at(env, replica, r))
        env.run()
        steps = steps_table(rec.steps)
        assert all(r.finish_reason.value == "length" and r.num_output_tokens == 8 for r in reqs)
        durations[async_scheduling] = steps
    serial, overlapped = durations[False], durations[True]
    assert len(serial) == len(overlapped)
    tokens = (overlapped["num_prefill_tokens"] + overlapped["num_decode_tokens"] + overlapped["num_padding_tokens"])
    device = 0.01 + 1e-4 * tokens.to_numpy()
    host = host_s + 1e-4 * overlapped["num_seqs"].to_numpy()
    assert serial["duration"].to_numpy() == pytest.approx(device + host)
    after_idle = overlapped["start"].isin([0.0, 20.0]).to_numpy()
    assert after_idle.sum() == 2
    got = overlapped["duration"].to_numpy()
    assert got[after_idle] == pytest.approx((device + host)[after_idle])
    assert got[~after_idle] == pytest.approx(np.maximum(device, host)[~after_idle])


def _submit_at(env, replica, request):
    yield env.timeout(request.arrival_time)
    replica.submit(request)


def test_decode_steps_just_after_a_prefill_cost_the_models_after_prefill_cost():
    """A latency model with `has_after_prefill` / `after_prefill_cost`: the k-th decode-only step after
    a step that carried P prefill tokens takes what the model says for (k, P, its plan's time), and
    nothing else changes (all requests at t=0: the schedule does not depend on the times)."""
    def cost(k, prefill_tokens, seconds):
        factor = 1.5 if k == 1 else 1.25 if k == 2 else 1.0
        return seconds * factor + (prefill_tokens * 1e-5 if k <= 2 else 0.0)

    class Warm(ConstantLatency):
        has_after_prefill = True

        def after_prefill_cost(self, k, prefill_tokens, seconds):
            return cost(k, prefill_tokens, seconds)

    def run(latency):
        reqs = make_requests(6, prompt=[40, 90, 20, 150, 60, 30], max_tokens=[12, 5, 20, 8, 15, 3])
        return steps_table(run_requests(make_sched("chunked", max_num_batched_tokens=64), latency, reqs).steps)

    base, warm = run(ConstantLatency(0.01, per_token=1e-4)), run(Warm(0.01, per_token=1e-4))
    cols = ["num_prefill_tokens", "num_decode_tokens", "num_seqs"]
    assert base[cols].equals(warm[cols])  # the same steps
    since, last, expected, ks = 1 << 30, 0, [], set()
    for pf, dec, t in zip(base.num_prefill_tokens, base.num_decode_tokens, base.duration):
        since, last = (0, pf) if pf else (since + 1, last)
        expected.append(cost(since, last, t) if not pf else t)
        ks.add(min(since, 3))
    assert np.allclose(warm.duration.to_numpy(), expected)
    assert {0, 1, 2, 3} <= ks  # prefill, first, second and later decode steps all occur

"""Prefill/decode disaggregation: KV transfer time, TTFT on a slow link, block holds, admission, goodput,
and deterministic pools against tandem-queue theory."""

import numpy as np
import pytest
import simpy

from policies import Request
from sim.capacity.executor import SerialExecutor
from sim.capacity.search import find_max_rate
from sim.capacity.slo import SLO
from sim.cluster.disaggregated import DisaggregatedCluster
from sim.latency.base import ConstantLatencyModel
from specs import get_model
from records.results import Recorder
from sim.runner import simulate
from cluster_helpers import base_dict, make_config

DISAGG = ["disaggregation.enabled=true"]
SPACED = ["workload.kind=constant", "workload.rate=1", "workload.num_requests=30"]  # one request at a time


def kv_bytes_per_token_reference(name: str) -> int:
    """K and V, every layer, every KV head, 16-bit: computed from the catalog's dimensions."""
    m = get_model(name)
    return 2 * m.num_layers * m.num_kv_heads * (m.hidden_size // m.num_attention_heads) * 2


def test_transfer_time_scales_with_prompt_length_and_bandwidth():
    res = simulate(make_config(DISAGG + SPACED + ["disaggregation.link_bandwidth_gbps=10",
                                                   "disaggregation.link_latency_s=0.001"]))
    reqs = res.requests
    expected = 0.001 + reqs["num_prompt_tokens"] * kv_bytes_per_token_reference("Llama-3-8B") / 10e9
    np.testing.assert_allclose(reqs["kv_transfer_s"], expected, rtol=1e-9)
    assert reqs["num_prompt_tokens"].nunique() > 10  # lengths vary, so this is a line, not a point
    # half the bandwidth: the bandwidth term doubles
    slow = simulate(make_config(DISAGG + SPACED + ["disaggregation.link_bandwidth_gbps=5",
                                                    "disaggregation.link_latency_s=0.001"])).requests
    np.testing.assert_allclose(slow["kv_transfer_s"] - 0.001, 2 * (reqs["kv_transfer_s"] - 0.001), rtol=1e-9)
    assert res.summary["kv_transfer_s"]["count"] == len(reqs)


def test_slow_link_adds_the_transfer_time_to_ttft():
    # short answers: each request has the decode side to itself, so its first step starts as its KV lands
    short = {"output": (20, 0.0, 20)}
    fast = simulate(make_config(DISAGG + SPACED + ["disaggregation.link=nvlink"], **short)).requests
    slow = simulate(make_config(DISAGG + SPACED + ["disaggregation.link=ethernet",
                                                    "disaggregation.link_bandwidth_gbps=1"], **short)).requests
    extra = slow["kv_transfer_s"] - fast["kv_transfer_s"]
    assert (extra > 0.01).all()
    np.testing.assert_allclose(slow["ttft_s"] - fast["ttft_s"], extra, rtol=1e-6, atol=1e-9)
    # DistServe's convention: the first token leaves the prefill side at once, the link does not show
    f2 = simulate(make_config(DISAGG + SPACED + ["disaggregation.link=nvlink", "disaggregation.first_token=prefill"]))
    s2 = simulate(make_config(DISAGG + SPACED + ["disaggregation.link=ethernet", "disaggregation.first_token=prefill"]))
    np.testing.assert_allclose(s2.requests["ttft_s"], f2.requests["ttft_s"], rtol=1e-9)


def test_lone_request_ttft_includes_the_decode_side_s_first_step():
    """vLLM's P/D proxy throws the prefill side's token away and streams the decode instance's: the
    decode side recomputes the last prompt position (its KV is not counted as received) and samples
    the first token there, so TTFT = prefill + transfer + one decode-side step, and the decode side
    runs one step per output token."""
    res = simulate(make_config(DISAGG + ["workload.num_requests=1", "disaggregation.link=ethernet"]))
    req, steps = res.requests.iloc[0], res.steps
    prefill = steps[steps.replica == "p0"]["duration"].sum()
    decode = steps[steps.replica == "d0"]["duration"]
    assert len(decode) == req["num_output_tokens"]
    assert req["ttft_s"] == pytest.approx(prefill + req["kv_transfer_s"] + decode.iloc[0], rel=1e-9)
    assert req["e2e_s"] == pytest.approx(prefill + req["kv_transfer_s"] + decode.sum(), rel=1e-9)
    assert decode.max() < 0.5 * prefill + 0.05  # none of them a full prefill (the KV arrived)


def test_lone_request_with_the_first_token_at_prefill_decodes_the_rest():
    """DistServe: the prefill instance returns the first token at once; the decode instance starts
    from it, one step per remaining token."""
    res = simulate(make_config(DISAGG + ["workload.num_requests=1", "disaggregation.link=ethernet",
                                         "disaggregation.first_token=prefill"]))
    req, steps = res.requests.iloc[0], res.steps
    prefill = steps[steps.replica == "p0"]["duration"].sum()
    decode = steps[steps.replica == "d0"]["duration"]
    assert len(decode) == req["num_output_tokens"] - 1
    assert req["ttft_s"] == pytest.approx(prefill, rel=1e-9)
    assert req["e2e_s"] == pytest.approx(prefill + req["kv_transfer_s"] + decode.sum(), rel=1e-9)


def test_a_one_token_request_still_goes_through_the_decode_side_after_transfer():
    """The P/D proxy sends every request to the decode instance, max_tokens=1 included, and streams
    its token from there; DistServe ends such a request on the prefill instance."""
    one = ["workload.num_requests=1", "disaggregation.link=ethernet"]
    res = simulate(make_config(DISAGG + one, output=(1, 0.0, 1)))
    req = res.requests.iloc[0]
    assert req["num_output_tokens"] == 1 and req["kv_transfer_s"] > 0
    assert (res.steps.replica == "d0").sum() == 1
    res = simulate(make_config(DISAGG + one + ["disaggregation.first_token=prefill"], output=(1, 0.0, 1)))
    assert (res.steps.replica == "d0").sum() == 0 and res.requests.iloc[0]["num_output_tokens"] == 1


def test_kv_blocks_are_held_on_both_sides_while_moving():
    config = make_config(DISAGG + ["disaggregation.link_bandwidth_gbps=0.5", "workload.num_requests=1"])
    env = simpy.Environment()
    cluster = DisaggregatedCluster(env, config, Recorder())
    req = Request("r", 0.0, 1000, 4)
    cluster.submit(req)
    pbm = cluster.prefill[0].scheduler.block_manager
    dbm = cluster.decode[0].scheduler.block_manager
    transfer = cluster.transfer_time(1000)
    assert transfer > 0.2  # ~131 MB at 0.5 GB/s
    env.run(until=0.15)  # the prefill (tens of ms) is done, the transfer is not
    assert cluster.prefill[0].num_finished == 1
    assert req.first_token_time is None and not cluster.decode[0].num_submitted
    assert pbm.num_used_gpu_blocks == pbm.blocks_for(1000)
    assert dbm.num_used_gpu_blocks == dbm.blocks_for(1001)
    env.run()
    assert req.is_finished and req.num_output_tokens == 4
    assert pbm.num_used_gpu_blocks == 0 and dbm.num_used_gpu_blocks == 0


@pytest.mark.parametrize("first_token, pulled", [("after_transfer", False), ("prefill", True)])
def test_a_decode_side_with_every_slot_running_pulls_no_kv_under_vllm(first_token, pulled):
    """vLLM's decode scheduler allocates blocks for received KV in its waiting loop, which stops at
    max_num_seqs running: a request whose prefill ends then keeps its KV on the prefill side until a
    slot frees. DistServe's decode side pulls by memory alone."""
    config = make_config(DISAGG + ["disaggregation.decode={scheduler = {max_num_seqs = 1}}",
                                   f"disaggregation.first_token={first_token}", "workload.num_requests=1"])
    env = simpy.Environment()
    cluster = DisaggregatedCluster(env, config, Recorder())
    pbm = cluster.prefill[0].scheduler.block_manager
    decode = cluster.decode[0].scheduler
    cluster.submit(Request("r0", 0.0, 1000, 200))
    env.run(until=0.2)  # r0 decodes (200 steps of ~7 ms) in the one slot
    cluster.submit(Request("r1", 0.2, 1000, 200))
    env.run(until=0.5)  # r1's prefill is long done
    assert decode.num_running == 1 and decode.requests.keys() >= {"r0"}
    assert ("r1" in decode.requests) is pulled
    assert pbm.num_used_gpu_blocks == (0 if pulled else pbm.blocks_for(1000))
    env.run()
    assert all(r.is_finished and r.num_output_tokens == 200 for r in cluster.recorder.requests)
    assert pbm.num_used_gpu_blocks == 0 and decode.block_manager.num_used_gpu_blocks == 0


def test_a_time_limit_frees_the_kv_of_transfers_waiting_for_and_on_the_link():
    """Stopped while one transfer is on a slow link and others wait for the decode side's blocks:
    every hold on both sides comes back, as it does for the live halves."""
    config = make_config(DISAGG + ["disaggregation.link_bandwidth_gbps=0.5", "workload.num_requests=1",
                                   "disaggregation.decode={count = 1, hardware = {num_gpu_blocks = 70}}"])
    env = simpy.Environment()
    cluster = DisaggregatedCluster(env, config, Recorder())
    for k in range(3):
        cluster.submit(Request(f"r{k}", 0.0, 1000, 4))
    pbm = cluster.prefill[0].scheduler.block_manager
    dbm = cluster.decode[0].scheduler.block_manager
    env.run(until=0.15)  # the prefills are done; one transfer moves, the others wait for decode blocks
    assert len(cluster.moving) == 1 and len(cluster.pending[0]) == 2
    assert pbm.num_used_gpu_blocks == 3 * pbm.blocks_for(1000) and dbm.num_used_gpu_blocks > 0
    cluster.end_unfinished(env.now, "time limit")
    assert pbm.num_used_gpu_blocks == 0 and dbm.num_used_gpu_blocks == 0
    assert not cluster.moving and not cluster.pending[0]
    assert all(r.is_finished for r in cluster.recorder.requests)


def test_decode_side_admits_only_what_fits():
    """A decode pool of 64 blocks (1024 tokens) and 600-token prompts: one request decodes at a time."""
    res = simulate(make_config(DISAGG + ["disaggregation.decode={hardware = {num_gpu_blocks = 64}}",
                                         "workload.rate=50", "workload.num_requests=20"],
                               prompt=(600, 0.0, 600), output=(50, 0.0, 50)))
    reqs, steps = res.requests, res.steps
    assert (reqs["finish_reason"] == "length").all()
    d = steps[steps.replica == "d0"]
    assert d["num_running"].max() == 1 and d["kv_usage"].max() <= 1.0
    # a prompt whose KV can never fit on the decode side is rejected, not stuck
    res = simulate(make_config(DISAGG + ["disaggregation.decode={hardware = {num_gpu_blocks = 16}}",
                                         "workload.num_requests=5"], prompt=(600, 0.0, 600)))
    assert (res.requests["finish_reason"] == "rejected").all()
    assert res.requests["reject_reason"].str.contains("decode replica").all()


def _per_gpu_goodput(workload_prompt, workload_output, slo, num_requests=100, start_rate=4.0, max_rate=400.0):
    base = base_dict(num_requests=num_requests, prompt=workload_prompt, output=workload_output,
                     disaggregation={"prefill": {"count": 1}, "decode": {"count": 1}})
    out = {}
    for name, layout in (("colocated", ["cluster.num_replicas=2"]), ("disaggregated", DISAGG)):
        r = find_max_rate(base, slo, start_rate=start_rate, rel_tol=0.1, executor=SerialExecutor(),
                          base_overrides=layout, max_rate=max_rate, progress=False)
        assert r.num_gpus == 2
        out[name] = r
    return out


def test_disaggregation_wins_on_prefill_heavy_work_with_a_strict_tpot_slo():
    """Long prompts interleaved with decodes inflate colocated TPOT; a decode-only replica keeps it low."""
    r = _per_gpu_goodput((2000, 0.15, 2500), (100, 0.4, 150), SLO(ttft_s=2.0, tpot_s=0.012))
    assert r["disaggregated"].rate_per_gpu > 1.3 * r["colocated"].upper / 2


def test_colocation_wins_when_ttft_binds_and_tpot_is_loose():
    """Long prompts, short answers, strict TTFT: colocated, both GPUs prefill; disaggregated, only one does."""
    r = _per_gpu_goodput((2000, 0.15, 2500), (20, 0.3, 40), SLO(ttft_s=0.3, tpot_s=0.1))
    assert r["colocated"].rate_per_gpu > 1.3 * r["disaggregated"].upper / 2


def test_an_overloaded_decode_pool_backs_up_into_the_prefill_pool_and_nothing_gets_stuck():
    """Decode memory for ~3 requests, prefill memory for ~6: KV holds fill the prefill side, which
    stops admitting prefills until transfers free it; every request still finishes."""
    res = simulate(make_config(DISAGG + ["disaggregation.decode={hardware = {num_gpu_blocks = 128}}",
                                         "disaggregation.prefill={hardware = {num_gpu_blocks = 256}}",
                                         "workload.rate=100", "workload.num_requests=60"],
                               prompt=(600, 0.0, 600), output=(40, 0.0, 40)))
    reqs, steps = res.requests, res.steps
    assert (reqs["finish_reason"] == "length").all(), reqs["reject_reason"].dropna().unique()
    p = steps[steps.replica == "p0"]
    assert p["kv_usage"].max() > 0.8  # the holds filled the prefill side ...
    assert p["num_waiting"].max() > 10  # ... so arrivals queued there: TTFT carries the back-pressure
    assert reqs["ttft_s"].max() > 10 * reqs["ttft_s"].min()


@pytest.mark.parametrize("first_token", ["after_transfer", "prefill"])
def test_time_limit_aborts_live_requests_in_both_pools_and_loses_none(first_token):
    res = simulate(make_config(DISAGG + ["sim.max_sim_time_s=3", "workload.rate=40", "workload.num_requests=400",
                                         "disaggregation.link_bandwidth_gbps=2",
                                         f"disaggregation.first_token={first_token}"]))
    reqs = res.requests
    arrived = reqs["arrival_time"] < 3
    assert arrived.all() and reqs["req_id"].is_unique
    assert set(reqs["finish_reason"]) == {"length", "aborted"}
    aborted = reqs[reqs["finish_reason"] == "aborted"]
    assert aborted["reject_reason"].str.contains("max_sim_time_s").all()
    # some were cut off mid-decode (first token out, not done), some before their first token
    assert aborted["first_token_time"].notna().any() and aborted["first_token_time"].isna().any()
    # every token the decode pool computed reached its user request, the cut-off ones' too
    decode = res.steps[res.steps["replica"].str.startswith("d")]
    # the first token: sampled on the prefill side under DistServe, on the decode side under vLLM
    from_prefill = reqs["num_output_tokens"].clip(upper=1) if first_token == "prefill" else 0
    assert decode["num_decode_tokens"].sum() == (reqs["num_output_tokens"] - from_prefill).sum()


def test_steps_count_computed_tokens_only_transferred_kv_is_not_prefill():
    # no prefix caching, no preemption: the prefill pool computes every prompt exactly once, and
    # the decode pool computes one position per output token: the last prompt position, which
    # samples the first token, then one per token after it (received KV: none)
    res = simulate(make_config(DISAGG + ["workload.num_requests=60", "workload.rate=20",
                                         "disaggregation.prefill={count = 2}", "disaggregation.decode={count = 2}"]))
    reqs, steps = res.requests, res.steps
    assert (reqs["finish_reason"] == "length").all() and reqs["num_preemptions"].sum() == 0
    prefill = steps[steps["replica"].str.startswith("p")]
    decode = steps[steps["replica"].str.startswith("d")]
    assert set(prefill["replica"]) == {"p0", "p1"} and set(decode["replica"]) == {"d0", "d1"}
    assert prefill["num_prefill_tokens"].sum() == reqs["num_prompt_tokens"].sum()
    assert (decode["num_prefill_tokens"] == 0).all()
    assert decode["num_decode_tokens"].sum() == reqs["num_output_tokens"].sum()
    assert prefill["num_decode_tokens"].sum() == 0  # a prefill half samples its one token in its last chunk


def test_preemption_intervals_of_both_halves_reach_the_user_request():
    # a decode pool short of KV blocks preempts; the user-visible request carries its halves' intervals
    from records.results import preemption_table

    res = simulate(make_config(DISAGG + ["workload.num_requests=60", "workload.rate=30",
                                         "disaggregation.decode={count = 1, hardware = {num_gpu_blocks = 300}}"]))
    reqs = res.requests
    assert (reqs["finish_reason"] == "length").all() and reqs["num_preemptions"].sum() > 0
    intervals = preemption_table(reqs).merge(reqs[["req_id", "arrival_time", "first_token_time", "finish_time"]])
    assert len(intervals) == reqs["num_preemptions"].sum()
    # all on the decode side here: after the first token (the prefill side's), before the finish
    assert (intervals["first_token_time"] <= intervals["preempted_at"]).all()
    assert (intervals["preempted_at"] <= intervals["resumed_at"]).all()
    assert (intervals["resumed_at"] <= intervals["finish_time"]).all()


@pytest.mark.parametrize("side, blocks", [("prefill", 40), ("decode", 120)])
def test_every_preemption_of_either_half_is_counted_as_a_swap_or_a_recompute(side, blocks):
    """Swap preemption in a small pool on one side: each preemption the user request carries is a
    swap or a recompute, whichever half made it (the prefill half's swaps were dropped before).
    Prompts longer than the small prefill pool are rejected, and counted so."""
    pool = f"disaggregation.{side}={{count = 1, hardware = {{num_gpu_blocks = {blocks}, swap_space_gb = 4}}}}"
    res = simulate(make_config(DISAGG + [pool, "scheduler.preemption=swap", "scheduler.max_num_batched_tokens=128",
                                         "workload.num_requests=60", "workload.rate=200"]))
    reqs = res.requests
    assert set(reqs["finish_reason"]) <= {"length", "rejected"} and reqs["num_swaps"].sum() > 0
    assert (reqs["num_preemptions"] == reqs["num_swaps"] + reqs["num_recomputes"]).all()
    assert res.summary["num_swaps"] == reqs["num_swaps"].sum()


@pytest.mark.parametrize("extra, field", [
    (["cluster.num_replicas=2"], "cluster.num_replicas"),
    (["autoscaling.enabled=true"], "autoscaling.enabled"),
])
def test_settings_a_disaggregated_layout_would_leave_unused_are_refused(extra, field):
    """The pools are the replicas: [cluster]'s count and the autoscaler would be silently dropped."""
    from policies import ConfigError

    config = make_config(["disaggregation.enabled=true", *extra], num_requests=4)
    with pytest.raises(ConfigError, match=f"^{field}: "):
        simulate(config)
    assert simulate(make_config(["disaggregation.enabled=true"], num_requests=4)).summary["num_finished"] == 4


# --- deterministic pools against queueing theory ------------------------------------------------------
# Both pools serve one request at a time (max_num_seqs=1) with a constant-time step model: a prefill
# takes PREFILL_S, a decode half (output steps of one token: the last prompt position, which samples
# the first token, then one per later token) output x DECODE_STEP_S, the KV transfer a fixed T;
# round-robin routers. Then a request's life is prefill queue + prefill +
# transfer + decode queue + decode, each stage FCFS.

STEP_S, PER_TOKEN_S, PROMPT = 0.002, 2e-5, 400
PREFILL_S = STEP_S + PER_TOKEN_S * PROMPT  # 10 ms
DECODE_STEP_S = STEP_S + PER_TOKEN_S  # a decode step computes one position


def tandem(num_prefill: int, num_decode: int, rate: float, output: int, n: int, first_token="after_transfer"):
    """The requests table (in arrival order) of the deterministic pools above."""
    one = {"count": 1, "scheduler": {"max_num_seqs": 1}}
    config = make_config(DISAGG + ["scheduler.max_num_seqs=1", "disaggregation.link_bandwidth_gbps=10",
                                   "disaggregation.link_latency_s=0.001",
                                   "disaggregation.prefill_router=round_robin",
                                   "disaggregation.decode_router=round_robin",
                                   f"disaggregation.first_token={first_token}"],
                         num_requests=n, rate=rate, prompt=(PROMPT, 0.0, PROMPT), output=(output, 0.0, output),
                         disaggregation={"prefill": {**one, "count": num_prefill},
                                         "decode": {**one, "count": num_decode}})
    res = simulate(config, latency_model=ConstantLatencyModel(STEP_S, PER_TOKEN_S))
    return res.requests.sort_values("arrival_time")


def batch_se(values, num_batches: int = 40) -> float:
    """Standard error of a mean over a run by batch means (batches far longer than a busy period)."""
    means = [b.mean() for b in np.array_split(np.asarray(values), num_batches)]
    return float(np.std(means, ddof=1) / np.sqrt(num_batches))


def decode_steps(output: int, first_token: str) -> int:
    """Decode-side steps of a request: vLLM's samples the first token too; DistServe's starts from it."""
    return output if first_token == "after_transfer" else output - 1


@pytest.mark.parametrize("first_token", ["after_transfer", "prefill"])
@pytest.mark.parametrize("num_prefill, num_decode, output", [(1, 1, 3), (1, 1, 11), (1, 3, 11), (3, 2, 11)])
def test_deterministic_pools_follow_the_tandem_queue_request_by_request(num_prefill, num_decode, output,
                                                                        first_token):
    """Each request's TTFT and E2E are the tandem queue's: a prefill starts when it has arrived and
    its replica is free; its KV starts moving once the decode replica it was dealt has nobody
    waiting (under vLLM, nobody running either: the one slot is taken) and lands a transfer later;
    its decode starts when that KV is there and the replica is free. The first token is the decode
    side's first step (vLLM) or the prefill's (DistServe)."""
    gated = first_token == "after_transfer"
    decode_s = decode_steps(output, first_token) * DECODE_STEP_S
    rate = 0.8 * min(num_prefill / PREFILL_S, num_decode / decode_s)
    table = tandem(num_prefill, num_decode, rate, output, 2000, first_token)
    arrivals = table["arrival_time"].to_numpy()
    transfer = table["kv_transfer_s"].to_numpy()
    assert transfer.max() - transfer.min() < 1e-12 and transfer[0] > 0.005  # one prompt length: one time
    free, ready = np.zeros(num_prefill), np.empty(len(arrivals))
    for i, a in enumerate(arrivals):
        start = max(a, free[i % num_prefill])
        free[i % num_prefill] = ready[i] = start + PREFILL_S
    begin, finish = np.empty(len(arrivals)), np.empty(len(arrivals))
    pulled = np.zeros(num_decode)  # when the replica's last transfer started (FIFO)
    blocked = [[] for _ in range(num_decode)]  # the replica's spans that stop a transfer from starting
    last = np.zeros(num_decode)  # when the replica's last decode ends
    for c, i in enumerate(np.argsort(ready, kind="stable")):  # the decode router deals in prefill order
        d = c % num_decode
        t = max(ready[i], pulled[d])
        while any(lo <= t < hi for lo, hi in blocked[d]):
            t = max(hi for lo, hi in blocked[d] if lo <= t < hi)
        pulled[d] = t
        begin[i] = max(t + transfer[i], last[d])
        last[d] = finish[i] = begin[i] + decode_s
        blocked[d].append((t + transfer[i], finish[i] if gated else begin[i]))
    np.testing.assert_allclose(table["queue_s"], ready - PREFILL_S - arrivals, atol=1e-9)
    np.testing.assert_allclose(table["e2e_s"], finish - arrivals, atol=1e-9)
    first = begin + DECODE_STEP_S if gated else ready
    np.testing.assert_allclose(table["ttft_s"], first - arrivals, atol=1e-9)


@pytest.mark.parametrize("output", [3, 11])
def test_one_prefill_and_one_decode_replica_wait_as_an_md1_queue_at_the_slower_one(output):
    """Two deterministic servers in tandem delay a request as one M/D/1 queue at the slower
    server's service time plus both services (the order of such servers does not matter), with
    the transfer, a fixed delay between them, added: Pollaczek-Khinchine at the bottleneck. This
    is DistServe's pull (by memory alone); vLLM's waits for a free slot before the transfer, a
    setup time no M/D/1 has."""
    decode_s = (output - 1) * DECODE_STEP_S
    slower = max(PREFILL_S, decode_s)
    rate = 0.7 / slower
    table = tandem(1, 1, rate, output, 8000, "prefill")
    transfer = table["kv_transfer_s"].iloc[0]
    expected = rate * slower ** 2 / (2 * (1 - rate * slower)) + PREFILL_S + transfer + decode_s
    assert abs(table["e2e_s"].mean() - expected) < 4 * batch_se(table["e2e_s"])
    assert (table["e2e_s"] - table["ttft_s"]).min() == pytest.approx(transfer + decode_s, abs=1e-9)


@pytest.mark.parametrize("num_prefill, num_decode", [(1, 1), (1, 3), (2, 5), (3, 2)])
def test_saturated_pools_finish_requests_at_the_slower_pool_s_rate(num_prefill, num_decode):
    """Offered far more than either pool serves, the pools finish requests at the smaller of
    prefill replicas / prefill time and decode replicas / decode time: the P:D ratio picks the
    bottleneck (the decode side hardly idles for want of KV: under vLLM a freed slot pulls the KV
    of every request dealt to it at once, so one transfer's wait starts a long run of decodes)."""
    output = 11
    decode_s = output * DECODE_STEP_S
    table = tandem(num_prefill, num_decode, 400.0, output, 1500)
    assert (table["finish_reason"] == "length").all()
    finish = np.sort(table["finish_time"].to_numpy())
    lo, hi = len(finish) // 10, 9 * len(finish) // 10
    measured = (hi - lo) / (finish[hi] - finish[lo])
    assert measured == pytest.approx(min(num_prefill / PREFILL_S, num_decode / decode_s), rel=0.01)

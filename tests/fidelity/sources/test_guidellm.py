"""guidellm's sweep profile as a Workload: benchmark order, adaptive rates, lengths, shared prefix."""
from __future__ import annotations

import heapq

import numpy as np
import pytest

from policies import ConfigError, FinishReason
from fidelity.sources.guidellm import GuidellmWorkload, guidellm_workload
from fidelity.workloads import sweep_workload
from sim.workload.registry import read_profile

PROFILE = {"rate-type": "sweep", "rate": 5, "max-requests": 40, "random-seed": 42,
           "data": {"prefix_tokens": 1024, "prompt_tokens": 2048, "prompt_tokens_stdev": 500,
                    "prompt_tokens_min": 100, "prompt_tokens_max": 4096, "output_tokens": 32,
                    "output_tokens_stdev": 16, "output_tokens_min": 1, "output_tokens_max": 64}}


def drive(workload, service=lambda r: 0.5):
    """A fake server with a fixed service time per request; [(finish, request)] in finish order."""
    events = [(r.arrival_time + service(r), i, r) for i, r in enumerate(workload.start())]
    heapq.heapify(events)
    done, k = [], len(events)
    while events:
        t, _, r = heapq.heappop(events)
        r.record_token(0, t)  # answered: one token at its finish
        r.finish_reason = FinishReason.LENGTH
        done.append((t, r))
        for q in workload.on_finish(r, t):
            k += 1
            heapq.heappush(events, (q.arrival_time + service(q), k, q))
    return done


@pytest.mark.parametrize("version", ["0.3.0", None])
def test_sweep_runs_synchronous_throughput_then_constant_rates_between_them(version):
    wl = GuidellmWorkload({**PROFILE, "client": {"version": version}})
    done = drive(wl)
    assert len(done) == 5 * 40 == wl.num_requests
    phase = lambda k: sorted(r.arrival_time for _, r in done if r.tags["phase"] == k)  # noqa: E731
    sync = phase(0)
    assert np.diff(sync) == pytest.approx(np.full(39, 0.5))  # one at a time: each waits for the last
    thr = phase(1)
    assert thr[0] == thr[-1] and thr[0] >= sync[-1] + 0.5  # all at once, after the synchronous benchmark
    sync_rate, thr_rate = wl.measured_rates[:2]
    assert sync_rate == pytest.approx(40 / 20.0) and thr_rate == pytest.approx(40 / 0.5)
    rates = np.linspace(sync_rate, thr_rate, 4)[1:]
    for k, rate in zip((2, 3, 4), rates):
        t = np.array(phase(k))
        if version is None:  # unrecorded: 0.4 on, one every 1/rate from the benchmark's start
            assert np.diff(t) == pytest.approx(np.full(39, 1 / rate))
            continue
        burst = min(40, int(np.floor(rate)))
        assert burst > 1 and (t[:burst] == t[0]).all()  # 0.3's initial burst of floor(rate) requests
        if burst < 40:
            assert t[burst] == pytest.approx(t[0] + 1 / rate)
            assert np.diff(t[burst:]) == pytest.approx(np.full(len(t) - burst - 1, 1 / rate))


def test_lengths_follow_the_synthetic_data_and_share_the_prefix():
    wl = GuidellmWorkload({**PROFILE, "rate-type": "throughput", "max-requests": 3000})
    reqs = wl.start()
    own = np.array([r.num_prompt_tokens for r in reqs]) - 1024
    out = np.array([r.max_tokens for r in reqs])
    assert own.min() >= 100 and own.max() <= 4096 and own.mean() == pytest.approx(2048, abs=30)
    assert own.std() == pytest.approx(500, rel=0.06)
    assert out.min() >= 1 and out.max() <= 64 and out.mean() == pytest.approx(32, abs=1.5)
    assert len({tuple(r.prompt_token_ids[:1024]) for r in reqs[:50]}) == 1  # one shared prefix
    assert len({tuple(r.prompt_token_ids[1024:1040]) for r in reqs[:50]}) == 50  # own text differs


@pytest.mark.parametrize("version, groups", [("0.3.0", 1), ("0.6.0", 4)])
def test_prefix_count_makes_that_many_prefixes_from_04(version, groups):
    data = {**PROFILE["data"], "prefix_count": 4}
    wl = GuidellmWorkload({**PROFILE, "data": data, "rate-type": "throughput", "client": {"version": version}})
    reqs = wl.start()
    assert len({tuple(r.prompt_token_ids[:64]) for r in reqs}) == groups


def test_prefix_buckets_are_drawn_in_proportion_to_their_weights():
    data = {k: v for k, v in PROFILE["data"].items() if k != "prefix_tokens"}
    data["prefix_buckets"] = [{"bucket_weight": 75, "prefix_tokens": 512},
                              {"bucket_weight": 25, "prefix_count": 2, "prefix_tokens": 128}]
    wl = GuidellmWorkload({**PROFILE, "data": data, "rate-type": "throughput", "max-requests": 4000})
    groups: dict[tuple, list] = {}
    for r in wl.start():
        groups.setdefault(tuple(r.prompt_token_ids[:128]), []).append(r)
    assert len(groups) == 3  # one 512-token prefix, two of 128
    heavy = max(groups.values(), key=len)
    assert len({tuple(r.prompt_token_ids[:512]) for r in heavy}) == 1
    light = [g for g in groups.values() if g is not heavy]
    assert all(len({tuple(r.prompt_token_ids[128:144]) for r in g}) == len(g) for g in light)  # then own text
    assert len(heavy) / 4000 == pytest.approx(0.75, abs=0.03)  # the heavy bucket's share
    assert all(len(g) / 4000 == pytest.approx(0.125, abs=0.02) for g in light)
    assert wl.mean_prefix_tokens == pytest.approx(0.75 * 512 + 0.25 * 128)
    with pytest.raises(ConfigError, match="^profile.data.prefix_buckets: goes without prefix_tokens"):
        GuidellmWorkload({**PROFILE, "data": {**data, "prefix_tokens": 64}})
    old = GuidellmWorkload({**PROFILE, "data": data, "rate-type": "throughput", "client": {"version": "0.3.1"}})
    assert old.prefixes == []  # 0.3 has no buckets: no prefix


@pytest.mark.parametrize("kind", ["throughput", "concurrent", "constant"])
def test_a_rampup_spreads_the_first_sends_as_guidellm_does(kind):
    rate = {"throughput": None, "concurrent": 4, "constant": 10.0}[kind]
    profile = {**PROFILE, "rate-type": kind, "rate": rate, "max-requests": 40, "rampup": 2.0, "max-concurrency": 8,
               "client": {"version": "0.6.1"}}
    sends = np.array(sorted(r.arrival_time for r in GuidellmWorkload(profile).start()))
    if kind == "throughput":  # the i-th of the first 8 at 2 i / 8 s, the rest at 2 s
        assert sends[:8] == pytest.approx(2.0 * np.arange(1, 9) / 8) and (sends[8:] == 2.0).all()
    elif kind == "concurrent":  # one stream at once, the others over the rampup
        assert sends == pytest.approx([0.0, 0.5, 1.0, 1.5])
    else:  # the rate rises from 0 to 10/s over 2 s (10 requests), then 10/s
        assert sends[0] == 0 and sends[9] == pytest.approx(2.0) and np.diff(sends[10:]) == pytest.approx(0.1)
        assert np.diff(sends[1:10]).min() > 0.1 - 1e-9  # slower than the full rate while ramping
    old = sorted(r.arrival_time for r in GuidellmWorkload({**profile, "client": {"version": "0.3.1"}}).start())
    assert old[:4] == [0.0] * 4  # no rampup before 0.4 (0.3's constant rate opens with its burst)
    with pytest.raises(ConfigError, match="^profile.rampup"):
        GuidellmWorkload({**profile, "rampup": -1})


@pytest.mark.parametrize("kind, rate", [("poisson", 3.0), ("constant", 3.0), ("constant", 0.5)])
def test_guidellm_03_opens_constant_and_poisson_rates_with_its_burst(kind, rate):
    # 0.3's strategies send floor(rate) at the start, then carry on from it (constant: from 1/rate)
    profile = {**PROFILE, "rate-type": kind, "rate": rate, "max-requests": 20, "client": {"version": "0.3.1"}}
    sends = np.array(sorted(r.arrival_time for r in GuidellmWorkload(profile).start()))
    burst = int(rate)
    assert (sends[:burst] == 0.0).all() and (sends[burst:] > 0).all()
    if kind == "constant":
        assert sends[burst:] == pytest.approx(np.arange(1, 21 - burst) / rate)


@pytest.mark.parametrize("version, ramps", [("0.5.2", False), ("0.5.3", True), ("0.7.3", True)])
def test_a_constant_rampup_came_in_0_5_3_and_skips_a_sweeps_constant_rates(version, ramps):
    profile = {**PROFILE, "rate-type": "constant", "rate": 10.0, "max-requests": 40, "rampup": 2.0,
               "client": {"version": version}}
    sends = np.array(sorted(r.arrival_time for r in GuidellmWorkload(profile).start()))
    assert (sends[0] == 0.0) == ramps  # without the rampup the k-th is sent k/rate after the start
    if not ramps:
        assert sends == pytest.approx(np.arange(1, 41) / 10.0)
    sweep = drive(GuidellmWorkload({**PROFILE, "rampup": 2.0, "client": {"version": version}}))
    for phase in (2, 3, 4):  # a sweep's constant benchmarks: one every 1/rate from the first
        t = np.array(sorted(r.arrival_time for _, r in sweep if r.tags["phase"] == phase))
        assert np.diff(t) == pytest.approx(np.full(39, t[1] - t[0]))


def in_flight(done, service=0.5):
    """The most requests in flight at once, from a `drive` run with a fixed service time."""
    events = sorted([(r.arrival_time, 1) for _, r in done] + [(t, -1) for t, _ in done], key=lambda e: (e[0], e[1]))
    return int(max(np.cumsum([d for _, d in events])))


def test_a_list_of_rates_runs_one_benchmark_per_rate_one_after_the_other():
    wl = GuidellmWorkload({**PROFILE, "rate-type": "constant", "rate": "2,8", "max-requests": 20})
    done = drive(wl)
    assert wl.phases == ["constant", "constant"] and len(done) == 40
    first = sorted(r.arrival_time for _, r in done if r.tags["phase"] == 0)
    second = sorted(r.arrival_time for _, r in done if r.tags["phase"] == 1)
    assert np.diff(first) == pytest.approx(np.full(19, 0.5)) and np.diff(second) == pytest.approx(np.full(19, 1 / 8))
    assert first[0] == pytest.approx(1 / 2)  # the k-th request k/rate after the start (0.4 on)
    assert second[0] == pytest.approx(first[-1] + 0.5 + 1 / 8)  # after every request of the first ended


def test_concurrent_streams_send_each_next_request_when_their_last_ends():
    wl = GuidellmWorkload({**PROFILE, "rate-type": "concurrent", "rate": [1, 3], "max-requests": 12})
    done = drive(wl)
    assert len(done) == 24
    for phase, streams in ((0, 1), (1, 3)):
        sent = np.array(sorted(r.arrival_time for _, r in done if r.tags["phase"] == phase))
        assert in_flight([d for d in done if d[1].tags["phase"] == phase]) == streams
        assert np.diff(sent[::streams]) == pytest.approx(np.full(12 // streams - 1, 0.5))  # back to back
    with pytest.raises(ConfigError, match="^profile.rate: concurrent takes whole stream counts"):
        GuidellmWorkload({**PROFILE, "rate-type": "concurrent", "rate": 2.5})


@pytest.mark.parametrize("version, bound", [("0.3.1", None), ("0.6.1", 512), ("0.7.3", 10240), (None, 512)])
def test_guidellm_keeps_its_releases_bound_on_requests_in_flight(version, bound):
    profile = {**PROFILE, "rate-type": "throughput", "rate": None, "max-requests": 700, "client": {"version": version}}
    assert GuidellmWorkload(profile).max_concurrency == bound
    done = drive(guidellm_workload(profile))
    assert len(done) == 700 and in_flight(done) == min(700, bound or 700)
    capped = drive(guidellm_workload({**profile, "max-concurrency": 8}))  # the setting, where recorded
    assert in_flight(capped) == 8 and len(capped) == 700
    if version != "0.3.1":  # from 0.4 a throughput profile's rate is its bound
        assert in_flight(drive(guidellm_workload({**profile, "rate": 16}))) == 16


def test_a_profile_file_without_a_kind_is_run_by_guidellms_generator(tmp_path):
    import yaml

    import fidelity.workloads  # noqa: F401  (registers both load generators' kinds)
    from sim.workload import WorkloadConfig, build_workload

    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump({**PROFILE, "rate-type": "constant", "rate": 4.0}))
    cfg = WorkloadConfig(profile=str(path))
    assert cfg.kind == "guidellm"
    assert len(build_workload(cfg).start()) == 40


@pytest.mark.parametrize("change, field", [({"rate-type": "zigzag"}, "profile.rate-type"),
                                           ({"data": {**PROFILE["data"], "turns": 2}}, "profile.data.turns"),
                                           ({"client": {"version": "newest"}}, "profile.client.version"),
                                           ({"max-requests": 0}, "profile.max-requests"),
                                           ({"rate-type": "constant", "rate": None}, "profile.rate"),
                                           ({"rate-type": "poisson", "rate": "2,x"}, "profile.rate"),
                                           ({"max-concurrency": 0}, "profile.max-concurrency"),
                                           ({"strategy-type": "concurrent"}, "profile.strategy-type"),
                                           ({"rate-type": "constant", "rate": 2, "strategy_type": "poisson"},
                                            "profile.strategy_type: only a sweep"),
                                           ({"data": {"prompt_tokens": 5}}, "profile.data"),
                                           ({"data": {**PROFILE["data"], "prompt_tokens": -5}},
                                            "profile.data.prompt_tokens: must be >= 1"),
                                           ({"data": {**PROFILE["data"], "output_tokens": 0}},
                                            "profile.data.output_tokens: must be >= 1"),
                                           ({"data": {**PROFILE["data"], "prompt_tokens_stdev": -1}},
                                            "profile.data.prompt_tokens_stdev: must be >= 0"),
                                           ({"data": {**PROFILE["data"], "output_tokens_min": 70}},
                                            "profile.data.output_tokens_min: 70 is above output_tokens_max"),
                                           ({"data": {**PROFILE["data"], "prefix_tokens": -1}},
                                            "profile.data.prefix_tokens: must be >= 0")])
def test_bad_profiles_name_the_field(change, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        GuidellmWorkload({**PROFILE, **change})


def test_a_benchmark_sweep_built_for_the_app_follows_its_seed(tmp_path):
    """`sweep_workload` (the app's benchmark sweep) draws with the seed it is given, not always 42."""
    def prompts(seed):
        section = sweep_workload("poisson", "3", 20, 200, 50, folder=tmp_path, seed=seed)
        return [r.num_prompt_tokens for r in GuidellmWorkload(read_profile(section["profile"])).start()]

    assert prompts(7) == prompts(7) and prompts(7) != prompts(8)


def drive_failing(workload, fails, service=0.5):
    """`drive`, with the requests `fails` picks refused at once (a 400: no tokens) and the others
    answered with two tokens `service` after their send."""
    events = [(r.arrival_time, i, r) for i, r in enumerate(workload.start())]
    heapq.heapify(events)
    k = len(events)
    while events:
        t, _, r = heapq.heappop(events)
        if fails(r):
            r.finish_reason = FinishReason.REJECTED
            end = t
        else:
            end = t + service
            r.record_token(0, t + service / 2)
            r.record_token(0, end)
            r.finish_reason = FinishReason.LENGTH
        for q in workload.on_finish(r, end):
            k += 1
            heapq.heappush(events, (q.arrival_time, k, q))


@pytest.mark.parametrize("version", ["0.3.0", "0.6.0"])
def test_a_sweeps_rates_count_only_the_requests_that_succeeded(version):
    """guidellm feeds a sweep the synchronous and throughput benchmarks' successful request rates
    (0.3 `benchmarker.py`: `requests_per_second.successful.mean`; 0.4-0.7 `SweepProfile`:
    `request_throughput.successful.mean`), not every request sent."""
    wl = GuidellmWorkload({**PROFILE, "rate": 4, "max-requests": 10, "client": {"version": version}})
    drive_failing(wl, lambda r: r.tags["phase"] < 2 and int(r.req_id.split("-")[1]) % 5 == 0)
    sync, thr = wl.benchmarks[0], wl.benchmarks[1]
    assert sync.failed == thr.failed == 2
    first = lambda b: min(b.sends)  # noqa: E731  the first successful send (0.3's start)
    spans = [(b.end - (b.start if version >= "0.4" else first(b))) for b in (sync, thr)]
    rates = [8 / s for s in spans]
    assert wl.benchmarks[2].target == pytest.approx(np.linspace(*rates, 3)[1])


def test_a_sweep_whose_first_benchmarks_all_failed_stops_there():
    """guidellm 0.4-0.7 runs no constant benchmark at a rate <= 0 (`SweepProfile.next_strategy`)."""
    wl = GuidellmWorkload({**PROFILE, "rate": 4, "max-requests": 5})
    drive_failing(wl, lambda r: True)
    assert [b.strategy for b in wl.benchmarks] == ["synchronous", "throughput"] and wl.num_requests == 10


@pytest.mark.parametrize("version", ["0.3.0", "0.7.3"])
def test_a_sweep_of_poisson_strategies_sends_poisson_at_the_interpolated_rates(version):
    """guidellm's sweep takes a poisson sub-strategy: 0.2-0.3 `SweepProfile.rate_type`, 0.4-0.6
    `SweepProfile.strategy_type` (both reachable from Python only: their CLIs build a constant
    one), 0.7 `--profile kind=sweep,strategy_type=poisson`."""
    wl = GuidellmWorkload({**PROFILE, "rate": 3, "max-requests": 400, "strategy-type": "poisson",
                           "client": {"version": version}})
    done = drive(wl, service=lambda r: 10.0 if r.tags["phase"] == 1 else 0.05)  # 20 and 40 req/s
    assert [b.strategy for b in wl.benchmarks] == ["synchronous", "throughput", "poisson"]
    rate = np.linspace(*wl.measured_rates[:2], 2)[1]
    sends = np.sort([r.arrival_time for _, r in done if r.tags["phase"] == 2])
    burst = int(rate) if version < "0.4" else 0  # 0.3's poisson opens with its initial burst too
    gaps = np.diff(sends[burst:])
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.15) and gaps.std() == pytest.approx(1 / rate, rel=0.2)

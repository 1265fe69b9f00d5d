"""guidellm's sweep profile as a Workload: benchmark order, adaptive rates, lengths, shared prefix."""
from __future__ import annotations

import heapq

import numpy as np
import pytest

from policies import ConfigError, FinishReason
from fidelity.sources.guidellm import GuidellmWorkload

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


@pytest.mark.parametrize("change, field", [({"rate-type": "zigzag"}, "profile.rate-type"),
                                           ({"data": {**PROFILE["data"], "turns": 2}}, "profile.data.turns"),
                                           ({"client": {"version": "newest"}}, "profile.client.version"),
                                           ({"max-requests": 0}, "profile.max-requests"),
                                           ({"rate-type": "constant", "rate": None}, "profile.rate"),
                                           ({"data": {"prompt_tokens": 5}}, "profile.data")])
def test_bad_profiles_name_the_field(change, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        GuidellmWorkload({**PROFILE, **change})

"""inference-perf's shared_prefix profile as a Workload: counts, rates, lengths, turns and stages."""
from __future__ import annotations

import copy
import heapq
import json

import numpy as np
import pytest
from fidelity_helpers import ISSUE_PROFILE

from policies import ConfigError, FinishReason
from fidelity.sources.inference_perf import SharedPrefixWorkload
from fidelity.sources.inference_perf_profile import LengthDistribution, SharedPrefixProfile
from sim.workload import WorkloadConfig, build_workload


def profile(**changes):
    p = copy.deepcopy(ISSUE_PROFILE)
    for key, value in changes.items():
        node = p
        *path, last = key.split("__")
        for k in path:
            node = node[k]
        node[last] = value
    return p


def drive(workload, service_time=2.0, reject=lambda r: False):
    """A fake server: every request takes `service_time` s from arrival; returns [(finish time, request)]."""
    events = [(r.arrival_time + service_time, i, r) for i, r in enumerate(workload.start())]
    heapq.heapify(events)
    done, k = [], len(events)
    while events:
        t, _, r = heapq.heappop(events)
        r.output_token_ids = [0] * r.max_tokens
        r.finish_reason = FinishReason.REJECTED if reject(r) else FinishReason.LENGTH
        done.append((t, r))
        for q in workload.on_finish(r, t):
            assert q.arrival_time >= t - 1e-9 or q.tags["turn"] == 0
            k += 1
            heapq.heappush(events, (q.arrival_time + service_time, k, q))
    return done


def test_the_issue_example_sends_every_stage_request_in_stage_order():
    wl = SharedPrefixWorkload(ISSUE_PROFILE, seed=1)
    done = drive(wl)
    stages = [r.tags["stage"] for _, r in done]
    assert len(done) == 4 * 300 + 9 * 300 == wl.profile.num_requests
    assert stages.count(0) == 1200 and stages.count(1) == 2700
    end0 = max(t for t, r in done if r.tags["stage"] == 0)
    start1 = min(r.arrival_time for _, r in done if r.tags["stage"] == 1)
    assert start1 >= end0 + 1.0  # the next stage waits for the last request plus load.interval (1 s)


# (first turn's prompt, what each next turn adds) for system prompt 120, question 500, answer 200
RELEASES = {"0.2.0": (620, None), "0.4.0": (620, None), "v0.5.0": (500, 200 + 500), "0.6.1": (620, 200 + 620)}


def by_session(done):
    out = {}
    for _, r in sorted(done, key=lambda x: x[1].arrival_time):
        out.setdefault((r.tags["group"], r.tags["user"]), []).append(r)
    return out


@pytest.mark.parametrize("version", list(RELEASES))
def test_each_release_sends_what_its_source_sends(version):
    p = profile(load__stages=[{"rate": 4, "duration": 30}])
    p["client"] = {"version": version}
    wl = SharedPrefixWorkload(p, seed=2)
    first_len, growth = RELEASES[version]
    done = drive(wl)
    assert len(done) == 120
    for turns in by_session(done).values():
        assert turns[0].num_prompt_tokens == first_len
        for prev, cur in zip(turns, turns[1:]):
            if growth is None:  # before 0.5: no shared session, every request its system prompt + question
                assert cur.num_prompt_tokens == first_len
                continue
            assert cur.num_prompt_tokens == prev.num_prompt_tokens + growth
            # the previous turn (prompt + answer) is a prefix of this one: the prefix cache can hit
            n = prev.num_prompt_tokens
            assert list(cur.prompt_token_ids[:n]) == list(prev.prompt_token_ids[:n])
            assert list(cur.prompt_token_ids[n:n + 200]) == [0] * 200
            assert cur.arrival_time >= prev.arrival_time + 2.0 - 1e-9  # waits for its previous turn


@pytest.mark.parametrize("version", ["0.5.0", "0.6.0"])
def test_sessions_restart_each_stage_from_05(version):
    p = profile(load__stages=[{"rate": 4, "duration": 12}, {"rate": 4, "duration": 12}])
    p["client"] = {"version": version}
    done = drive(SharedPrefixWorkload(p, seed=3))
    first_of_stage1 = [r for _, r in done if r.tags["stage"] == 1 and r.req_id in {f"s1-{i}" for i in range(24)}]
    assert len(first_of_stage1) == 24
    assert {r.num_prompt_tokens for r in first_of_stage1} == {500 if version == "0.5.0" else 620}
    assert max(r.num_prompt_tokens for _, r in done if r.tags["stage"] == 0) > 620  # stage 0's had grown


def test_an_unknown_release_is_said_and_a_bad_one_names_the_field():
    from fidelity.sources.inference_perf_profile import behaviour_for

    behaviour, why = behaviour_for(None)
    assert behaviour == "chat-0.6" and "assumed" in why
    assert behaviour_for("0.7.0.dev3")[0] == "chat-0.6" and behaviour_for("v0.3.0")[0] == "chat-0.3"
    bad = profile()
    bad["client"] = {"version": "latest"}
    with pytest.raises(ConfigError, match="^profile.client.version"):
        SharedPrefixProfile.from_dict(bad)
    bad["client"] = {"behaviour": "chat-9"}
    with pytest.raises(ConfigError, match="^profile.client.behaviour"):
        SharedPrefixProfile.from_dict(bad)


def test_prompt_scale_scales_system_prompt_and_question():
    p = profile(data__shared_prefix__enable_multi_turn_chat=False)
    p["client"] = {"prompt_scale": 0.5}
    assert {r.num_prompt_tokens for r in SharedPrefixWorkload(p).start()} == {310}


def test_single_turn_prompts_share_their_groups_system_prompt():
    wl = SharedPrefixWorkload(profile(data__shared_prefix__enable_multi_turn_chat=False), seed=3)
    reqs = wl.start()
    assert len(reqs) == 1200  # no follow-ups needed before stage 1: all of stage 0 is known up front
    by_group = {}
    for r in reqs:
        assert r.num_prompt_tokens == 620
        by_group.setdefault(r.tags["group"], set()).add(tuple(r.prompt_token_ids[:120]))
    assert len(by_group) == 8 and all(len(s) == 1 for s in by_group.values())
    assert len({next(iter(s)) for s in by_group.values()}) == 8  # groups differ


def test_constant_stage_is_poisson_conditioned_on_count_and_duration():
    p = profile(data__shared_prefix__enable_multi_turn_chat=False, load__stages=[{"rate": 50, "duration": 200}])
    t = np.sort([r.arrival_time for r in SharedPrefixWorkload(p, seed=4).start()])
    assert len(t) == 10000 and t[-1] == pytest.approx(200.0)  # gaps rescaled to sum to the duration
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.mean() == pytest.approx(1 / 50, rel=1e-6)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps: CV 1
    counts = np.histogram(t, bins=200, range=(0, 200))[0]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.25)  # Poisson counts per second


def test_poisson_load_counts_per_second():
    p = profile(data__shared_prefix__enable_multi_turn_chat=False, load__type="poisson",
                load__stages=[{"rate": 20, "duration": 300}])
    t = np.array([r.arrival_time for r in SharedPrefixWorkload(p, seed=5).start()])
    assert len(t) == 6000
    counts = np.histogram(t, bins=int(np.ceil(t.max())), range=(0, np.ceil(t.max())))[0]
    assert counts.mean() == pytest.approx(20, rel=0.05)
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.25)


def test_length_distributions_follow_inference_perf():
    dist = {"mean": 500, "std_dev": 100, "min": 350, "max": 900}
    p = profile(data__shared_prefix__enable_multi_turn_chat=False, data__shared_prefix__num_users_per_system_prompt=500,
                data__shared_prefix__question_len=dist, data__shared_prefix__output_len={**dist, "type": "uniform"})
    wl = SharedPrefixWorkload(p, seed=6)
    q = np.array([x[2] for x in wl.prompts])
    o = np.array([x[3] for x in wl.prompts])
    assert len(q) == 4000 and q.min() >= 350 and q.max() <= 900
    # a normal clipped at 350 (1.5 sd below): mean shifts up by sd * (phi(1.5) - 1.5 * Phi(-1.5)) ~ 2.9
    assert q.mean() == pytest.approx(502.9, abs=4.0)
    assert (q == 350).mean() == pytest.approx(0.0668, abs=0.015)  # P(Z < -1.5): clipped to min
    assert o.min() >= 350 and o.max() <= 900 and o.mean() == pytest.approx(625, abs=8)


def test_concurrent_stage_never_exceeds_its_concurrency():
    p = profile(data__shared_prefix__enable_multi_turn_chat=False, load__type="concurrent",
                load__stages=[{"num_requests": 60, "concurrency_level": 4}])
    done = drive(SharedPrefixWorkload(p, seed=7), service_time=1.0)
    assert len(done) == 60
    events = sorted([(r.arrival_time, 1) for _, r in done] + [(t, -1) for t, _ in done], key=lambda e: (e[0], e[1]))
    level = np.cumsum([d for _, d in events])
    assert level.max() == 4


def test_a_rejected_turn_leaves_the_context_unchanged():
    wl = SharedPrefixWorkload(profile(load__stages=[{"rate": 1, "duration": 72}]), seed=8)
    done = drive(wl, reject=lambda r: r.tags["turn"] == 0)
    second = [r for _, r in done if r.tags["turn"] == 1]
    assert second and all(r.num_prompt_tokens == 120 + 500 for r in second)  # the first turn's again


@pytest.mark.parametrize("change, field", [
    ({"data__type": "random"}, "profile.data.type"),
    ({"load__type": "sweep"}, "profile.load.type"),
    ({"load__stages": []}, "profile.load.stages"),
    ({"load__stages": [{"rate": -1, "duration": 10}]}, r"profile.load.stages\[0\].rate"),
    ({"data__shared_prefix__question_len": {"mean": 10, "type": "zipf"}}, "profile.data.shared_prefix.question_len.type"),
    # a lognormal of mean 0 has no shape (inference-perf refuses it), not a ZeroDivisionError when sampled
    ({"data__shared_prefix__question_len": {"mean": 0, "std_dev": 10, "type": "lognormal"}},
     "profile.data.shared_prefix.question_len.mean"),
])
def test_bad_profiles_name_the_field(change, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        SharedPrefixProfile.from_dict(profile(**change))


@pytest.mark.parametrize("written, read", [("false", False), ("No", False), ("true", True), (None, True)])
def test_ignore_eos_written_as_a_string_is_read_as_written(written, read):
    # results/config.yaml with `ignore_eos: "false"`: bool("false") is True (null: inference-perf's default)
    assert SharedPrefixProfile.from_dict(profile(server__ignore_eos=written)).ignore_eos is read
    sp = SharedPrefixProfile.from_dict(profile(data__shared_prefix__enable_multi_turn_chat="false"))
    assert not sp.enable_multi_turn_chat and sp.behaviour == "single-turn"


def test_a_true_false_key_of_another_value_names_the_field():
    with pytest.raises(ConfigError, match=r"^profile.server.ignore_eos: expected true or false, got 'sometimes'$"):
        SharedPrefixProfile.from_dict(profile(server__ignore_eos="sometimes"))


def test_a_client_version_read_as_a_number_is_refused_not_read_as_another_release():
    # `version: 0.10` unquoted is the number 0.1: inference-perf 0.1 would be read as single-turn
    with pytest.raises(ConfigError, match=r"^profile.client.version: 0.1 was read as a number.*quote it"):
        SharedPrefixProfile.from_dict({**profile(), "client": {"version": 0.1}})


def test_legacy_distribution_overrides_a_fixed_length_and_clashes_with_an_inline_one():
    # inference-perf's _resolve_distribution / validate_no_ambiguous_distributions
    legacy = {"mean": 300, "std_dev": 0, "min": 300, "max": 300}
    sp = SharedPrefixProfile.from_dict(profile(data__shared_prefix__question_len=40,
                                               data__shared_prefix__question_distribution=legacy))
    assert sp.question_len.mean == 300
    with pytest.raises(ConfigError, match=r"^profile.data.shared_prefix: both output_len .* keep one$"):
        SharedPrefixProfile.from_dict(profile(data__shared_prefix__output_len={"mean": 20, "std_dev": 1},
                                              data__shared_prefix__output_distribution=legacy))


def test_fixed_length_is_exact():
    d = LengthDistribution.parse("x", 77)
    assert (d.sample(np.random.default_rng(0), 5) == 77).all()


# --- kind = "inference_perf": the load generator's own semantics, through sim.workload ------------
def make_workload(max_model_len=4096, **overrides):
    return build_workload(WorkloadConfig(**overrides), max_model_len)


def write_profile(tmp_path, multi_turn=True, stages=({"rate": 2, "duration": 3},)):
    profile = {"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 2, "num_users_per_system_prompt": 2, "system_prompt_len": 32,
        "question_len": 64, "output_len": 8, "enable_multi_turn_chat": multi_turn}},
        "load": {"type": "constant", "stages": list(stages)}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    return path


def test_inference_perf_kind_runs_the_generator_with_its_sessions(tmp_path):
    from policies import FinishReason

    wl = make_workload(profile=str(write_profile(tmp_path)), seed=3)  # kind defaults to inference_perf
    first = wl.start()
    assert len(first) == 4  # 6 sends over 4 sessions: sends 4 and 5 wait for sessions 0 and 1
    done = first[0]
    done.output_token_ids = [0] * done.max_tokens
    done.finish_reason = FinishReason.LENGTH
    follow = wl.on_finish(done, 10.0)
    assert [r.req_id for r in follow] == ["s0-4"] and follow[0].arrival_time == 10.0
    # the next turn is sent on the session's context: previous prompt + answer, then (0.6, the
    # behaviour assumed when no release is recorded) system prompt + question
    assert done.num_prompt_tokens == 32 + 64
    assert follow[0].num_prompt_tokens == done.num_prompt_tokens + 8 + 32 + 64


def test_a_next_turn_is_built_from_what_was_sent_not_from_the_requests_ids(tmp_path):
    """The engine folds a request's synthetic ids into its vocabulary (a plain list of ints): the
    next turn of its session used to read the segments back from the request, and `servesim run`
    of a multi-turn profile died at the first finish (AttributeError: 'list' ... 'segments')."""
    wl = make_workload(profile=str(write_profile(tmp_path)), seed=3)
    done = wl.start()[0]
    sent = done.prompt_token_ids
    done.prompt_token_ids = [int(t) % 2048 for t in sent]  # as the engine leaves it
    done.output_token_ids = [0] * done.max_tokens
    done.finish_reason = FinishReason.LENGTH
    (follow,) = wl.on_finish(done, 10.0)
    assert follow.prompt_token_ids.segments[:len(sent.segments)] == sent.segments
    assert follow.num_prompt_tokens == done.num_prompt_tokens + 8 + 32 + 64


def test_inference_perf_kind_checks_its_profile(tmp_path):
    with pytest.raises(ConfigError, match="^workload.profile"):
        WorkloadConfig(kind="inference_perf")
    with pytest.raises(ConfigError, match="^workload.profile"):
        WorkloadConfig(kind="poisson", profile=str(write_profile(tmp_path)))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": {"type": "shared_prefix", "shared_prefix": {}},
                               "load": {"type": "sometimes", "stages": [{"rate": 1, "duration": 1}]}}))
    with pytest.raises(ConfigError, match="^profile.load.type"):
        WorkloadConfig(profile=str(bad))

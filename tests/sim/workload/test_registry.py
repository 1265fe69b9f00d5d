"""Registered workload kinds and trace formats: sim runs another package's generator and reader by name."""
from __future__ import annotations

import json

import pytest

from policies import ConfigError, Request
from sim.workload import WorkloadConfig, build_workload, registry
from sim.workload.config import workload_kinds
from sim.workload.traces import csv_rows, detect_format, parse_int, read_trace


class FixedWorkload:
    """A toy generator: `n` requests at t = 0, as many as its profile says."""

    def __init__(self, profile: dict, seed: int) -> None:
        self.n, self.seed = profile["n"], seed

    def start(self) -> list[Request]:
        return [Request(i, 0.0, 10, 5) for i in range(self.n)]

    def on_finish(self, request, now):
        return []


def check_toy(profile: dict) -> None:
    if not isinstance(profile.get("n"), int):
        raise ConfigError(f"profile.n: expected an integer, got {profile.get('n')!r}")


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """Only the toy kind and the toy format registered (whatever else the session imported)."""
    monkeypatch.setattr(registry, "KINDS", {})
    monkeypatch.setattr(registry, "TRACE_FORMATS", {})
    registry.register_kind(registry.ProfileKind("toy", check_toy, FixedWorkload, needs="a toy profile"))

    def read(path, field):
        p, o = [], []
        for row, where in csv_rows(path, field, ("in", "out")):
            p.append(parse_int(row["in"], "in", where, 1))
            o.append(parse_int(row["out"], "out", where, 1))
        return [0.0] * len(p), p, o, None, None

    registry.register_trace_format(registry.TraceFormat("toylens", read, lambda cols: "in" in cols, header="in,out",
                                                        has_arrivals=False))
    profile = tmp_path / "toy.json"
    profile.write_text(json.dumps({"n": 3}))
    return profile


def test_a_registered_kind_is_the_default_with_a_profile_and_builds_its_generator(toy):
    cfg = WorkloadConfig(profile=str(toy), seed=7)
    assert cfg.kind == "toy" and workload_kinds()[-1] == "toy"
    wl = build_workload(cfg)
    assert isinstance(wl, FixedWorkload) and wl.seed == 7 and len(wl.start()) == 3


def test_a_registered_kind_checks_its_profile_and_names_the_field(toy, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"n": "three"}))
    with pytest.raises(ConfigError, match=r"^profile\.n: expected an integer"):
        WorkloadConfig(profile=str(bad))
    with pytest.raises(ConfigError, match=r"^workload\.profile: no such file .*kind = 'toy' needs a toy profile"):
        WorkloadConfig(kind="toy")
    with pytest.raises(ConfigError, match=r"^workload\.profile: only used with kind = 'toy', not 'poisson'"):
        WorkloadConfig(kind="poisson", profile=str(toy))
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"^workload\.profile: .*: expected a mapping at the top level, got list"):
        WorkloadConfig(profile=str(bad))
    bad.write_text("")
    with pytest.raises(ConfigError, match=r"^workload\.profile: .* must hold a mapping"):
        WorkloadConfig(profile=str(bad))
    bad.write_text("n: [3\n")  # bad YAML: one line naming the file and where, not yaml's traceback
    with pytest.raises(ConfigError, match=rf"^workload\.profile: {bad}: not valid YAML at line 2, column 1"):
        WorkloadConfig(kind="toy", profile=str(bad))


def test_a_profile_without_a_kind_goes_to_the_kind_that_takes_it(toy, tmp_path):
    def check_pair(profile: dict) -> None:
        if not isinstance(profile.get("pair"), list):
            raise ConfigError("profile.pair: expected a list")

    registry.register_kind(registry.ProfileKind("pair", check_pair, FixedWorkload, needs="a pair profile"))
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps({"pair": [1, 2], "n": 2}))
    assert WorkloadConfig(profile=str(pair)).kind == "toy"  # both take it: the first registered
    pair.write_text(json.dumps({"pair": [1, 2]}))
    assert WorkloadConfig(profile=str(pair)).kind == "pair"
    assert WorkloadConfig(profile=str(toy)).kind == "toy"
    pair.write_text(json.dumps({"pair": "two"}))  # a value of pair's own key refused: pair's field error
    with pytest.raises(ConfigError, match=r"^profile\.pair: expected a list"):
        WorkloadConfig(profile=str(pair))
    pair.write_text(json.dumps({"other": 1}))  # nobody's: each kind's error
    with pytest.raises(ConfigError, match=r"^workload\.profile: .* none of the registered kinds \(kind = 'toy': "
                                          r"profile\.n: expected an integer.*kind = 'pair': profile\.pair"):
        WorkloadConfig(profile=str(pair))


def test_without_registrations_only_sims_own_kinds_and_formats(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "KINDS", {})
    monkeypatch.setattr(registry, "TRACE_FORMATS", {})
    with pytest.raises(ConfigError, match=r"^workload\.kind: 'toy' is not allowed; choose one of poisson, gamma, "
                                          r"constant, staged, closed_loop, trace \(the servesim commands register"):
        WorkloadConfig(kind="toy")
    with pytest.raises(ConfigError, match=r"^workload\.trace_format: 'toylens' is not allowed; choose one of auto, "
                                          r"csv, azure, mooncake$"):
        WorkloadConfig(trace_format="toylens")
    lens = tmp_path / "lens.csv"
    lens.write_text("in,out\n5,6\n")
    with pytest.raises(ConfigError, match=r"cannot tell the format .*\(azure\) or JSON lines \(mooncake\)"):
        detect_format(lens)


def test_a_registered_format_is_detected_read_and_gives_lengths_only(toy, tmp_path):
    lens = tmp_path / "lens.csv"
    lens.write_text("in,out\n5,6\n7,8\n")
    assert detect_format(lens) == "toylens"
    tr = read_trace(lens)
    assert tr.format == "toylens" and tr.prompt_tokens.tolist() == [5, 7] and tr.output_tokens.tolist() == [6, 8]
    reqs = build_workload(WorkloadConfig(kind="constant", rate=1.0, num_requests=3, trace=str(lens))).start()
    assert [(r.num_prompt_tokens, r.max_tokens) for r in reqs] == [(5, 6), (7, 8), (5, 6)]
    with pytest.raises(ConfigError, match=r"^workload\.kind: .*without arrival times"):
        build_workload(WorkloadConfig(trace=str(lens)))
    bad = tmp_path / "bad.csv"
    bad.write_text("in,out\n5,x\n")
    with pytest.raises(ConfigError, match=r"^workload\.trace: .*bad\.csv:2: out must be an integer"):
        read_trace(bad)
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match=r"\(azure\), in,out \(toylens\) or JSON lines \(mooncake\)"):
        detect_format(unknown)


def test_an_unregistered_kind_names_the_allowed_ones_and_how_sources_register(tmp_path):
    with pytest.raises(ConfigError, match=r"^workload\.kind: 'nope' is not allowed; choose one of poisson, .*"
                                          r"from Python, import fidelity\.workloads first\)$"):
        WorkloadConfig(kind="nope")
    unknown = tmp_path / "lengths.csv"
    unknown.write_text("first,second\n10,5\n")
    with pytest.raises(ConfigError, match=r"set workload\.trace_format \(the servesim commands register .*"
                                          r"import fidelity\.workloads first\)$"):
        detect_format(unknown)

"""inference-perf's `shared_prefix` profile as its releases read it: lengths, load stages, and what a
multi-turn session sends in each release (`behaviour_for`); checked field by field, each error
naming its field (`ConfigError`). The workload it drives is `fidelity.sources.inference_perf`.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import log, sqrt

import numpy as np

from fidelity.runs import recorded_bool, version_text
from policies import ConfigError


CHAT_BEHAVIOURS = {
    "single-turn": "every request is its group's system prompt + its question (no sessions)",
    "chat-0.3": "each request a copy of its session: system prompt + question, no turn waits (0.3-0.4)",
    "chat-0.5": "shared sessions from empty: a turn sends context + question, after the previous turn",
    "chat-0.6": "shared sessions from empty: a turn sends context + system prompt + question, after the previous",
}
# first release of each behaviour (inference-perf's tags; main between tags behaves as the next one)
CHAT_RELEASES = (((0, 3), "chat-0.3"), ((0, 5), "chat-0.5"), ((0, 6), "chat-0.6"))
LATEST_READ = "0.6"  # the newest release whose source was read (main to 2026-08 behaves as it)


def parse_version(version) -> tuple[int, ...] | None:
    """(major, minor, ...) of a release spelled "v0.4.0", "0.6.1", "0.7.0.dev1"; None if unreadable."""
    parts = []
    for piece in str(version).strip().lstrip("vV").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if len(parts) >= 2 else None


def _length_or_legacy(field: str, sp: dict, what: str):
    """`{what}_len`, or the legacy `{what}_distribution` where `{what}_len` is a plain number.

    inference-perf lets the legacy distribution override a fixed length and refuses both where the
    length is itself a distribution (its `validate_no_ambiguous_distributions`); so do we.
    """
    inline, legacy = sp.get(f"{what}_len", 50), sp.get(f"{what}_distribution")
    if isinstance(inline, dict) and legacy is not None:
        raise ConfigError(f"{field}: both {what}_len (a distribution) and the legacy {what}_distribution are "
                          f"set; inference-perf refuses that: keep one")
    return inline if legacy is None else legacy


def behaviour_for(version, multi_turn: bool = True) -> tuple[str, str]:
    """(behaviour, why) of a shared_prefix profile sent by inference-perf `version` (None: unknown).

    - Multi-turn chat (`enable_multi_turn_chat`): prompt i belongs to user session i; what a turn sends
      changed between releases (`CHAT_BEHAVIOURS`, chosen by `behaviour_for(version)`). Before 0.3 the
      flag did not exist: every request is system prompt + question. In 0.3-0.4 each request carried
      its own copy of its session (the maintainers' diagnosis in #443: the session objects were copied,
      so neither its lock nor its context was shared): every turn is the system prompt + question, sent
      at its time. From 0.5 a per-process session registry is shared, but its sessions start empty (the
      generator's, seeded with the system prompt, are never registered): a turn sends the session's
      context + the prompt (0.5: the question alone, no system prompt; 0.6 on: system prompt +
      question), waits for the session's previous turn, and the context becomes the turn's prompt +
      its answer; a failed (rejected) turn leaves it unchanged; sessions restart every stage.
    """
    if not multi_turn:
        return "single-turn", "enable_multi_turn_chat is off"
    if version is None:
        return CHAT_RELEASES[-1][1], f"no client version recorded: assumed inference-perf >= {LATEST_READ} (the newest read)"
    v = parse_version(version)
    if v is None:
        raise ConfigError(f"profile.client.version: {version!r} is not a release number (e.g. 0.6.1)")
    chosen = "single-turn"
    for first, name in CHAT_RELEASES:
        if v[:2] >= first:
            chosen = name
    why = f"inference-perf {version}"
    return chosen, why + (": before 0.3 enable_multi_turn_chat did not exist" if chosen == "single-turn" else "")


DIST_TYPES = ("normal", "fixed", "uniform", "lognormal", "poisson", "skew_normal")
LOAD_TYPES = ("constant", "poisson", "concurrent")


def _num(field: str, value, minimum: float = 0.0, integer: bool = False, strict: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{field}: expected a number, got {value!r}")
    if integer and int(value) != value:
        raise ConfigError(f"{field}: expected an integer, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise ConfigError(f"{field}: must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return int(value) if integer else float(value)


def _flag(field: str, section: dict, default: bool) -> bool:
    """A true/false key of a profile section (`recorded_bool`); absent or null: `default`."""
    value = section.get(field.rsplit(".", 1)[-1])
    return default if value is None else recorded_bool(field, value)


@dataclass(frozen=True)
class LengthDistribution:
    """inference-perf's Distribution: a token count drawn, clipped to [min, max] and rounded."""

    mean: float
    std_dev: float = 0.0
    min: int = 1
    max: int = 1
    type: str = "normal"
    skew: float = 0.0

    @classmethod
    def parse(cls, field: str, value) -> "LengthDistribution":
        """An int (a fixed length) or a mapping with inference-perf's Distribution fields."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            n = _num(field, value, 0, integer=True)
            return cls(mean=n, std_dev=0.0, min=n, max=n)
        if not isinstance(value, dict):
            raise ConfigError(f"{field}: expected an integer or a distribution mapping, got {value!r}")
        unknown = set(value) - {"mean", "std_dev", "variance", "min", "max", "type", "skew", "total_count"}
        if unknown:
            raise ConfigError(f"{field}: unknown keys {sorted(unknown)}; allowed mean, std_dev, variance, min, max, type, skew")
        kind = str(value.get("type", "normal"))
        if kind not in DIST_TYPES:
            raise ConfigError(f"{field}.type: {kind!r} is not allowed; choose one of {', '.join(DIST_TYPES)}")
        std = _num(f"{field}.std_dev", value.get("std_dev", 200.0))
        if value.get("variance") is not None:
            std = sqrt(_num(f"{field}.variance", value["variance"]))
        lo = _num(f"{field}.min", value.get("min", 10), 0, integer=True)
        hi = _num(f"{field}.max", value.get("max", 1024), 0, integer=True)
        if lo > hi:
            raise ConfigError(f"{field}.min: {lo} is greater than max {hi}")
        # a lognormal is moment-matched to its mean, so it needs one > 0 (inference-perf refuses 0 too)
        mean = _num(f"{field}.mean", value.get("mean", 512), strict=kind == "lognormal")
        return cls(mean=mean, std_dev=std, min=lo, max=hi, type=kind,
                   skew=float(value.get("skew", 0.0)))

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` integer lengths, drawn as inference-perf's `sample_from_distribution` draws them."""
        if self.type == "fixed":
            return np.full(count, int(self.mean), dtype=int)
        if self.type == "normal":
            x = rng.normal(self.mean, self.std_dev, count)
        elif self.type == "skew_normal":
            delta = self.skew / sqrt(1.0 + self.skew ** 2)
            u0, v = rng.standard_normal(count), rng.standard_normal(count)
            u1 = delta * u0 + sqrt(1.0 - delta ** 2) * v
            x = self.mean + self.std_dev * np.where(u0 >= 0, u1, -u1)
        elif self.type == "lognormal":
            if self.std_dev <= 0:
                x = np.full(count, self.mean, dtype=float)
            else:
                s2 = log(1.0 + (self.std_dev / self.mean) ** 2)
                x = rng.lognormal(log(self.mean) - s2 / 2.0, sqrt(s2), count)
        elif self.type == "uniform":
            x = rng.uniform(self.min, self.max + 1, count)
        else:  # poisson
            x = rng.poisson(self.mean if self.mean > 0 else 1.0, count).astype(float)
        return np.clip(np.round(np.clip(x, self.min, self.max)).astype(int), self.min, self.max)


@dataclass(frozen=True)
class LoadStage:
    """One stage: `rate` req/s for `duration` s, or (concurrent) `num_requests` at `concurrency_level`."""

    rate: float | None = None
    duration: float | None = None
    num_requests: int | None = None
    concurrency_level: int | None = None

    @property
    def num_sends(self) -> int:
        return int(self.num_requests) if self.num_requests is not None else int(self.rate * self.duration)


@dataclass(frozen=True)
class SharedPrefixProfile:
    """An inference-perf profile with `data.type: shared_prefix`, parsed and validated.

    - Lengths: one system-prompt length per group, then per group the question and output lengths of
      its `num_users_per_system_prompt` prompts; an int is a fixed length, a mapping is a Distribution
      (normal by default, also fixed / uniform / lognormal / poisson / skew_normal), clipped to [min, max]
      and rounded. The prompts are shuffled once. A prompt is the group's system prompt + its question.
    """

    num_groups: int
    num_prompts_per_group: int
    system_prompt_len: LengthDistribution
    question_len: LengthDistribution
    output_len: LengthDistribution
    enable_multi_turn_chat: bool
    load_type: str
    stages: tuple[LoadStage, ...]
    interval: float = 1.0
    ignore_eos: bool = True
    seed: int | None = None
    client_version: str | None = None  # the inference-perf release that sent it, if recorded
    behaviour: str = "chat-0.6"  # CHAT_BEHAVIOURS (single-turn when enable_multi_turn_chat is off)
    prompt_scale: float = 1.0  # sampled system-prompt and question lengths times this

    @property
    def multi_turn(self) -> bool:
        """Sessions whose turns wait for each other and carry a context (0.5 on)."""
        return self.enable_multi_turn_chat and self.behaviour in ("chat-0.5", "chat-0.6")

    @classmethod
    def from_dict(cls, profile: dict) -> "SharedPrefixProfile":
        data = profile.get("data")
        if not isinstance(data, dict):
            raise ConfigError("profile.data: missing; expected a mapping with type: shared_prefix")
        if data.get("type") != "shared_prefix":
            raise ConfigError(f"profile.data.type: {data.get('type')!r} is not allowed; choose shared_prefix")
        sp = data.get("shared_prefix")
        if not isinstance(sp, dict):
            raise ConfigError("profile.data.shared_prefix: missing; expected a mapping")
        f = "profile.data.shared_prefix"
        groups = _num(f"{f}.num_unique_system_prompts",
                      sp.get("num_unique_system_prompts", sp.get("num_groups", 10)), 1, integer=True)
        users = _num(f"{f}.num_users_per_system_prompt",
                     sp.get("num_users_per_system_prompt", sp.get("num_prompts_per_group", 10)), 1, integer=True)
        question = _length_or_legacy(f, sp, "question")
        output = _length_or_legacy(f, sp, "output")
        load = profile.get("load")
        if not isinstance(load, dict):
            raise ConfigError("profile.load: missing; expected a mapping with type and stages")
        load_type = str(load.get("type", "constant"))
        if load_type not in LOAD_TYPES:
            raise ConfigError(f"profile.load.type: {load_type!r} is not allowed; choose one of {', '.join(LOAD_TYPES)}")
        raw_stages = load.get("stages")
        if not isinstance(raw_stages, list) or not raw_stages:
            raise ConfigError("profile.load.stages: expected a non-empty list of stages")
        stages = []
        for i, st in enumerate(raw_stages):
            g = f"profile.load.stages[{i}]"
            if not isinstance(st, dict):
                raise ConfigError(f"{g}: expected a mapping, got {st!r}")
            if load_type == "concurrent":
                stages.append(LoadStage(num_requests=_num(f"{g}.num_requests", st.get("num_requests"), 1, integer=True),
                                        concurrency_level=_num(f"{g}.concurrency_level", st.get("concurrency_level"),
                                                               1, integer=True)))
            else:
                stages.append(LoadStage(rate=_num(f"{g}.rate", st.get("rate"), 0, strict=True),
                                        duration=_num(f"{g}.duration", st.get("duration"), 0, strict=True)))
        server = profile.get("server") or {}
        seed = sp.get("seed")
        client = profile.get("client") or {}
        if not isinstance(client, dict):
            raise ConfigError(f"profile.client: expected a mapping (version, behaviour, prompt_scale), got {client!r}")
        unknown = set(client) - {"name", "version", "behaviour", "prompt_scale"}
        if unknown:
            raise ConfigError(f"profile.client: unknown keys {sorted(unknown)}; allowed name, version, behaviour, prompt_scale")
        multi = _flag(f"{f}.enable_multi_turn_chat", sp, False)
        version = None if client.get("version") is None else version_text("profile.client.version", client["version"])
        behaviour, _ = behaviour_for(version, multi)
        if client.get("behaviour") is not None:
            behaviour = str(client["behaviour"])
            if behaviour not in CHAT_BEHAVIOURS:
                raise ConfigError(f"profile.client.behaviour: {behaviour!r} is not allowed; choose one of "
                                  f"{', '.join(CHAT_BEHAVIOURS)}")
        scale = _num("profile.client.prompt_scale", client.get("prompt_scale", 1.0), 0, strict=True)
        return cls(
            num_groups=groups, num_prompts_per_group=users,
            system_prompt_len=LengthDistribution.parse(f"{f}.system_prompt_len", sp.get("system_prompt_len", 100)),
            question_len=LengthDistribution.parse(f"{f}.question_len", question),
            output_len=LengthDistribution.parse(f"{f}.output_len", output),
            enable_multi_turn_chat=multi,
            load_type=load_type, stages=tuple(stages),
            interval=_num("profile.load.interval", load.get("interval", 1.0), 0),
            ignore_eos=_flag("profile.server.ignore_eos", server, True) if isinstance(server, dict) else True,
            seed=None if seed is None else _num(f"{f}.seed", seed, 0, integer=True),
            client_version=version, behaviour=behaviour, prompt_scale=scale,
        )

    @property
    def num_requests(self) -> int:
        """Requests the whole profile sends (over every stage)."""
        return sum(s.num_sends for s in self.stages)

"""inference-perf's `shared_prefix` workload, as a servesim Workload (`start()`, `on_finish()`).

Semantics read from inference-perf's source history (`datagen/shared_prefix_datagen.py`,
`apis/user_session.py`, `loadgen/load_timer.py`, `loadgen/load_generator.py`, releases 0.1-0.6 and
main to 2026-08; docs/results/2026-12-02-client-workloads.md):

- Lengths, load stages (run one after another, each restarting at prompt 0) and multi-turn
  sessions per release: on `SharedPrefixProfile`, `SharedPrefixWorkload` and `behaviour_for`.
- `server.ignore_eos` (default true here): every answer is exactly the sampled output length.

A profile's optional `client` mapping (`version`, `behaviour`, `prompt_scale`) says which release
sent it, or overrides the behaviour and scales the sampled prompt lengths
(`fidelity.client_workload` writes it when a run's measured lengths contradict the release's).
Importing this module registers `workload.kind = "inference_perf"` with `sim.workload.registry`; the
module also reads the per-request and summary files inference-perf leaves in a run folder.
"""
from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from math import log, sqrt
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from policies import ConfigError, FinishReason, Request
from fidelity.synthetic_prompt import SyntheticPrompt
from fidelity.runs import measured_table
from sim.workload.registry import ProfileKind, register_kind

if TYPE_CHECKING:  # the run readers' tables; registering the workload kind stays without pandas
    import pandas as pd


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
        return cls(mean=_num(f"{field}.mean", value.get("mean", 512)), std_dev=std, min=lo, max=hi, type=kind,
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
        question = sp.get("question_distribution") or sp.get("question_len", 50)
        output = sp.get("output_distribution") or sp.get("output_len", 50)
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
        multi = bool(sp.get("enable_multi_turn_chat", False))
        version = None if client.get("version") is None else str(client["version"])
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
            enable_multi_turn_chat=bool(sp.get("enable_multi_turn_chat", False)),
            load_type=load_type, stages=tuple(stages),
            interval=_num("profile.load.interval", load.get("interval", 1.0), 0),
            ignore_eos=bool(server.get("ignore_eos", True)) if isinstance(server, dict) else True,
            seed=None if seed is None else _num(f"{f}.seed", seed, 0, integer=True),
            client_version=version, behaviour=behaviour, prompt_scale=scale,
        )

    @property
    def num_requests(self) -> int:
        """Requests the whole profile sends (over every stage)."""
        return sum(s.num_sends for s in self.stages)


def send_times(stage: LoadStage, load_type: str, rng: np.random.Generator) -> np.ndarray:
    """Offsets (s from the stage start) at which the load generator sends each request of a stage."""
    if load_type == "concurrent":
        # inference-perf runs a concurrent stage as rate=num_requests over 1 s, gated by the semaphore
        return _constant_times(stage.num_sends, 1.0, rng)
    if load_type == "constant":
        return _constant_times(stage.num_sends, float(stage.duration), rng)
    times: list[float] = []  # poisson: a Poisson count per second, spread like a constant stage
    t, n = 0.0, stage.num_sends
    while len(times) < n:
        k = int(rng.poisson(stage.rate))
        if k >= 1:
            times.extend((t + _constant_times(k, 1.0, rng)).tolist())
        t += 1.0
    return np.asarray(times[:n])


def _constant_times(n: int, duration: float, rng: np.random.Generator) -> np.ndarray:
    if n <= 0:
        return np.zeros(0)
    gaps = rng.exponential(1.0 / (n / duration), n)
    return np.cumsum(gaps * (duration / gaps.sum()))


def _scaled(lengths: np.ndarray, scale: float) -> np.ndarray:
    return lengths if scale == 1.0 else np.maximum(np.round(lengths * scale), 0).astype(int)


@dataclass
class _Send:
    """One request the load generator will send: its stage, place in the stage, time and prompt."""

    stage: int
    index: int  # position in the stage
    time: float  # absolute send time (s)
    prompt: int  # prompt (= user session) index


class SharedPrefixWorkload:
    """The profile's requests, released as the load generator would release them.

    - Load stages run one after another: stage k sends `int(rate * duration)` requests; `constant`
      spaces them by exponential gaps rescaled to sum to `duration`, `poisson` draws a Poisson count per
      second and spreads each second's requests the same way; `concurrent` sends `num_requests` with at
      most `concurrency_level` in flight. The next stage starts when every request of the stage has
      finished, plus `load.interval` seconds (default 1). Every stage restarts at prompt 0.

    Requests known before the run starts are returned by `start()`; a multi-turn chat's next turn,
    a concurrent stage's next request and every later stage are returned by `on_finish()`.
    `req_id` is `"s{stage}-{index}"`; tags carry group, user, stage and turn.
    """

    def __init__(self, profile: SharedPrefixProfile | dict, seed: int = 0) -> None:
        self.profile = profile if isinstance(profile, SharedPrefixProfile) else SharedPrefixProfile.from_dict(profile)
        p = self.profile
        rng = np.random.default_rng(p.seed if p.seed is not None else seed)
        self._arrival_rng = np.random.default_rng([seed, 1])
        sys_lens = _scaled(p.system_prompt_len.sample(rng, p.num_groups), p.prompt_scale)
        prompts = []  # (group, user-in-group, question len, output len), in generation order
        for g in range(p.num_groups):
            q = _scaled(p.question_len.sample(rng, p.num_prompts_per_group), p.prompt_scale)
            o = p.output_len.sample(rng, p.num_prompts_per_group)
            prompts.extend((g, u, int(q[u]), int(o[u])) for u in range(p.num_prompts_per_group))
        order = rng.permutation(len(prompts))
        self.prompts = [prompts[i] for i in order]
        self.system_prompt_lens = [int(x) for x in sys_lens]
        # per session: the context its next turn is sent after (multi-turn)
        self._context: list[SyntheticPrompt] = [self._initial_context(g) for g, *_ in self.prompts]
        self._session_busy = [False] * len(self.prompts)
        self._pending: list[_Send] = []
        self._queues: dict[int, deque] = {}
        self._num_waiting = 0
        self._in_flight: dict[str, _Send] = {}
        self._stage = -1
        self._stage_left = 0
        self._turn = [0] * len(self.prompts)

    def _initial_context(self, group: int) -> SyntheticPrompt:
        """A registered session's context before its first turn: empty (the generator's own sessions,
        which start at the system prompt, are never the ones used)."""
        return SyntheticPrompt([])

    # keys of the synthetic token segments
    def _sys_key(self, group: int) -> int:
        return 1_000_000 + group

    def _question_key(self, prompt: int) -> int:
        return 2_000_000 + prompt

    @property
    def num_prompts(self) -> int:
        return len(self.prompts)

    def start(self) -> list[Request]:
        return self._begin_stage(0, 0.0)

    def on_finish(self, request: Request, now: float) -> list[Request]:
        send = self._in_flight.pop(str(request.req_id), None)
        if send is None:
            return []
        if self.profile.multi_turn:
            self._session_busy[send.prompt] = False
            if request.finish_reason is not FinishReason.REJECTED:
                # context <- this turn's prompt + its answer (generated text: placeholder ids)
                self._context[send.prompt] = SyntheticPrompt(request.prompt_token_ids.segments).extended(
                    (None, request.num_output_tokens))
        self._stage_left -= 1
        out = self._release(now, send.prompt)
        if self._stage_left == 0 and not self._num_waiting and self._stage + 1 < len(self.profile.stages):
            out.extend(self._begin_stage(self._stage + 1, now + self.profile.interval))
        return out

    # --- internals --------------------------------------------------------------------------------
    def _begin_stage(self, k: int, t0: float) -> list[Request]:
        stage = self.profile.stages[k]
        self._stage = k
        if k > 0 and self.profile.multi_turn:
            # from 0.5 each worker clears its sessions when a stage ends: the next starts afresh
            self._context = [self._initial_context(g) for g, *_ in self.prompts]
        offsets = send_times(stage, self.profile.load_type, self._arrival_rng)
        n = self.num_prompts
        self._pending = [_Send(k, i, t0 + float(offsets[i]), i % n) for i in range(len(offsets))]
        self._stage_left = len(self._pending)
        self._num_waiting = len(self._pending)
        self._queues = {}
        if self.profile.load_type != "concurrent" and self.profile.multi_turn:
            # only sessions block: each session's sends wait in its own queue, in send order
            for send in self._pending:
                self._queues.setdefault(send.prompt, deque()).append(send)
            self._pending = []
            return [r for q in list(self._queues) for r in self._release(t0, q)]
        return self._release(t0)

    def _release(self, now: float, session: int | None = None) -> list[Request]:
        """Every pending send whose session and concurrency slot are free, at max(send time, now)
        (with per-session queues: the next send of `session`, whose previous turn just ended)."""
        if self._queues:
            queue = self._queues.get(session)
            if not queue or self._session_busy[session]:
                return []
            self._num_waiting -= 1
            send = queue.popleft()
            return [self._request(send, max(send.time, now))]
        stage = self.profile.stages[self._stage] if self._stage >= 0 else None
        limit = stage.concurrency_level if stage is not None and self.profile.load_type == "concurrent" else None
        out, keep = [], []
        for send in self._pending:
            blocked = (self.profile.multi_turn and self._session_busy[send.prompt]) or (
                limit is not None and len(self._in_flight) >= limit)
            if blocked:
                keep.append(send)
                continue
            out.append(self._request(send, max(send.time, now)))
        self._pending = keep
        self._num_waiting = len(keep)
        return out

    def _request(self, send: _Send, arrival: float) -> Request:
        group, user, q_len, out_len = self.prompts[send.prompt]
        if self.profile.multi_turn:
            # inference-perf sends the session's context + " " + the prompt: the question alone in
            # 0.5, system prompt + question from 0.6
            sys_part = ((self._sys_key(group), self.system_prompt_lens[group]),) \
                if self.profile.behaviour == "chat-0.6" else ()
            tokens = self._context[send.prompt].extended(*sys_part, (self._question_key(send.prompt), q_len))
            self._session_busy[send.prompt] = True
        else:
            tokens = SyntheticPrompt([(self._sys_key(group), self.system_prompt_lens[group]),
                                      (self._question_key(send.prompt), q_len)])
        turn = self._turn[send.prompt]
        self._turn[send.prompt] += 1
        req_id = f"s{send.stage}-{send.index}"
        self._in_flight[req_id] = send
        return Request(req_id, arrival, len(tokens), max(1, out_len), prompt_token_ids=tokens,
                       ignore_eos=self.profile.ignore_eos,
                       tags={"group": group, "user": user, "stage": send.stage, "turn": turn})


# --- a run's measurements ------------------------------------------------------------------------
def read_inference_perf_requests(path: Path) -> pd.DataFrame:
    """inference-perf's `per_request_lifecycle_metrics.json` (failures dropped).

    Each entry has `start_time`, `end_time` and `error`; `computed_metrics` (TTFT, TPOT, token
    counts) only when the report config asks for them (off by default), so without them the same
    quantities come from `info` as inference-perf computes them: input tokens from
    `info.request_metrics.text.input_tokens` (or the older top-level `info.input_tokens`), output
    tokens from `info.response_metrics.output_tokens`, TTFT = first output token time - start,
    E2E = end - start. TPOT is per token: (last - first output token time) / (output tokens - 1)
    from `info`; with `computed_metrics`, whose TPOT and ITL are per streamed chunk, (E2E - TTFT) /
    (output tokens - 1) (`fidelity.metric_definitions`).
    """
    with open(path) as f:
        entries = json.load(f)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of per-request entries")
    rows = []
    for e in entries:
        if not isinstance(e, dict) or e.get("error"):
            continue
        c = e.get("computed_metrics")
        if c:
            rows.append({
                "arrival_time": float(e["start_time"]), "num_prompt_tokens": int(c["input_tokens"]),
                "num_output_tokens": int(c["output_tokens"]),
                "ttft_s": float(c["time_to_first_token"]) if c.get("time_to_first_token") is not None else math.nan,
                "e2e_s": float(c["request_latency"]),
                "tpot_s": math.nan,  # derived per token below
            })
            continue
        info = e.get("info") or {}
        req = info.get("request_metrics") or {}
        n_in = (req.get("text") or {}).get("input_tokens", info.get("input_tokens"))
        resp = info.get("response_metrics") or {}
        n_out = resp.get("output_tokens")
        if n_in is None or n_out is None or e.get("start_time") is None or e.get("end_time") is None:
            continue
        start, times = float(e["start_time"]), resp.get("output_token_times") or []
        ttft = float(times[0]) - start if len(times) > 1 else math.nan
        # first to last token stamp over the tokens (not the stamps: a stream may carry several per token)
        tpot = (float(times[-1]) - float(times[0])) / (int(n_out) - 1) if len(times) > 1 and int(n_out) > 1 else math.nan
        rows.append({"arrival_time": start, "num_prompt_tokens": int(n_in), "num_output_tokens": int(n_out),
                     "ttft_s": ttft, "e2e_s": float(e["end_time"]) - start, "tpot_s": tpot})
    if not rows:
        raise ValueError(f"{path}: no successful request with token counts (computed_metrics or info)")
    for r in rows:
        if not math.isfinite(r["tpot_s"]) and r["num_output_tokens"] > 1:
            r["tpot_s"] = (r["e2e_s"] - r["ttft_s"]) / (r["num_output_tokens"] - 1)
    return measured_table({k: [r[k] for r in rows] for k in rows[0]})


def read_summary_means(path: Path, requested_output: float | None = None) -> dict[str, float]:
    """Mean TTFT and E2E from inference-perf's `summary_lifecycle_metrics.json` (successes only), and
    the per-token TPOT of the means, (E2E - TTFT) / (n - 1) (the summary's own TPOT is per streamed
    chunk: `fidelity.metric_definitions`). n is `requested_output`, the mean max_tokens the client
    asked for, when given (under ignore_eos the server generates exactly that; the summary's
    output_len counts the re-tokenized text, which can fall well short), else the summary's mean
    output_len. `num_successes` / `num_failures`: the summary's counts, where it has them."""
    with open(path) as f:
        data = json.load(f)
    ok = data.get("successes") or {}
    lat = ok.get("latency") or data.get("latency") or {}
    names = {"ttft_s": "time_to_first_token", "e2e_s": "request_latency"}
    out = {k: float(lat[v]["mean"]) for k, v in names.items() if isinstance(lat.get(v), dict) and "mean" in lat[v]}
    n = (ok.get("output_len") or {}).get("mean") if isinstance(ok.get("output_len"), dict) else None
    if requested_output is not None:
        n = requested_output
    out["tpot_s"] = math.nan
    if isinstance(n, (int, float)) and n > 1 and "ttft_s" in out and "e2e_s" in out:
        out["tpot_s"] = (out["e2e_s"] - out["ttft_s"]) / (float(n) - 1)
    for key, part in (("num_successes", ok), ("num_failures", data.get("failures") or {})):
        if isinstance(part, dict) and isinstance(part.get("count"), (int, float)):
            out[key] = float(part["count"])  # requests the means are over, and those the client gave up on
    return out


def requested_output_mean(profile: dict | None) -> float | None:
    """The mean max_tokens a `shared_prefix` profile's requests ask for when the server generates
    exactly that (ignore_eos), over the generator's prompts (sent in turn); None otherwise."""
    sp = shared_prefix_profile(profile)
    if sp is None or not sp.ignore_eos:
        return None
    return float(np.mean([max(1, o) for *_, o in SharedPrefixWorkload(sp).prompts]))


def shared_prefix_profile(profile: dict | None):
    """The run's inference-perf `shared_prefix` profile (`SharedPrefixProfile`), or None."""
    data = (profile or {}).get("data")
    if not (isinstance(data, dict) and data.get("type") == "shared_prefix"):
        return None
    return SharedPrefixProfile.from_dict(profile)


def prefix_from_shared_prefix(requests: pd.DataFrame, profile: dict | None) -> pd.DataFrame:
    """inference-perf `shared_prefix` (single turn): each prompt starts with its group's system
    prompt. Which group a measured request belonged to is not recorded, so requests are dealt to the
    groups in turn (the generator cycles its shuffled prompts over all groups; what the prefix cache
    sees is that each group's system prompt recurs, which dealing keeps)."""
    sp = shared_prefix_profile(profile)
    if sp is None or not len(requests) or sp.enable_multi_turn_chat:
        return requests
    n_sys = int(round(sp.system_prompt_len.mean))
    if n_sys <= 0:
        return requests
    requests = requests.copy()
    requests["prefix_group"] = np.arange(len(requests)) % sp.num_groups
    requests["num_prefix_tokens"] = np.minimum(n_sys, requests["num_prompt_tokens"] - 1).clip(lower=0)
    return requests


# --- `workload.kind = "inference_perf"` ----------------------------------------------------------
WORKLOAD_KIND = ProfileKind(name="inference_perf", check=SharedPrefixProfile.from_dict,
                            build=lambda profile, seed: SharedPrefixWorkload(profile, seed=seed),
                            needs="an inference-perf profile YAML/JSON with data.type: shared_prefix")
register_kind(WORKLOAD_KIND)

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
Importing this module registers `workload.kind = "inference_perf"` with `sim.workload.registry`.
The profile and the releases' behaviours are `inference_perf_profile`; what a run leaves in its
folder is read by `inference_perf_results`.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from fidelity.sources.inference_perf_profile import LoadStage, SharedPrefixProfile
from fidelity.synthetic_prompt import SyntheticPrompt
from policies import FinishReason, Request
from sim.workload.registry import ProfileKind, register_kind


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
        # req_id -> its send and the prompt it was sent with (kept here: an executor may replace the
        # request's own ids, as the engine folds them into its vocabulary)
        self._in_flight: dict[str, tuple[_Send, SyntheticPrompt]] = {}
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
        sent = self._in_flight.pop(str(request.req_id), None)
        if sent is None:
            return []
        send, prompt = sent
        if self.profile.multi_turn:
            self._session_busy[send.prompt] = False
            if request.finish_reason is not FinishReason.REJECTED:
                # context <- this turn's prompt + its answer (generated text: placeholder ids)
                self._context[send.prompt] = SyntheticPrompt(prompt.segments).extended(
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
        self._in_flight[req_id] = (send, tokens)
        return Request(req_id, arrival, len(tokens), max(1, out_len), prompt_token_ids=tokens,
                       ignore_eos=self.profile.ignore_eos,
                       tags={"group": group, "user": user, "stage": send.stage, "turn": turn})


# --- `workload.kind = "inference_perf"` ----------------------------------------------------------
WORKLOAD_KIND = ProfileKind(name="inference_perf", check=SharedPrefixProfile.from_dict,
                            build=lambda profile, seed: SharedPrefixWorkload(profile, seed=seed),
                            needs="an inference-perf profile YAML/JSON with data.type: shared_prefix")
register_kind(WORKLOAD_KIND)

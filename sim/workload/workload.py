"""`build_workload(cfg, max_model_len) -> Workload`: requests with arrival times, lengths and tags.

Open-loop kinds know every request up front (`start()` returns them all); closed-loop users and a
registered kind's sessions and stages send follow-ups from `on_finish`. Lengths come from the
trace or from the length distributions; shared-prefix groups and Mooncake hash ids give requests
lazy `SyntheticTokens` ids so the prefix cache can hit; `too_long` clips, filters or keeps what
does not fit `max_model_len`. `Workload` states each of these in full.

Everything is drawn from `numpy.random` generators seeded by `workload.seed`: the same config gives
the same requests, bit for bit. By default one generator serves every quantity in turn;
`streams="per_quantity"` gives each its own (`sim.workload.streams`: common random numbers, so that
request i is the same request at every rate and request count).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from policies import ConfigError, Request
from sim.workload.arrivals import arrival_times, staged_arrival_times
from sim.workload import registry
from sim.workload.concurrency import ConcurrencyCap
from sim.workload.config import WorkloadConfig
from sim.workload.lengths import sample_lengths
from sim.workload.streams import RandomStreams
from sim.workload.synthetic_tokens import SyntheticTokens
from sim.workload.traces import MOONCAKE_BLOCK_TOKENS, Trace, has_arrivals, read_trace

# seed namespaces for SyntheticTokens segments, so prefixes, unique parts and hash ids never collide
_NS = 10**15
_NS_PREFIX, _NS_UNIQUE, _NS_HASH = 1 * _NS, 2 * _NS, 3 * _NS
_CHUNK = 1024  # closed-loop lengths are drawn in chunks of this many requests


class Workload:
    """The requests of one run: `start()` once at t = 0, `on_finish()` for every request that ends.

    Open-loop kinds (poisson, gamma, constant, staged, trace) know every request up front: `start()`
    returns them all and `on_finish` returns []. `closed_loop` starts `num_users` requests at t = 0
    and `on_finish` sends the finishing user's next request `think_time` seconds later, until
    `num_requests` have been sent or `duration` has passed. A registered kind
    (`sim.workload.registry`) hands the profile file to its own generator: with fidelity's load
    generators, sessions' next turns and later stages come from `on_finish`; too-long prompts go to
    the scheduler, which rejects them as vLLM answers them (its lengths are the profile's, not
    `too_long`'s).

    Lengths come from the trace when `workload.trace` is set (row i for request i; for arrival kinds
    other than `trace` the rows are reused cyclically), else from `prompt_len` / `output_len` (or a
    class's own). With shared-prefix groups a request's prompt is its group's `prefix_len`-token
    system prompt followed by its own sampled prompt, and carries lazy `SyntheticTokens` ids so the
    prefix cache can hit on the shared part; Mooncake traces map each hash id to one 512-token
    segment. Requests without shared content get `prompt_token_ids = None`.

    Too long for `max_model_len` (prompt + output): `clip` shortens the prompt to at most
    max_model_len - 1 and then the output to what is left; `filter` drops the request; `keep`
    passes it on for the scheduler to reject. `num_clipped` / `num_filtered` count them.
    """

    def __init__(self, cfg: WorkloadConfig, max_model_len: int | None, streams: str = "one") -> None:
        self.cfg = cfg
        self.max_model_len = cfg.max_model_len or max_model_len
        self.rngs = RandomStreams(cfg.seed, streams)  # its generators (`sim.workload.streams`)
        self.trace: Trace | None = read_trace(cfg.trace, cfg.trace_format) if cfg.trace else None
        if self.trace is not None and not has_arrivals(self.trace.format) and cfg.kind == "trace":
            raise ConfigError(f"workload.kind: {cfg.trace} is a length table without arrival times; choose "
                              "poisson, gamma, constant, staged or closed_loop to use its lengths")
        self.num_clipped = 0
        self.num_filtered = 0
        self.num_passes = 1  # a trace replayed this many times over (`_replayed`)
        self.num_issued = 0
        self._rows: list[tuple] | None = None  # open loop: (arrival, prompt, output, priority, tokens, tags)

    # --- public API ---------------------------------------------------------------------------------
    def start(self) -> list[Request]:
        """The requests known up front (all of them for open-loop kinds), with their arrival times."""
        if self.cfg.kind == "closed_loop":
            self._closed_init()
            return [r for u in range(self.cfg.num_users) if (r := self._closed_next(u, 0.0)) is not None]
        if self._rows is None:
            self._rows = self._open_rows()
            self.num_issued = len(self._rows)
        return [Request(i, a, p, o, priority=pr, prompt_token_ids=tok, tags=dict(tags))
                for i, (a, p, o, pr, tok, tags) in enumerate(self._rows)]

    def on_finish(self, request: Request, now: float) -> list[Request]:
        """Follow-up requests when `request` ends (finished, rejected or aborted) at `now`."""
        if self.cfg.kind != "closed_loop" or "user" not in request.tags:
            return []
        nxt = self._closed_next(request.tags["user"], now + self.cfg.think_time)
        return [] if nxt is None else [nxt]

    # --- open loop ----------------------------------------------------------------------------------
    def _open_columns(self) -> tuple:
        """Arrival times, prompt/output lengths, priorities, class and user indices (or None): arrays."""
        cfg, rng = self.cfg, self.rngs.get
        cls_idx = None
        if cfg.kind == "trace":
            t = self.trace.arrival_time
            if cfg.rate is not None:  # rescale the recorded arrivals to the requested mean rate
                t = t * (self.trace.mean_rate / cfg.rate) if np.isfinite(self.trace.mean_rate) else t
            else:
                t = t * cfg.time_scale
            t = self._replayed(t)
            if cfg.duration is not None:
                t = t[t < cfg.duration]
            if cfg.num_requests is not None:
                t = t[:cfg.num_requests]
        elif cfg.kind == "staged":
            t = staged_arrival_times(rng("arrivals"), cfg.stages, cfg.cv, cfg.num_requests)
        else:
            cv = {"poisson": 1.0, "constant": 0.0}.get(cfg.kind, cfg.cv)
            if cfg.classes and cfg.classes[0].rate is not None:  # one stream per class
                per_class = [arrival_times(rng("arrivals", k), c.rate, cv, cfg.num_requests, cfg.duration)
                             for k, c in enumerate(cfg.classes)]
                t = np.concatenate(per_class)
                cls_idx = np.concatenate([np.full(len(s), k) for k, s in enumerate(per_class)])
                order = np.argsort(t, kind="stable")[:cfg.num_requests]
                t, cls_idx = t[order], cls_idx[order]
            else:
                t = arrival_times(rng("arrivals"), cfg.rate, cv, cfg.num_requests, cfg.duration)
        n = len(t)
        if cls_idx is None and cfg.classes:
            cls_idx = rng("classes").choice(len(cfg.classes), size=n, p=[c.fraction for c in cfg.classes])
        idx = np.arange(n)
        prompt, output, priority = self._lengths(idx, cls_idx)
        groups = cfg.num_prefix_groups
        users = rng("users").integers(groups * cfg.users_per_group, size=n) if groups else None
        return t, prompt, output, priority, cls_idx, users

    def _replayed(self, t: np.ndarray) -> np.ndarray:
        """The trace's arrival times `t`, played again after themselves as often as `num_requests` or
        `duration` asks for more than one pass holds: each pass starts one mean gap after the last
        one's final arrival (a sweep's held window at a high rate needs more requests than the file
        has). `num_passes` counts the passes; a row's lengths are row i mod the trace's (`_lengths`)."""
        cfg, n = self.cfg, len(t)
        span = float(t[-1] - t[0]) if n else 0.0
        period = span + (span / (n - 1) if n > 1 else 0.0)  # one pass and one mean gap
        want = 1
        if cfg.num_requests is not None:
            want = -(-cfg.num_requests // n) if n else 1
        elif cfg.duration is not None and period > 0:
            want = int(np.ceil((cfg.duration - float(t[0])) / period))
        if want <= 1 or period <= 0:
            self.num_passes = 1
            return t
        self.num_passes = want
        return np.concatenate([t + k * period for k in range(want)])

    def _open_row(self, columns, i: int) -> tuple | None:
        """Row i of the open-loop columns, through `_make` (None when filtered out)."""
        t, prompt, output, priority, cls_idx, users = columns
        user = None if users is None else int(users[i])
        return self._make(i, float(t[i]), int(prompt[i]), int(output[i]), int(priority[i]),
                          None if cls_idx is None else int(cls_idx[i]), user,
                          None if user is None else user // self.cfg.users_per_group)

    def _open_rows(self) -> list[tuple]:
        columns = self._open_columns()
        return [row for i in range(len(columns[0])) if (row := self._open_row(columns, i)) is not None]

    def stream(self) -> tuple[int, Iterator[Request]] | None:
        """Open-loop kinds: (how many requests, the requests in arrival order), each Request made
        only when the iterator reaches it, so a long run does not hold a million waiting objects.

        The same requests as `start()` sorted by arrival (ids, lengths, tags: bit for bit); None
        for a closed loop (its requests come from `on_finish`). Use one of `start`, `stream` and
        `stream_parts` on a workload."""
        parts = self.stream_parts(1)
        return None if parts is None else parts[0]

    def stream_parts(self, num_parts: int) -> list[tuple[int, Iterator[Request]]] | None:
        """`stream()` dealt round-robin into `num_parts` streams: request j of the arrival order goes
        to part j mod num_parts (what a round-robin router does), each made only when reached."""
        if self.cfg.kind == "closed_loop":
            return None
        columns = self._open_columns()
        t, prompt, output = columns[0], columns[1], columns[2]
        keep = np.ones(len(t), dtype=bool)
        limit = self.max_model_len
        if limit is not None and self.cfg.too_long == "filter":
            prefix = self.cfg.prefix_len if self.cfg.num_prefix_groups else 0
            keep = (prompt + prefix + output) <= limit
        ids = np.cumsum(keep) - 1
        order = np.arange(len(t)) if np.all(t[1:] >= t[:-1]) else np.argsort(t, kind="stable")
        kept = order[keep[order]]  # the requests, in the order they arrive
        self.num_issued = int(kept.size)
        self.num_filtered = int(len(t) - kept.size)

        def requests(rows: np.ndarray) -> Iterator[Request]:
            for i in rows.tolist():
                a, p, o, pr, tok, tags = self._open_row(columns, i)
                yield Request(int(ids[i]), a, p, o, priority=pr, prompt_token_ids=tok, tags=tags)
        return [(int(kept[k::num_parts].size), requests(kept[k::num_parts])) for k in range(num_parts)]

    def _lengths(self, idx: np.ndarray, cls_idx: np.ndarray | None):
        """Prompt, output and priority arrays for request indices `idx` (trace rows or samples)."""
        cfg, rng, n = self.cfg, self.rngs.get, len(idx)
        priority = np.zeros(n, dtype=np.int64)
        if self.trace is not None:
            rows = idx % len(self.trace)
            prompt, output = self.trace.prompt_tokens[rows].copy(), self.trace.output_tokens[rows].copy()
            if self.trace.priority is not None:
                priority = self.trace.priority[rows].copy()
        else:
            prompt = sample_lengths(cfg.prompt_len, n, rng("prompt"), "prompt")
            output = sample_lengths(cfg.output_len, n, rng("output"), "output")
        if cls_idx is not None:
            for k, c in enumerate(cfg.classes):
                sel = np.flatnonzero(cls_idx == k)
                priority[sel] = c.priority
                if c.prompt_len is not None:
                    prompt[sel] = sample_lengths(c.prompt_len, len(sel), rng("class_prompt", k), "prompt")
                if c.output_len is not None:
                    output[sel] = sample_lengths(c.output_len, len(sel), rng("class_output", k), "output")
        return prompt, output, priority

    # --- one request ----------------------------------------------------------------------------------
    def _make(self, i: int, arrival: float, prompt: int, output: int, priority: int, cls: int | None,
              user: int | None, group: int | None) -> tuple | None:
        """A request row after prefixes and the max_model_len rule, or None when filtered out."""
        cfg, tokens, tags = self.cfg, None, {}
        if cls is not None:
            tags["class"] = cfg.classes[cls].name
        if group is not None:
            tags["group"], tags["user"] = group, user
            tokens = SyntheticTokens([(_NS_PREFIX + group, cfg.prefix_len), (_NS_UNIQUE + i, prompt)])
            prompt += cfg.prefix_len
        elif self.trace is not None and self.trace.hash_ids is not None:
            ids = self.trace.hash_ids[i % len(self.trace)]
            if ids is not None:
                segs, left = [], prompt
                for h in ids:  # one segment per 512-token block; the last one partial
                    segs.append((_NS_HASH + h, min(MOONCAKE_BLOCK_TOKENS, left)))
                    left -= MOONCAKE_BLOCK_TOKENS
                    if left <= 0:
                        break
                tokens = SyntheticTokens(segs)
        limit = self.max_model_len
        if limit is not None and prompt + output > limit and cfg.too_long != "keep":
            if cfg.too_long == "filter":
                self.num_filtered += 1
                return None
            self.num_clipped += 1
            prompt = min(prompt, limit - 1)
            output = min(output, limit - prompt)
            if tokens is not None:
                tokens = tokens.truncated(prompt)
        return arrival, prompt, output, priority, tokens, tags

    # --- closed loop ----------------------------------------------------------------------------------
    def _closed_init(self) -> None:
        self.num_issued = self.num_clipped = self.num_filtered = 0
        self.rngs = RandomStreams(self.cfg.seed, self.rngs.layout)
        self._pool: list[tuple] = []  # per request index: (prompt, output, priority, class)

    def _pool_row(self, k: int) -> tuple:
        """Lengths of the k-th closed-loop request, drawn in chunks so they depend only on k and the seed."""
        cfg = self.cfg
        while k >= len(self._pool):
            idx = np.arange(len(self._pool), len(self._pool) + _CHUNK)
            fractions = [c.fraction for c in cfg.classes]
            cls_idx = self.rngs.get("classes").choice(len(fractions), size=_CHUNK, p=fractions) if fractions else None
            prompt, output, priority = self._lengths(idx, cls_idx)
            self._pool.extend(zip(prompt.tolist(), output.tolist(), priority.tolist(),
                                  cls_idx.tolist() if cls_idx is not None else [None] * _CHUNK))
        return self._pool[k]

    def _closed_next(self, user: int, arrival: float) -> Request | None:
        cfg = self.cfg
        while True:
            if cfg.num_requests is not None and self.num_issued >= cfg.num_requests:
                return None
            if cfg.duration is not None and arrival >= cfg.duration:
                return None
            k = self.num_issued
            self.num_issued += 1
            prompt, output, priority, cls = self._pool_row(k)
            group = user % cfg.num_prefix_groups if cfg.num_prefix_groups else None
            row = self._make(k, arrival, prompt, output, priority, cls, user, group)
            if row is None:  # filtered out as too long: the user sends its next one instead
                if self.num_filtered > 1000 and self.num_filtered > 10 * (k + 1 - self.num_filtered):
                    raise ValueError(f"workload.too_long: nearly every request exceeds max_model_len="
                                     f"{self.max_model_len}; use too_long = 'clip' or shorter lengths")
                continue
            a, p, o, pr, tok, tags = row
            tags["user"] = user
            return Request(k, a, p, o, priority=pr, prompt_token_ids=tok, tags=tags)


def build_workload(cfg: WorkloadConfig, max_model_len: int | None = None, streams: str = "one") -> Workload:
    """The workload `cfg` describes; `max_model_len` (usually scheduler.max_model_len) bounds lengths
    unless `cfg.max_model_len` is set; behind a `ConcurrencyCap` with `cfg.max_concurrency`.
    `streams`: how its quantities share random number generators (`sim.workload.streams`; a
    registered kind draws from its own generator and ignores it)."""
    kind = registry.KINDS.get(cfg.kind)
    if kind is not None:  # a load generator's own semantics (sessions, stage draining)
        return kind.build(registry.read_profile(cfg.profile), cfg.seed)
    workload = Workload(cfg, max_model_len, streams)
    return ConcurrencyCap(workload, cfg.max_concurrency) if cfg.max_concurrency else workload

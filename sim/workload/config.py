"""The `workload` config section: arrivals, lengths, shared prefixes and priority classes.

`WorkloadConfig` is the `[workload]` table (its docstring shows every key, all optional);
`LengthDist` a prompt or output length distribution, `PriorityClass` a traffic class. Every value
is checked when the config is built, and an error names the key and what it allows. The kinds
and trace formats are sim's own plus those a `sim.workload.registry` entry adds (fidelity
registers its load generators and length tables there), so this module names no dataset.
`sim.workload.workload.build_workload` turns a config into requests.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from policies.config import ConfigError, check_choice, check_int, check_number
from sim.workload import registry

# sim's own; `workload_kinds()` and `trace_formats()` add the registered ones (`sim.workload.registry`)
WORKLOAD_KINDS = ("poisson", "gamma", "constant", "staged", "closed_loop", "trace")
TRACE_FORMATS = ("auto", "csv", "azure", "mooncake")
LENGTH_KINDS = ("constant", "uniform", "lognormal", "empirical")
TOO_LONG = ("clip", "filter", "keep")
# the most requests one run may make: arrival times and lengths are arrays of this size, so a
# larger count (a typo, or a rate x duration that overflows) is refused naming its field rather
# than failing in numpy ("Maximum allowed dimension exceeded") or the allocator
MAX_NUM_REQUESTS = 10**8
STAGES_SHAPE = "a list of [rate, duration] pairs, e.g. [[2.0, 60], [8.0, 60]]"
CLASSES_SHAPE = ('a list of tables, e.g. [{ name = "chat", priority = 0, fraction = 0.8 }, '
                 '{ name = "batch", priority = 1, fraction = 0.2 }]')


def workload_kinds() -> tuple[str, ...]:
    """Every allowed `workload.kind`: sim's own, then the registered ones in order."""
    return (*WORKLOAD_KINDS, *registry.KINDS)


def trace_formats() -> tuple[str, ...]:
    """Every allowed `workload.trace_format`: sim's own, then the registered ones in order."""
    return (*TRACE_FORMATS, *registry.TRACE_FORMATS)


def _from_dict(cls, field: str, value):
    if isinstance(value, cls) or value is None:
        return value
    settings = [f for f in fields(cls) if f.name != "field"]  # `field` is bookkeeping, not a setting
    if not isinstance(value, dict):
        raise ConfigError(f"{field}: expected a table of {', '.join(f.name for f in settings)}, got {value!r}")
    known = {f.name for f in settings}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"{field}.{unknown[0]}: unknown key; allowed keys are {', '.join(sorted(known))}")
    missing = [f.name for f in settings if f.default is MISSING and f.default_factory is MISSING and f.name not in value]
    if missing:
        raise ConfigError(f"{field}.{missing[0]}: required")
    return cls(**value, field=field) if cls is LengthDist else cls(**value)


def _check_list(field: str, value, shape: str) -> None:
    """Refuse a `value` that is not a list (a TOML array) or tuple, saying the `shape` expected."""
    if value is not None and not isinstance(value, (list, tuple)):
        raise ConfigError(f"{field}: expected {shape}; got {value!r}")


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts, rounded to integers and clipped to [min, max].

    constant: `value`; uniform: integers in [`low`, `high`]; lognormal: `median` (or `mean`) and
    `sigma` of the underlying normal; empirical: samples of the matching column (prompt or output)
    of the trace file `path`.
    """

    kind: str = "constant"
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    median: float | None = None
    sigma: float = 1.0
    path: str | None = None
    min: int = 1
    max: int | None = None
    field: str = "workload.length"  # the config path, for error messages (not a setting)

    def __post_init__(self) -> None:
        f = self.field
        check_choice(f"{f}.kind", self.kind, LENGTH_KINDS)
        check_int(f"{f}.min", self.min, 1)
        check_int(f"{f}.max", self.max, self.min, allow_none=True)
        if self.kind == "constant":
            if self.value is None:
                raise ConfigError(f"{f}.value: required for kind = 'constant'")
            check_int(f"{f}.value", self.value, 1)
        elif self.kind == "uniform":
            check_int(f"{f}.low", self.low, 1)
            check_int(f"{f}.high", self.high, self.low)
        elif self.kind == "lognormal":
            if (self.mean is None) == (self.median is None):
                raise ConfigError(f"{f}.median: give exactly one of median or mean for kind = 'lognormal'")
            check_number(f"{f}.{'mean' if self.mean is not None else 'median'}",
                         self.mean if self.mean is not None else self.median, 0.0, strict_min=True)
            check_number(f"{f}.sigma", self.sigma, 0.0)
        elif self.kind == "empirical":
            if not self.path:
                raise ConfigError(f"{f}.path: required for kind = 'empirical' (a trace file)")
            if not Path(self.path).is_file():
                raise ConfigError(f"{f}.path: no such file {self.path}")


@dataclass(frozen=True)
class PriorityClass:
    """A traffic class: its share of requests (`fraction`) or its own arrival `rate`, its priority
    (lower = more important, vLLM convention) and optional length distributions of its own."""

    name: str
    priority: int = 0
    fraction: float | None = None
    rate: float | None = None
    prompt_len: LengthDist | None = None
    output_len: LengthDist | None = None

    def __post_init__(self) -> None:
        f = f"workload.classes.{self.name}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"workload.classes.name: expected a non-empty string, got {self.name!r}")
        check_int(f"{f}.priority", self.priority)
        if (self.fraction is None) == (self.rate is None):
            raise ConfigError(f"{f}.fraction: give exactly one of fraction or rate")
        if self.fraction is not None:
            check_number(f"{f}.fraction", self.fraction, 0.0, 1.0, strict_min=True)
        if self.rate is not None:
            check_number(f"{f}.rate", self.rate, 0.0, strict_min=True)
        object.__setattr__(self, "prompt_len", _from_dict(LengthDist, f"{f}.prompt_len", self.prompt_len))
        object.__setattr__(self, "output_len", _from_dict(LengthDist, f"{f}.output_len", self.output_len))


@dataclass(frozen=True)
class WorkloadConfig:
    """Where requests come from: an arrival process or a trace, lengths, prefixes, classes, seed.

    TOML shape (every key optional)::

        [workload]
        kind = "poisson"          # poisson | gamma | constant | staged | closed_loop | trace | a registered kind
                                  # (default: trace when `trace` is set, the first registered kind when
                                  # `profile` is, else poisson)
        profile = "profile.yaml"  # a registered kind's profile file (YAML/JSON), run by that kind's own
                                  #   generator (`sim.workload.registry`; fidelity registers its load
                                  #   generators': sessions wait for their previous turn, stages drain)
        rate = 4.0                # requests/s (poisson, gamma, constant; trace: rescale to this mean rate)
        cv = 2.0                  # gamma (and each stage of staged): coefficient of variation of
                                  #   inter-arrival gaps (1 = Poisson); other kinds leave it unused
        num_requests = 1000       # stop after this many requests
        duration = 600.0          # or stop generating arrivals after this many seconds
        stages = [[2.0, 60], [8.0, 60]]   # staged: [rate, duration] pairs, one after another
        num_users = 32            # closed_loop: concurrent users; each sends again `think_time` s after
        think_time = 0.0          #   its previous request ends
        trace = "examples/traces/azure_conv_2023_slice.csv"   # requests (lengths; arrivals for kind = trace)
        trace_format = "auto"     # auto | csv | azure | mooncake | a registered format (some: lengths only)
        time_scale = 1.0          # trace: multiply recorded arrival times (0.5 = twice as fast)
        prompt_len = { kind = "lognormal", median = 512, sigma = 1.0, max = 4096 }
        output_len = { kind = "constant", value = 128 }
        num_prefix_groups = 4     # shared system prompts: groups x prefix_len tokens, users_per_group
        prefix_len = 1024         #   users each (requests pick a user at random; closed-loop users map
        users_per_group = 8       #   to groups round-robin)
        classes = [{ name = "chat", priority = 0, fraction = 0.8 }, { name = "batch", priority = 1, fraction = 0.2 }]
        too_long = "clip"         # clip | filter | keep (keep: the scheduler rejects them)
        max_model_len = 4096      # overrides the limit build_workload is given
        request_timeout_s = 300.0 # the client gives up on a request not finished this long after it sent
                                  #   it (ends "timed_out", aborted in the engine); default none: it waits
        max_concurrency = 64      # the client keeps at most this many requests in flight: one due while
                                  #   all are busy waits in the client and is sent (arrives) when one
                                  #   ends (`vllm bench serve --max-concurrency`); default none: no bound
        seed = 0

    Nested tables may be given as dicts: `__post_init__` turns them into `LengthDist` / `PriorityClass`.
    """

    kind: str | None = None
    rate: float | None = None
    cv: float = 1.0
    num_requests: int | None = None
    duration: float | None = None
    stages: tuple = ()
    num_users: int = 1
    think_time: float = 0.0
    trace: str | None = None
    profile: str | None = None
    trace_format: str = "auto"
    time_scale: float = 1.0
    prompt_len: LengthDist = LengthDist(kind="constant", value=512, field="workload.prompt_len")
    output_len: LengthDist = LengthDist(kind="constant", value=128, field="workload.output_len")
    num_prefix_groups: int = 0
    prefix_len: int = 0
    users_per_group: int = 1
    classes: tuple = ()
    too_long: str = "clip"
    max_model_len: int | None = None
    request_timeout_s: float | None = None  # the client's timeout (sim.replica.Replica: its deadlines)
    max_concurrency: int | None = None  # the client's bound on requests in flight (sim.workload.concurrency)
    seed: int = 0

    def __post_init__(self) -> None:
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen: normalise in place)
        # lists checked first: a string or a number here would be iterated (or fail to be) below
        _check_list("workload.stages", self.stages, STAGES_SHAPE)
        _check_list("workload.classes", self.classes, CLASSES_SHAPE)
        if self.kind is None:
            profile_kind = registry.kind_of(self.profile) if isinstance(self.profile, str) else None
            s("kind", "trace" if self.trace else profile_kind or "poisson")
        check_choice("workload.kind", self.kind, workload_kinds(), hint=registry.REGISTERED_BY)
        self._check_profile()
        if self.rate is not None:
            check_number("workload.rate", self.rate, 0.0, strict_min=True)
        elif self.kind in ("poisson", "gamma", "constant") and not self.class_rates():
            s("rate", 1.0)  # documented default: 1 request/s
        check_number("workload.cv", self.cv, 0.0)
        check_int("workload.num_requests", self.num_requests, 1, allow_none=True, maximum=MAX_NUM_REQUESTS)
        if self.duration is not None:
            check_number("workload.duration", self.duration, 0.0, strict_min=True)
        s("stages", self._parse_stages(self.stages))
        if self.kind == "staged" and not self.stages:
            raise ConfigError("workload.stages: required for kind = 'staged', e.g. [[2.0, 60], [8.0, 60]]")
        check_int("workload.num_users", self.num_users, 1, maximum=MAX_NUM_REQUESTS)
        check_number("workload.think_time", self.think_time, 0.0)
        if self.trace is not None:
            if not isinstance(self.trace, str) or not Path(self.trace).is_file():
                raise ConfigError(f"workload.trace: no such file {self.trace!r}")
        elif self.kind == "trace":
            raise ConfigError("workload.trace: required for kind = 'trace' (a CSV or JSONL trace file)")
        check_choice("workload.trace_format", self.trace_format, trace_formats())
        check_number("workload.time_scale", self.time_scale, 0.0, strict_min=True)
        s("prompt_len", _from_dict(LengthDist, "workload.prompt_len", self.prompt_len))
        s("output_len", _from_dict(LengthDist, "workload.output_len", self.output_len))
        check_int("workload.num_prefix_groups", self.num_prefix_groups, 0)
        check_int("workload.prefix_len", self.prefix_len, 0)
        check_int("workload.users_per_group", self.users_per_group, 1)
        if self.num_prefix_groups and not self.prefix_len:
            raise ConfigError("workload.prefix_len: must be >= 1 when num_prefix_groups is set")
        s("classes", self._parse_classes(self.classes))
        check_choice("workload.too_long", self.too_long, TOO_LONG)
        check_int("workload.max_model_len", self.max_model_len, 2, allow_none=True)
        check_int("workload.seed", self.seed, 0)
        t = self.request_timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf):
            raise ConfigError(f"workload.request_timeout_s: expected a finite number of seconds > 0, or leave it "
                              f"unset for a client that waits for every answer; got {t!r}")
        check_int("workload.max_concurrency", self.max_concurrency, 1, allow_none=True)
        if self.max_concurrency is not None and (self.kind == "closed_loop" or self.kind in registry.KINDS):
            raise ConfigError(f"workload.max_concurrency: bounds an open-loop client's requests in flight; kind = "
                              f"{self.kind!r} has its own (closed_loop: num_users; a load generator's "
                              f"profile: its own setting)")
        if self.kind == "closed_loop" and self.num_requests is None and self.duration is None:
            s("num_requests", 1000)  # documented default, so a closed loop always ends
        if self.kind in ("poisson", "gamma", "constant") and self.num_requests is None and self.duration is None:
            s("num_requests", 1000)
        self._check_expected_count()

    def _check_expected_count(self) -> None:
        """Refuse arrivals sized by time whose expected count exceeds `MAX_NUM_REQUESTS`.

        With `num_requests` an open-loop stream is that long at most; without it, and for every
        stage (drawn whole, then cut to `num_requests`), the arrays are sized by rate x duration
        (`sim.workload.arrivals`), which a huge rate or duration makes too large.
        """
        if self.kind == "staged":
            spans = [(f"workload.stages[{i}]", rate, dur) for i, (rate, dur) in enumerate(self.stages)]
        elif self.kind in ("poisson", "gamma", "constant") and self.num_requests is None and self.duration is not None:
            rates = [c.rate for c in self.classes if c.rate is not None] or [self.rate]
            spans = [("workload.duration", sum(rates), self.duration)]
        else:
            return
        fix = "" if self.kind == "staged" else ", or set workload.num_requests"
        for field, rate, dur in spans:
            if rate * dur > MAX_NUM_REQUESTS:
                raise ConfigError(f"{field}: {dur:g} s at {rate:g} requests/s is about {rate * dur:.3g} requests; "
                                  f"at most {MAX_NUM_REQUESTS:,} per run: lower the rate or the duration{fix}")

    def _check_profile(self) -> None:
        """`profile` goes with a registered kind (and only with one); its generator checks the contents."""
        kind = registry.KINDS.get(self.kind)
        if kind is None:
            if self.profile is not None:
                kinds = " or ".join(repr(k) for k in registry.KINDS) or "a registered kind"
                raise ConfigError(f"workload.profile: only used with kind = {kinds}, not {self.kind!r}")
            return
        if not isinstance(self.profile, str) or not Path(self.profile).is_file():
            raise ConfigError(f"workload.profile: no such file {self.profile!r} (kind = {kind.name!r} needs "
                              f"{kind.needs})")
        kind.check(registry.read_profile(self.profile))  # field errors name profile.<key>

    def class_rates(self) -> bool:
        """Whether the classes (tables or `PriorityClass`es) give their own rates."""
        return any((c.get("rate") if isinstance(c, dict) else c.rate) is not None for c in self.classes or ())

    @staticmethod
    def _parse_stages(stages) -> tuple[tuple[float, float], ...]:
        """`[[rate, duration], ...]` as a tuple of (rate, duration) floats, each checked."""
        out = []
        for i, st in enumerate(stages or ()):
            if not isinstance(st, (list, tuple)) or len(st) != 2:
                raise ConfigError(f"workload.stages: entry {i} must be [rate, duration], got {st!r}")
            check_number(f"workload.stages[{i}].rate", st[0], 0.0)
            check_number(f"workload.stages[{i}].duration", st[1], 0.0, strict_min=True)
            out.append((float(st[0]), float(st[1])))
        return tuple(out)

    def _parse_classes(self, classes) -> tuple[PriorityClass, ...]:
        """The class tables as `PriorityClass`es: unique names, all fractions (adding up to 1) or all rates."""
        out = tuple(_from_dict(PriorityClass, f"workload.classes[{i}]", c) for i, c in enumerate(classes or ()))
        if not out:
            return out
        names = [c.name for c in out]
        if len(set(names)) != len(names):
            raise ConfigError(f"workload.classes: class names must be unique, got {names}")
        by_rate = [c.rate is not None for c in out]
        if any(by_rate) and not all(by_rate):
            raise ConfigError("workload.classes: give every class a fraction, or every class a rate, not a mix")
        if all(by_rate):
            if self.kind not in ("poisson", "gamma", "constant"):
                raise ConfigError(f"workload.classes: per-class rates need kind poisson, gamma or constant, "
                                  f"not {self.kind!r}; use fractions instead")
        else:
            total = sum(c.fraction for c in out)
            if abs(total - 1.0) > 1e-6:
                raise ConfigError(f"workload.classes: fractions must add up to 1, got {total:g}")
        return out

    @property
    def stage_duration(self) -> float:
        return sum(d for _, d in self.stages)

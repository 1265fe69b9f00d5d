"""guidellm's profiles (sweep, fixed rates, concurrent streams) with synthetic data, as a Workload.

Semantics read from guidellm 0.3 (`benchmark/profile.py`, `scheduler/strategy.py`,
`dataset/synthetic.py`, `utils/random.py`) and 0.4-0.7 (`benchmark/profiles.py`,
`scheduler/strategies.py`, `data/deserializers/synthetic.py`); what changed is selected by the
release the profile's `client.version` names (`fidelity.client_workload` fills it from the run's
report; unknown: the newer behaviour, `NEWER`). `GuidellmWorkload` states them.

A sweep's later rates are the rates its first benchmarks achieved; they come from the simulation
itself, so the whole sweep is simulated as guidellm would have driven the simulated server.
Importing this module registers `workload.kind = "guidellm"` with `sim.workload.registry` (a profile
file run by `guidellm_workload`). It loads no pandas: a run's measurements are read in
`fidelity.sources.guidellm_results`.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from policies import ConfigError, Request
from policies.config import check_int, check_number
from records.results import request_row
from fidelity.benchmark_stats import benchmark_stats
from fidelity.sources.inference_perf_profile import parse_version
from fidelity.synthetic_prompt import SyntheticPrompt
from sim.workload.concurrency import ConcurrencyCap
from sim.workload.registry import ProfileKind, register_kind


PREFIX_KEY = 7_000_000
NEWER = (0, 4)  # the release whose behaviour an unrecorded version is assumed to have (read through 0.7)


def guidellm_release(profile: dict) -> tuple[int, ...]:
    """(major, minor, patch) of the guidellm release the profile's `client.version` names (unknown:
    NEWER): a constant benchmark's rampup came in a patch release (0.5.3)."""
    client = profile.get("client") or {}
    version = client.get("version") if isinstance(client, dict) else None
    if version is None:
        return NEWER
    parsed = parse_version(version)
    if parsed is None:
        raise ConfigError(f"profile.client.version: {version!r} is not a release number (e.g. 0.6.0)")
    return parsed[:3]


RATE_TYPES = ("sweep", "synchronous", "throughput", "constant", "poisson", "concurrent")
# what a sweep runs after its throughput benchmark (`strategy-type`, constant by default): guidellm's
# SweepProfile.rate_type in 0.2-0.3 and .strategy_type in 0.4-0.6 (set from Python only: those CLIs
# build a constant sweep), `--profile kind=sweep,strategy_type=poisson` from 0.7
SWEEP_SUBSTRATEGIES = ("constant", "poisson")
# the requests in flight guidellm allows a benchmark where nothing else bounds it (its settings'
# `max_concurrency`): none before 0.4, 512 from 0.4, 10240 from 0.7
DEFAULT_MAX_CONCURRENCY = (((0, 0), None), ((0, 4), 512), ((0, 7), 10240))


def is_guidellm_profile(profile: dict | None) -> bool:
    """True for a guidellm profile (a `rate-type` and synthetic `data`), which `GuidellmWorkload` runs."""
    data = (profile or {}).get("data")
    return (isinstance(data, dict) and "prompt_tokens" in data
            and bool((profile or {}).get("rate-type") or (profile or {}).get("rate_type")))


def default_max_concurrency(release: tuple[int, ...]) -> int | None:
    """guidellm's own bound on requests in flight in `release` (`DEFAULT_MAX_CONCURRENCY`)."""
    return [cap for since, cap in DEFAULT_MAX_CONCURRENCY if release >= since][-1]


def rate_list(value, field: str = "profile.rate") -> list[float]:
    """guidellm's `--rate`: one number, a list, or comma-separated numbers ("1,2,4")."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",") if isinstance(value, str) else [value]
    try:
        rates = [float(v) for v in items]
    except (TypeError, ValueError):
        raise ConfigError(f"{field}: expected a positive number or a list of them, got {value!r}") from None
    if not rates or not all(r > 0 for r in rates):
        raise ConfigError(f"{field}: expected a positive number or a list of them, got {value!r}")
    return rates


def guidellm_prefixes(data: dict, release: tuple[int, ...]) -> list[tuple[int, int]]:
    """The shared prefixes a request draws one of, uniformly, as (prefix id, tokens), repeated by
    weight ([] without prefixes). `prefix_tokens` (and from 0.4 `prefix_count` of them), or from
    0.4 `prefix_buckets` (each `bucket_weight` (100), `prefix_count` (1), `prefix_tokens` (0)): each
    bucket's prefixes repeated so that the bucket's share of draws is its weight's, in the least
    integer ratio (guidellm's `_create_prefix_iter`)."""
    buckets = data.get("prefix_buckets") if release >= (0, 4) else None
    if buckets:
        if data.get("prefix_tokens") or data.get("prefix_count"):
            raise ConfigError("profile.data.prefix_buckets: goes without prefix_tokens and prefix_count "
                              "(guidellm refuses both)")
        if not isinstance(buckets, list) or not all(isinstance(b, dict) for b in buckets):
            raise ConfigError(f"profile.data.prefix_buckets: expected a list of mappings, got {buckets!r}")
        spec = []
        for b in buckets:
            w, c, t = b.get("bucket_weight", 100), b.get("prefix_count", 1), b.get("prefix_tokens", 0)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (w, c, t)) or w < 1 or c < 1 or t < 0:
                raise ConfigError(f"profile.data.prefix_buckets: expected bucket_weight >= 1, prefix_count >= 1 and "
                                  f"prefix_tokens >= 0 (integers), got {b!r}")
            spec.append((w, c, t))
    else:
        count = int(data.get("prefix_count") or 1) if release >= (0, 4) else 1
        if count < 1:
            raise ConfigError(f"profile.data.prefix_count: expected a positive integer, got {data.get('prefix_count')!r}")
        spec = [(100, count, int(data.get("prefix_tokens") or 0))]
    lcm = math.lcm(*(c for _, c, _ in spec))
    weights = [lcm * w // c for w, c, _ in spec]
    common = math.gcd(*weights)
    out, first = [], 0
    for (_, count, tokens), weight in zip(spec, weights):
        out.extend([(first + i, tokens) for i in range(count)] * (weight // common))
        first += count
    return out if any(tokens for _, tokens in out) else []


def check_lengths(data: dict) -> None:
    """Refuse synthetic lengths guidellm's samplers cannot draw from, naming the key: a mean prompt
    or output under 1 token (a negative one was drawn as 1 before, and 0 failed inside `random`), a
    negative spread, bounds under 1 or crossed. `prefix_tokens` >= 0."""
    for name in ("prompt_tokens", "output_tokens"):
        check_number(f"profile.data.{name}", data[name], 1)
        check_number(f"profile.data.{name}_stdev", data.get(f"{name}_stdev") or 0, 0)
        lo, hi = data.get(f"{name}_min"), data.get(f"{name}_max")
        for bound, value in (("min", lo), ("max", hi)):
            if value is not None:
                check_int(f"profile.data.{name}_{bound}", value, 1)
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"profile.data.{name}_min: {lo} is above {name}_max = {hi}")
    prefix = data.get("prefix_tokens")
    if prefix is not None:
        check_int("profile.data.prefix_tokens", prefix, 0)


class IntegerSampler:
    """guidellm's IntegerRangeSampler: gauss(mean, stdev) rounded and clipped (uniform if stdev is 0)."""

    def __init__(self, mean: float, stdev: float | None, lo: int | None, hi: int | None, seed: int) -> None:
        self.rng = random.Random(seed)
        self.mean, self.stdev = float(mean), float(stdev or 0)
        self.lo = lo if lo is not None else max(1, int(self.mean - 5 * self.stdev) if self.stdev else int(self.mean))
        self.hi = hi if hi is not None else (int(self.mean + 5 * self.stdev) if self.stdev else int(self.mean))

    def __call__(self) -> int:
        if self.lo == self.hi:
            return int(self.lo)
        if not self.stdev:
            return self.rng.randint(self.lo, self.hi)
        return int(round(max(self.lo, min(self.hi, self.rng.gauss(self.mean, self.stdev)))))


@dataclass
class Benchmark:
    """One benchmark's requests as guidellm's client measures them: TTFT and E2E from the send, ITL
    per output token (`records.results.request_row`'s definitions), requests per second over the
    benchmark's span (its first send to its last answer)."""

    strategy: str
    target: float | None  # req/s (constant, poisson), streams (concurrent); None otherwise
    start: float
    end: float = math.nan
    ttft: list = field(default_factory=list)
    itl: list = field(default_factory=list)
    itl_gaps: list = field(default_factory=list)  # each ITL's output tokens - 1 (its weight)
    e2e: list = field(default_factory=list)
    sends: list = field(default_factory=list)  # each successful request's send
    output_tokens: int = 0
    failed: int = 0

    def add(self, request: Request) -> None:
        row = request_row(request)
        if not math.isfinite(row["e2e_s"]):  # rejected, timed out: guidellm's errored
            self.failed += 1
            return
        self.sends.append(request.arrival_time)
        self.ttft.append(row["ttft_s"])
        self.e2e.append(row["e2e_s"])
        self.output_tokens += row["num_output_tokens"]
        if math.isfinite(row["tpot_s"]):
            self.itl.append(row["tpot_s"])
            self.itl_gaps.append(row["num_output_tokens"] - 1)

    def successful_rate(self, release: tuple[int, ...]) -> float:
        """The successful requests per second guidellm measured, which feeds a sweep's rates: from
        0.4 over the benchmark's span (`request_throughput.successful.mean`: the successes over its
        measured window); before, from the first successful send to the last successful answer
        (0.3's `requests_per_second.successful.mean`). Errored requests count in neither. (0.3
        counts answers that end within 1 us of the last as one; simulated answers that leave in
        one step would all end together, real ones do not, so they are counted each.)"""
        if not self.sends:
            return 0.0
        if release >= (0, 4):
            start, end = self.start, self.end
        else:
            start, end = min(self.sends), max(s + e for s, e in zip(self.sends, self.e2e))
        return len(self.sends) / max(end - start, 1e-9)

    def row(self, index: int) -> dict:
        stats = benchmark_stats(self.ttft, self.itl, self.e2e, self.output_tokens, self.end - self.start,
                                itl_gaps=self.itl_gaps)
        return {"benchmark": index, "strategy": self.strategy, "target": self.target,
                "requests": stats.pop("requests"), "failed": self.failed, **stats}


class GuidellmWorkload:
    """A guidellm profile (`rate-type`, `rate`, `max-requests`, `random-seed`, synthetic `data`).

    - `rate-type: sweep`, `rate: N`: N benchmarks of `max-requests` requests each, one after the
      other (the next starts when every request of the previous one has finished): `synchronous`
      (one request at a time), `throughput` (all at once), then N-2 `constant` ones at the rates
      `linspace(sync rate, throughput rate, N-1)[1:]`, the two rates being the requests per second
      the first two benchmarks achieved. A constant benchmark sends its k-th request k/rate after
      it starts (k from 1, 0.4 on); before 0.4 it first sent `floor(rate)` at once (its initial
      burst), then one every 1/rate from 1/rate after the start, and a poisson one opened with the
      same burst before its exponential gaps.
    - `strategy-type: poisson` (a sweep only; default constant): its benchmarks after the throughput
      one are poisson at those rates (guidellm's SweepProfile `rate_type` in 0.2-0.3,
      `strategy_type` from 0.4; `SWEEP_SUBSTRATEGIES`).
    - `rampup: T` seconds (0.4 on): a throughput benchmark spreads its first max-concurrency sends
      over T (the i-th at T i / max-concurrency), a concurrent one starts its streams over T, and
      (0.5.3 on) a constant one raises its rate linearly from 0 over T, as guidellm's strategies do;
      a sweep's constant benchmarks start at their full rate (its profile passes the rampup to its
      throughput benchmark only).
    - `rate-type: constant | poisson`, `rate: R` or a list of rates: one benchmark per rate;
      `concurrent`, `rate: N` or a list: one benchmark per stream count, each of N streams sending
      its next request when its last ends; `synchronous` and `throughput` run that one benchmark
      (from 0.4 a throughput `rate` is its bound on requests in flight).
    - At most `max-concurrency` requests in flight (a due request waits for a slot: guidellm's
      worker limit), by default guidellm's own setting in the release (`DEFAULT_MAX_CONCURRENCY`);
      `guidellm_workload` applies it (`sim.workload.concurrency.ConcurrencyCap`).
    - Data: every prompt is the `prefix_tokens` shared prefix followed by `gauss(prompt_tokens,
      prompt_tokens_stdev)` tokens, rounded and clipped to [prompt_tokens_min, prompt_tokens_max]
      (unset bounds: mean -/+ 5 stdev, at least 1); outputs likewise with the `output_tokens_*`
      keys. From 0.4 `prefix_count` such prefixes (default 1) are made and each request draws one,
      or `prefix_buckets` of them (`guidellm_prefixes`).
      0.6's multi-turn rows (`turns` > 1) are refused (not modelled).
    """

    def __init__(self, profile: dict, seed: int | None = None) -> None:
        rate_type = profile.get("rate-type", profile.get("rate_type"))
        if rate_type not in RATE_TYPES:
            raise ConfigError(f"profile.rate-type: {rate_type!r} is not allowed; choose one of {', '.join(RATE_TYPES)}")
        data = profile.get("data")
        if not isinstance(data, dict) or "prompt_tokens" not in data or "output_tokens" not in data:
            raise ConfigError("profile.data: expected guidellm synthetic data with prompt_tokens and output_tokens")
        self.max_requests = int(profile.get("max-requests") or profile.get("max_requests") or 0)
        if self.max_requests < 1:
            raise ConfigError("profile.max-requests: expected a positive integer (requests per benchmark)")
        rate = profile.get("rate")
        key = "strategy-type" if "strategy-type" in profile else "strategy_type"
        strategy = profile.get(key)
        if strategy is not None and rate_type != "sweep":
            raise ConfigError(f"profile.{key}: only a sweep takes one (its benchmarks after the throughput one); "
                              f"rate-type is {rate_type!r}")
        if strategy not in (None, *SWEEP_SUBSTRATEGIES):
            raise ConfigError(f"profile.{key}: {strategy!r} is not allowed; choose one of "
                              f"{', '.join(SWEEP_SUBSTRATEGIES)}")
        if rate_type == "sweep":
            size = int(rate_list(rate)[0]) if rate is not None else 10  # guidellm's default sweep size
            if size < 2:
                raise ConfigError(f"profile.rate: a sweep needs at least 2 benchmarks, got {rate!r}")
            self.phases = ["synchronous", "throughput"] + [strategy or "constant"] * (size - 2)
            self.rates: list[float | None] = [None] * size  # the constant rates come from the first two
        elif rate_type in ("constant", "poisson", "concurrent"):
            self.rates = list(rate_list(rate))
            self.phases = [rate_type] * len(self.rates)
            if rate_type == "concurrent" and not all(r == int(r) for r in self.rates):
                raise ConfigError(f"profile.rate: concurrent takes whole stream counts, got {rate!r}")
        else:
            self.phases, self.rates = [rate_type], [None]
        s = int(profile.get("random-seed", profile.get("random_seed", 42)) if seed is None else seed)
        release = guidellm_release(profile)
        self.release = release
        self.initial_burst = release < (0, 4)
        rampup = profile.get("rampup", 0.0) or 0.0
        if isinstance(rampup, bool) or not isinstance(rampup, (int, float)) or not 0 <= rampup < math.inf:
            raise ConfigError(f"profile.rampup: expected seconds >= 0, got {rampup!r}")
        self.rampup = float(rampup) if release >= (0, 4) else 0.0
        self._constant_rampup = self.rampup if release >= (0, 5, 3) else 0.0
        cap = profile.get("max-concurrency", profile.get("max_concurrency"))
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigError(f"profile.max-concurrency: expected a positive integer, got {cap!r}")
        if cap is None and rate_type == "throughput" and rate and release >= (0, 4):
            cap = int(rate_list(rate)[0])  # from 0.4 a throughput profile's rate is its max_concurrency
        self.max_concurrency = cap if cap is not None else default_max_concurrency(release)
        self.prefixes = guidellm_prefixes(data, release)
        if int(data.get("turns") or 1) != 1:
            raise ConfigError(f"profile.data.turns: guidellm's multi-turn rows are not modelled; allowed 1, "
                              f"got {data.get('turns')!r}")
        check_lengths(data)
        self._prefix_rng = random.Random(s + 3)
        self.prompt = IntegerSampler(data["prompt_tokens"], data.get("prompt_tokens_stdev"),
                                     data.get("prompt_tokens_min"), data.get("prompt_tokens_max"), s)
        self.output = IntegerSampler(data["output_tokens"], data.get("output_tokens_stdev"),
                                     data.get("output_tokens_min"), data.get("output_tokens_max"), s + 1)
        self._rng = np.random.default_rng(s)
        self.benchmarks: list[Benchmark] = []  # as the client measured each (`benchmark_rows`)
        self._phase = -1
        self._count = 0
        self._sent = 0
        self._left = 0

    @property
    def mean_prefix_tokens(self) -> float:
        """The shared prefix a request carries, on average over the draws."""
        return sum(t for _, t in self.prefixes) / len(self.prefixes) if self.prefixes else 0.0

    @property
    def measured_rates(self) -> list[float]:
        """Successful requests per second each finished benchmark achieved: what guidellm feeds a
        sweep's rates (`Benchmark.successful_rate`)."""
        return [b.successful_rate(self.release) for b in self.benchmarks if not math.isnan(b.end)]

    @property
    def num_requests(self) -> int:
        return self.max_requests * len(self.phases)

    def start(self) -> list[Request]:
        return self._begin(0, 0.0)

    def benchmark_rows(self) -> list[dict]:
        """One row per benchmark run so far, as guidellm's report gives its figures."""
        return [b.row(k) for k, b in enumerate(self.benchmarks)]

    def on_finish(self, request: Request, now: float) -> list[Request]:
        if request.tags.get("phase") != self._phase:
            return []
        self.benchmarks[self._phase].add(request)
        self._left -= 1
        out: list[Request] = []
        if self.phases[self._phase] in ("synchronous", "concurrent") and self._sent < self.max_requests:
            out.append(self._request(now))  # the stream that just ended sends its next request
        if self._left == 0 and self._sent >= self.max_requests:
            self.benchmarks[self._phase].end = now  # its rate feeds the next ones' (`measured_rates`)
            if self._phase + 1 < len(self.phases) and self.rates[self._phase + 1] is None \
                    and self.phases[self._phase + 1] != "throughput" and not self._rate(self._phase + 1) > 0:
                # nothing succeeded in the first two: guidellm stops the sweep (0.4-0.7 `SweepProfile`
                # returns no next strategy for a rate <= 0; 0.3 fails on it)
                del self.phases[self._phase + 1:]
            if self._phase + 1 < len(self.phases):
                out.extend(self._begin(self._phase + 1, now))
        return out

    def _rate(self, k: int) -> float:
        if self.rates[k] is not None:
            return float(self.rates[k])
        size = len(self.phases)  # a sweep's constant benchmarks: between its first two's rates
        rates = np.linspace(self.measured_rates[0], self.measured_rates[1], size - 1)[1:]
        return float(rates[k - 2])

    def _begin(self, k: int, t0: float) -> list[Request]:
        self._phase, self._sent, self._left = k, 0, self.max_requests
        kind = self.phases[k]
        n = self.max_requests
        target = self._rate(k) if kind in ("constant", "poisson") else self.rates[k]
        self.benchmarks.append(Benchmark(kind, target, t0))
        if kind == "synchronous":
            return [self._request(t0)]
        index = np.arange(1, n + 1)  # guidellm's request index, from 1
        if kind == "throughput":
            cap = self.max_concurrency
            spread = self.rampup * np.minimum(index / cap, 1.0) if self.rampup and cap else np.zeros(n)
            return [self._request(t0 + float(d)) for d in spread]
        if kind == "concurrent":
            streams = min(n, int(self.rates[k]))
            return [self._request(t0 + (self.rampup * i / streams if i < streams else 0.0))
                    for i in range(1, streams + 1)]
        rate = target
        # before 0.4 both open with floor(rate) sends at once (0.3 tests `initial_burst is not None`
        # on a bool, so always), then go on from the start: constant one every 1/rate from 1/rate
        # (even with no burst), poisson by exponential gaps
        burst = min(n, math.floor(rate)) if self.initial_burst else 0
        if kind == "poisson":
            times = np.concatenate([np.full(burst, t0), t0 + np.cumsum(self._rng.exponential(1.0 / rate, n - burst))])
        elif self.initial_burst:
            times = np.concatenate([np.full(burst, t0), t0 + np.arange(1, n - burst + 1) / rate])
        elif self._constant_rampup and self.rates[k] is not None:  # a sweep's start at their full rate
            # the rate rises linearly over the rampup: n(t) = rate t^2 / 2T
            ramp = self._constant_rampup
            n_ramp = rate * ramp / 2.0
            times = t0 + np.where(index == 1, 0.0, np.where(index <= n_ramp, np.sqrt(2.0 * index * ramp / rate),
                                                            ramp + (index - n_ramp) / rate))
        else:  # the k-th request k/rate after the start
            times = t0 + index / rate
        return [self._request(float(t)) for t in times]

    def _request(self, arrival: float) -> Request:
        self._sent += 1
        self._count += 1
        n_own = self.prompt()
        prefix, n_prefix = (self._prefix_rng.choice(self.prefixes) if len(self.prefixes) > 1
                            else self.prefixes[0] if self.prefixes else (0, 0))
        segments = [(PREFIX_KEY + prefix, n_prefix)] if n_prefix else []
        segments.append((self._count, n_own))
        tokens = SyntheticPrompt(segments)
        return Request(f"b{self._phase}-{self._sent - 1}", arrival, len(tokens), max(1, self.output()),
                       prompt_token_ids=tokens, ignore_eos=True,
                       tags={"phase": self._phase, "strategy": self.phases[self._phase]})


def guidellm_workload(profile: dict, seed: int | None = None):
    """The profile's requests as guidellm sends them: `GuidellmWorkload` under the bound on requests
    in flight its release (or the profile's `max-concurrency`) keeps."""
    workload = GuidellmWorkload(profile, seed)
    return ConcurrencyCap(workload, workload.max_concurrency) if workload.max_concurrency else workload


def _build(profile: dict, seed: int):
    """`workload.kind = "guidellm"`: the profile's own `random-seed` where it names one, else the config's."""
    own = profile.get("random-seed", profile.get("random_seed"))
    return guidellm_workload(profile, None if own is not None else seed)


WORKLOAD_KIND = ProfileKind(name="guidellm", check=GuidellmWorkload, build=_build,
                            needs="a guidellm profile YAML/JSON (rate-type, rate, max-requests, synthetic data)")
register_kind(WORKLOAD_KIND)

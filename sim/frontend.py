"""The serving front end: what a request pays between the client and the scheduler, and back.

A real server does not hand a request to its scheduler the instant a client sends it (HTTP stack,
tokenizing, the engine thread woken at its next step boundary), nor do the client's tokens appear
the instant a step ends (thread hop, detokenizing, server-sent event, socket, client parse).
`FrontendConfig` (the `[frontend]` section) models both as explicit delays, measured from the real
stack by `servesim serve CONFIG --calibrate-frontend OUT.json` (`calibrate.frontend`):

    ingress_s(request) = request_overhead_s + tokenize_s_per_token * num_prompt_tokens
    egress_s           = stream_overhead_s           (per streamed chunk, i.e. per output token)
    step_time(plan)   += engine_s_per_step + engine_s_per_output * outputs   (steps that stream)

So TTFT and E2E grow by ingress + egress, TPOT and ITL do not (every token moves by the same delay).
Not modelled: queueing between concurrent requests on the single event loop, and chunks the
detokenizer holds back. All terms default to zero: the front end is off, results as before.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from policies import ConfigError, FinishReason
from policies.config import check_number
from records.files import read_json_object
from sim.latency.base import LatencyModel, step_parts

PROFILE_FORMAT = "servesim-frontend"


@dataclass(frozen=True)
class FrontendConfig:
    """Front-end delays in seconds (all zero = off): ingress before the scheduler, egress per token.

    The simulator (`sim.arrivals.Arrivals`) keeps `arrival_time` as the client's send time, submits
    the request to the scheduler `ingress_s` later, and, when the request ends, moves its token
    times (and finish time) `egress_s` later (`deliver`): what the client sees. The engine thread
    does pay a little per streamed output: the server's callback that hands each output to the event
    loop runs on it, and the event loop's per-chunk work (detokenizing, formatting, writing) holds
    the interpreter lock the engine's own Python needs. The calibration measures that as the
    lengthening of the engine's token interval when it streams over HTTP against the same requests
    added to it directly, at one and at k outputs per step (k concurrent streams), and fits it as a
    per-step part (the event loop woken and taking the interpreter lock once for the step's batch
    of outputs: `engine_s_per_step`) plus a per-output part (the callback, each chunk's formatting:
    `engine_s_per_output`); `charge` wraps the latency model (`OutputChargedLatency`) to charge both
    in every step that streams, nothing in one that streams none. The ingress and egress terms are a
    lone request's cost.
    """

    request_overhead_s: float = 0.0  # client send -> request in the engine's ingress, for an empty prompt
    tokenize_s_per_token: float = 0.0  # ingress per prompt token (tokenizing it, reading its bytes)
    stream_overhead_s: float = 0.0  # a step's output -> the client has the token's chunk
    engine_s_per_output: float = 0.0  # added to a step per output token it streams (engine-thread share)
    engine_s_per_step: float = 0.0  # added once to a step that streams at least one output (engine-thread share)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            check_number(f"frontend.{f.name}", value, 0.0)  # NaN and infinity refused there

    @property
    def enabled(self) -> bool:
        return bool(self.request_overhead_s or self.tokenize_s_per_token or self.stream_overhead_s
                    or self.engine_s_per_output or self.engine_s_per_step)

    def ingress_s(self, num_prompt_tokens: int) -> float:
        """Seconds from the client's send to the request reaching the scheduler."""
        return self.request_overhead_s + self.tokenize_s_per_token * num_prompt_tokens

    @property
    def egress_s(self) -> float:
        """Seconds from the end of the step that made a token to the client having it."""
        return self.stream_overhead_s

    def deliver(self, request) -> None:
        """Move an ended request's token and finish times to when its client sees them.

        Call once, when the request ends (its times are final then). Every token moves by the same
        delay, so gaps between tokens (TPOT, ITL) are unchanged.
        """
        delay = self.egress_s
        if not delay:
            return
        if request.token_times:
            request.token_times = [t + delay for t in request.token_times]
        if request.first_token_time is not None:
            request.first_token_time += delay
        if request.finish_time is not None and request.finish_reason is not FinishReason.TIMED_OUT:
            request.finish_time += delay  # a timed-out one's is its client's deadline already

    def split_ttft_parts(self, parts: dict | None) -> dict | None:
        """A summary's `ttft_parts` (`records.metrics.ttft_parts_of_sums`: the request times alone)
        with this front end's ingress moved from the engine queue to the API server and its egress
        from the prefill steps to the first chunk (they still sum to the mean TTFT)."""
        if parts is None or not self.enabled:
            return parts
        ingress = self.ingress_s(parts["mean_prompt_tokens"])
        return {**parts, "api_server_s": parts["api_server_s"] + ingress,
                "engine_queue_s": parts["engine_queue_s"] - ingress,
                "prefill_steps_s": parts["prefill_steps_s"] - self.egress_s,
                "first_chunk_s": parts["first_chunk_s"] + self.egress_s}

    def charge(self, latency_model):
        """`latency_model`, plus `engine_s_per_step` and `engine_s_per_output` per output of each step
        that streams one (itself when both are 0)."""
        if not (self.engine_s_per_output or self.engine_s_per_step):
            return latency_model
        pure = isinstance(latency_model, LatencyModel) and latency_model.is_pure()
        return (PureOutputChargedLatency if pure else OutputChargedLatency)(latency_model, self.engine_s_per_output,
                                                                            self.engine_s_per_step)

    @classmethod
    def from_profile(cls, path: str | Path) -> "FrontendConfig":
        """The terms of a front-end profile file (written by `servesim serve --calibrate-frontend`)."""
        data = read_json_object(path, "frontend profile")
        if data.get("format") != PROFILE_FORMAT:
            raise ConfigError(f"frontend profile: {path} is not a {PROFILE_FORMAT!r} file")
        terms = data.get("frontend")
        allowed = [f.name for f in fields(cls)]
        if not isinstance(terms, dict):
            raise ConfigError(f"frontend profile: {path} has no 'frontend' table of {', '.join(allowed)}")
        unknown = [k for k in terms if k not in allowed]
        if unknown:
            raise ConfigError(f"frontend.{unknown[0]}: unknown key in {path}; allowed keys: {', '.join(allowed)}")
        return cls(**terms)

    def to_toml(self) -> str:
        """The `[frontend]` section holding these terms (to paste into a config)."""
        return "[frontend]\n" + "".join(f"{f.name} = {getattr(self, f.name)!r}\n" for f in fields(self))


def num_outputs(plan) -> int:
    """Output tokens a step produces: its sampling, non-padding sequences."""
    return plan.totals.num_outputs


class OutputChargedLatency(LatencyModel):
    """A latency model whose every step costs `s_per_output` more per output token it produces, and
    `s_per_step` more once when it produces at least one.

    Everything else is the inner model's (attributes are forwarded), except what it tells the
    simulator's fast path: `LatencyModel`'s defaults, so steps go one by one
    (`PureOutputChargedLatency` keeps the decode fast path for an inner model whose step time
    depends on the plan alone).
    """

    def __init__(self, inner, s_per_output: float, s_per_step: float = 0.0) -> None:
        self.inner = inner
        self.s_per_output = s_per_output
        self.s_per_step = s_per_step

    def step_time(self, plan) -> float:
        outputs = num_outputs(plan)
        # a step that streams nothing (a prefill chunk short of the prompt's end) wakes no event loop
        return self.inner.step_time(plan) + (self.s_per_step + self.s_per_output * outputs if outputs else 0.0)

    def breakdown(self, plan) -> dict[str, float]:
        """The inner model's parts (`step_parts`) and `output`, this charge (a host part)."""
        outputs = num_outputs(plan)
        return {**step_parts(self.inner, plan),
                "output": self.s_per_step + self.s_per_output * outputs if outputs else 0.0}

    def __getattr__(self, name):
        return getattr(self.inner, name)


class PureOutputChargedLatency(OutputChargedLatency):
    """`OutputChargedLatency` over a model whose step time depends on the plan alone: so is this one's,
    and the simulator may replay decode stretches with it (`sim.decode_replay`)."""

    def is_pure(self) -> bool:
        return True

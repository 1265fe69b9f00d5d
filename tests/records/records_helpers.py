"""Factory helpers for the records tests: requests driven by hand through their lifecycle."""
from __future__ import annotations

from policies import FinishReason, Request, RequestState


def make_done_request(req_id, arrival: float, token_times: list[float], prompt: int = 10,
                      queue_s: float = 0.0, **tags) -> Request:
    """A request driven by hand through its lifecycle, emitting tokens at `token_times`."""
    r = Request(req_id, arrival, prompt, len(token_times), tags=dict(tags) or None)
    r.transition(RequestState.RUNNING_CTX)
    r.first_scheduled_time = arrival + queue_s
    r.num_computed_tokens = prompt
    for t in token_times:
        r.record_token(0, t)
    r.transition(RequestState.RUNNING_GEN)
    r.finish(FinishReason.LENGTH, token_times[-1])
    return r


def make_rejected_request(req_id, arrival: float, prompt: int = 10) -> Request:
    r = Request(req_id, arrival, prompt, 5)
    r.finish(FinishReason.REJECTED, arrival, "prompt longer than scheduler.max_model_len")
    return r

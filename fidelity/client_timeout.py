"""The request timeout of a run's benchmark client, read from the client's own profile and source.

A client that gives up on a slow request records it as a failure and leaves it out of its latency
means; the engine aborts it when the connection closes. In an overloaded run that decides which
requests the means are over, so a prediction must give up where the client did
(`workload.request_timeout_s`, `sim.replica.Replica`).

- inference-perf: `load.request_timeout` seconds (since b81afa4, 2025-10-15); when null (or in
  releases before it) the client passes no timeout and aiohttp's session default applies,
  `ClientTimeout(total=300)` (`aiohttp.client.DEFAULT_TIMEOUT`): the whole request, stream included.
- other clients (guidellm, vLLM's bench, DistServe's, LLMServingSim's offline engine): no timeout
  is modelled, and `client_timeout` says so. guidellm's `request_timeout` (300 s by default) is an
  httpx timeout per read, not per request: a stream that keeps sending never hits it, so it is not
  a deadline from the send.
"""
from __future__ import annotations

import pandas as pd

from fidelity.runs import RealRun
from policies import FinishReason

AIOHTTP_DEFAULT_TOTAL_S = 300.0  # aiohttp's DEFAULT_TIMEOUT: ClientTimeout(total=5 * 60, sock_connect=30)


def is_inference_perf(run: RealRun) -> bool:
    """The run's client is inference-perf: its measurement files, or a profile of its schema."""
    profile = run.profile or {}
    return run.measured_by.startswith("inference-perf") or (
        isinstance(profile.get("load"), dict) and isinstance(profile.get("server"), dict)
        and isinstance(profile.get("data"), dict))


def client_timeout(run: RealRun) -> tuple[float | None, str]:
    """(seconds after sending that the client gives up on a request, or None; where that comes from)."""
    if not is_inference_perf(run):
        return None, f"no client timeout modelled ({run.measured_by or 'unknown client'})"
    value = (run.profile.get("load") or {}).get("request_timeout")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"run {run.name}: load.request_timeout: expected seconds > 0 or null, got {value!r}")
        return float(value), f"inference-perf load.request_timeout = {float(value):g} s"
    return AIOHTTP_DEFAULT_TOTAL_S, ("inference-perf load.request_timeout null: aiohttp's default "
                                     f"ClientTimeout(total={AIOHTTP_DEFAULT_TOTAL_S:g} s)")


def served_row(prediction) -> dict:
    """One run's requests by how they ended, measured (the client's counts, where it has them) and
    predicted: nothing is lost, and a run whose client gave up on requests shows whether the
    prediction gives up on as many."""
    run, req = prediction.run, prediction.requests
    reasons = req["finish_reason"].astype(str) if "finish_reason" in req else None
    timeout, origin = client_timeout(run)
    summary = run.summary or {}

    def count(*reasons_of: FinishReason) -> int:
        return int(reasons.isin([r.value for r in reasons_of]).sum()) if reasons is not None else 0

    done = (FinishReason.STOP, FinishReason.LENGTH)
    rejected = req.loc[reasons == FinishReason.REJECTED.value, "reject_reason"] \
        if reasons is not None and "reject_reason" in req else ()
    why = str(pd.Series(rejected).mode().iloc[0]) if len(rejected) else ""
    return {"run": run.name, "source": run.source, "client_timeout_s": timeout, "timeout_origin": origin,
            "measured_successes": summary.get("num_successes", float(len(run.requests)) if len(run.requests) else None),
            "measured_failures": summary.get("num_failures"),
            "predicted_requests": len(req), "predicted_finished": count(*done),
            "predicted_timed_out": count(FinishReason.TIMED_OUT), "predicted_rejected": count(FinishReason.REJECTED),
            "predicted_other": len(req) - count(*done, FinishReason.TIMED_OUT, FinishReason.REJECTED),
            "predicted_reject_reason": why}  # the commonest, of those rejected


def served_line(row: dict) -> str | None:
    """The CLI line of a `served_row` whose client gave up on requests, measured or predicted, or
    whose simulated engine rejected some (a real server served them, or the run would say so); else None."""
    failed, rejected = row["measured_failures"], row.get("predicted_rejected") or 0
    parts = []
    if failed or row["predicted_timed_out"]:
        measured = "" if failed is None else \
            f"measured {int(failed)} failed of {int(failed + (row['measured_successes'] or 0))}, "
        timeout = row["client_timeout_s"]
        said = f"client timeout {timeout:g} s" if timeout is not None else row["timeout_origin"]
        parts.append(f"{said}: {measured}predicted {row['predicted_timed_out']} timed out of {row['predicted_requests']}")
    if rejected:  # never served in the simulation: over max_model_len, or more KV than the pool holds
        why = row.get("predicted_reject_reason")
        parts.append(f"predicted {rejected} rejected of {row['predicted_requests']}" + (f" (most: {why})" if why else ""))
    return f"{row['run']}: " + "; ".join(parts) if parts else None

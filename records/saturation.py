"""Whether a run kept up with its offered load: queues that grow through the run, said out loud.

In a stable system the time a request waits for its first token does not depend on when it
arrived. When the offered rate lambda exceeds the rate mu the configuration sustains, the backlog
grows at lambda - mu, so the wait grows with the arrival time at a slope of 1 - mu / lambda. The
check fits that slope (least squares of the wait on the arrival time, the first tenth of the run
left out as warm-up), calls the run saturated when the backlog grows by more than `MIN_SLOPE` of
the elapsed time and the last fifth of arrivals waits longer than the first fifth by more than
`MIN_GROWTH_S`, or when a run cut short by a time limit left more than `MAX_LEFT_BEHIND` of its
requests without a first token. While the backlog lasts the server hands out first tokens at the
rate it sustains, so mu is estimated as the rate of first tokens from the end of the warm-up to
the last one. Latency figures of a saturated run describe a transient that depends on
the run's length, not a steady state: reports label them.

Under a priority queue each priority level is a queue of its own: the higher level is served
first at every step, so a lower level's backlog can grow without bound while the requests of the
higher level (the median request, when they are the majority) wait no longer than at a light load.
Given each request's priority, the growth test is applied to each level as well, and the run is
saturated when any level's wait grows.
"""
from __future__ import annotations

import numpy as np

MIN_SLOPE = 0.05  # backlog growth, as a fraction of elapsed time, beyond which the queue is growing
MIN_GROWTH_S = 1.0  # the last fifth must wait this much longer than the first (seconds): not noise
MIN_REQUESTS = 20  # fewer requests than this: too few to tell a trend
MAX_LEFT_BEHIND = 0.1  # a larger share of requests without a first token at the end: a backlog


def _grows(x: np.ndarray, y: np.ndarray) -> tuple[bool, float | None]:
    """(whether the waits `y` grow with the arrival times `x`, the fitted slope; None: too few)."""
    if x.size < MIN_REQUESTS or np.ptp(x) <= 0:
        return False, None
    slope = float(np.polyfit(x, y, 1)[0])
    fifth = max(1, x.size // 5)
    return slope > MIN_SLOPE and float(np.median(y[-fifth:]) - np.median(y[:fifth])) > MIN_GROWTH_S, slope


def saturation(arrival_s: np.ndarray, first_token_s: np.ndarray, end_s: float,
               priority: np.ndarray | None = None) -> dict:
    """{"saturated", "offered_rate_per_s", "sustainable_rate_per_s", "backlog_growth"} of one run.

    `first_token_s` is NaN for requests that never produced a token (rejected requests are left
    out by the caller: they never queued); `end_s` is when the run ended. `priority`: each
    request's priority, whose levels are tested one by one too (None: one queue).
    `sustainable_rate_per_s` is None unless saturated (the run then shows only that the
    configuration sustains at least the offered rate). `backlog_growth` is the slope over all
    requests.
    """
    arrival = np.asarray(arrival_s, dtype=float)
    first = np.asarray(first_token_s, dtype=float)
    out = {"saturated": False, "offered_rate_per_s": None, "sustainable_rate_per_s": None, "backlog_growth": None}
    if arrival.size < MIN_REQUESTS:
        return out
    order = np.argsort(arrival, kind="stable")
    arrival, first = arrival[order], first[order]
    level = None if priority is None else np.asarray(priority)[order]
    span = float(arrival[-1] - arrival[0])
    if span <= 0:
        return out
    offered = (arrival.size - 1) / span
    out["offered_rate_per_s"] = offered
    served_mask = np.isfinite(first)
    left_behind = 1.0 - served_mask.mean()
    keep = served_mask & (arrival >= arrival[0] + 0.1 * span)
    x, y = arrival[keep], first[keep] - arrival[keep]
    growing, out["backlog_growth"] = _grows(x, y)
    if level is not None and not growing:
        levels = level[keep]
        growing = any(_grows(x[levels == value], y[levels == value])[0] for value in np.unique(levels))
    if growing or left_behind > MAX_LEFT_BEHIND:
        out["saturated"] = True
        served = np.sort(first[np.isfinite(first)])
        warm = arrival[0] + 0.1 * span
        served = served[served >= warm]
        if served.size >= 2 and served[-1] > warm:
            out["sustainable_rate_per_s"] = float((served.size - 1) / (served[-1] - warm))
    return out

"""`Arrivals`: a run's requests, fed to a replica (or a router) at their arrival times.

The workload's requests reach `submit` when they arrive; whenever a request ends the workload is
asked for its follow-ups (closed-loop users, multi-turn chat). With a `[frontend]` section
(`sim.frontend.FrontendConfig`) it also plays the HTTP front end: a request reaches the scheduler
its ingress delay after its arrival, and its tokens reach the client the egress delay after the
steps that made them. One type for a single replica and for a cluster.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable

import simpy

from policies import Request
from sim.frontend import FrontendConfig

if TYPE_CHECKING:  # tqdm on demand (sim.build.progress_bar): a run without a bar never imports it
    from tqdm import tqdm


class Arrivals:
    """Feeds requests to `submit` at their arrival times; asks the workload for follow-ups on finish.

    Reusable behind a router: `submit` may be any callable taking a Request (a replica's or a
    router's). Register `on_finish` as every replica's finish hook. With an enabled `frontend`
    (`sim.frontend.FrontendConfig`), each request is submitted its ingress delay after its arrival,
    and an ended request's token times move to when its client sees them (before the workload
    hears of the end, at that later time).
    """

    def __init__(self, env: simpy.Environment, workload, submit: Callable[[Request], None],
                 frontend: FrontendConfig | None = None) -> None:
        self.env = env
        self.workload = workload
        self.submit = submit
        self.frontend = frontend if frontend is not None and frontend.enabled else None
        self.num_generated = 0  # requests known so far (initial + follow-ups)
        self.num_ended = 0
        self.progress: "tqdm | None" = None
        self._due: deque[Request] = deque()  # follow-ups due now, waiting for the submit in progress
        self._submitting = False
        # with a front end: the start's requests (sorted by reach time) and how many were submitted,
        # and the follow-ups on their way (`sent_unsubmitted`)
        self._feeding: list[Request] | None = None
        self._fed = 0
        self._moving: dict[int | str, Request] = {}

    def start(self) -> None:
        # an open-loop workload's requests one at a time, in arrival order (`Workload.stream`):
        # made as they arrive, they never all wait in memory; with a front end, the order of reach
        # times may differ from arrivals', so those are sorted up front
        stream = getattr(self.workload, "stream", None) if self.frontend is None else None
        streamed = stream() if stream is not None else None
        if streamed is not None:
            count, requests = streamed
        else:
            requests = sorted(self.workload.start(), key=self.reach_time)
            count = len(requests)
        self.num_generated += count
        self.feeding = self.env.process(self._feed(requests))

    def done(self) -> bool:
        """Nothing more to send and every request sent has ended (follow-ups included)."""
        feeding = getattr(self, "feeding", None)
        return feeding is not None and not feeding.is_alive and self.num_ended >= self.num_generated

    def reach_time(self, request: Request) -> float:
        """When the request reaches the scheduler: its arrival, plus the front end's ingress if any."""
        if self.frontend is None:
            return request.arrival_time
        return request.arrival_time + self.frontend.ingress_s(request.num_prompt_tokens)

    def _feed(self, requests: list[Request]):
        env, submit, reach_time = self.env, self.submit, self.reach_time
        self._feeding = requests if self.frontend is not None else None  # a list, sorted by reach time
        for request in requests:
            delay = reach_time(request) - env.now
            if delay > 0:
                self._submit_due()  # follow-ups sent at this instant, after everything fed at it
                yield env.timeout(delay)
            # a follow-up due now of a request that ends inside this submit (rejected, say: a closed
            # loop's next turn at think time 0) was sent after it, so after every request sent at the
            # same instant: it waits in `_due` until those are fed (FIFO by send, as a real client's
            # sends at one instant all go out before any answer comes back, and as the engine's replay
            # orders ties)
            self._submitting = True
            try:
                submit(request)
            finally:
                self._submitting = False
            self._fed += 1
        self._submit_due()

    def schedule(self, request: Request) -> None:
        """Submit a follow-up at its arrival time (now if that has passed)."""
        self.num_generated += 1
        if self.progress is not None:
            self.progress.total = self.num_generated
        delay = self.reach_time(request) - self.env.now
        if delay > 0:
            if self.frontend is not None:  # sent (perhaps), not yet through the front end
                self._moving[request.req_id] = request
            self.env.timeout(delay).callbacks.append(lambda _event, r=request: self._submit_moved(r))
            return
        # now, before the replica plans its next step; but a follow-up of a request that ends inside
        # `submit` (rejected, say) waits for that call to return, so that a closed loop whose every
        # request is rejected submits them one after another, not one stack frame deeper each
        self._due.append(request)
        if not self._submitting:
            self._submit_due()

    def _submit_due(self) -> None:
        """Submit the follow-ups due now, in the order they were sent (and theirs, if they end at once)."""
        if self._submitting or not self._due:
            return
        self._submitting = True
        try:
            while self._due:
                self.submit(self._due.popleft())
        finally:
            self._submitting = False

    def _submit_moved(self, request: Request) -> None:
        self._moving.pop(request.req_id, None)
        self.submit(request)

    def sent_unsubmitted(self, limit: float) -> list[Request]:
        """Requests their client sent before `limit` that had not reached `submit` when the run
        stopped there: a front end's ingress was carrying them. They belong in the results (cut off
        by the limit, as the requests the scheduler held); those due at or after it do not."""
        out = [r for r in self._moving.values() if r.arrival_time < limit]
        if self._feeding is not None:
            out += [r for r in self._feeding[self._fed:] if r.arrival_time < limit]
        return out

    def on_finish(self, request: Request, now: float) -> None:
        if self.frontend is not None:  # the client sees the end (and every token) egress_s later
            self.frontend.deliver(request)
            now += self.frontend.egress_s
        self.num_ended += 1
        if self.progress is not None:
            self.progress.update(1)
        for follow_up in self.workload.on_finish(request, now):
            self.schedule(follow_up)

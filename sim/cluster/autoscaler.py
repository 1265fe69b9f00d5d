"""Autoscaling: replicas added as a load metric rises and drained away as it falls.

Every `interval_s` the autoscaler reads one metric over the serving replicas and wants
ceil(serving x metric / target) replicas (Kubernetes' horizontal-pod-autoscaler rule, with its 10%
tolerance), within [min_replicas, max_replicas]. Metrics: `queue` (requests waiting per replica),
`kv_usage` (mean KV-cache usage, 0-1) and `ttft_p90` (seconds: the 90th percentile wait for a first
token over the last interval, requests still waiting counted with their wait so far). A new replica
serves only once its model has loaded: `provisioning_delay_s`, or its weights per GPU over
`load_bandwidth_gbps`; it costs GPU-hours from the moment it is asked for. Scaling down takes the
least-loaded replicas out of the router and removes each once it has drained (every request it holds
has ended); a draining replica is taken back before a new one is provisioned. A scale-down acts on
the largest count wanted over the last `scale_down_stabilization_s`, so a lull does not shed
capacity a burst will want back at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from policies import ConfigError
from policies.config import check_choice, check_int, check_number

METRICS = ("queue", "kv_usage", "ttft_p90")
DEFAULT_TARGETS = {"queue": 4.0, "kv_usage": 0.8, "ttft_p90": 1.0}
TOLERANCE = 0.1  # no change while the metric is within 10% of its target (as the HPA does)


@dataclass(frozen=True)
class AutoscalingConfig:
    """The `[autoscaling]` section (off unless `enabled`); `target` defaults per metric."""

    enabled: bool = False
    min_replicas: int = 1
    max_replicas: int = 4
    initial_replicas: int | None = None  # replicas serving at the start (default: min_replicas)
    metric: str = "queue"
    target: float | None = None  # queue: 4 waiting per replica, kv_usage: 0.8, ttft_p90: 1.0 s
    interval_s: float = 10.0
    provisioning_delay_s: float | None = None  # None: weights per GPU / load_bandwidth_gbps
    load_bandwidth_gbps: float = 5.0  # GB/s a new replica's GPU loads its weights at (local NVMe)
    scale_down_stabilization_s: float | None = None  # None: 3 intervals

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"autoscaling.enabled: expected true or false, got {self.enabled!r}")
        check_int("autoscaling.min_replicas", self.min_replicas, 1)
        check_int("autoscaling.max_replicas", self.max_replicas, 1)
        if self.max_replicas < self.min_replicas:
            raise ConfigError(f"autoscaling.max_replicas: {self.max_replicas} is below min_replicas="
                              f"{self.min_replicas}")
        check_int("autoscaling.initial_replicas", self.initial_replicas, self.min_replicas, allow_none=True)
        if self.initial_replicas is not None and self.initial_replicas > self.max_replicas:
            raise ConfigError(f"autoscaling.initial_replicas: {self.initial_replicas} is above max_replicas="
                              f"{self.max_replicas}")
        check_choice("autoscaling.metric", self.metric, METRICS)
        if self.target is not None:
            check_number("autoscaling.target", self.target, 0.0, strict_min=True)
            if self.metric == "kv_usage" and self.target > 1:  # never reached: the fleet would never grow
                raise ConfigError(f"autoscaling.target: metric = kv_usage is the used fraction of the KV pool, "
                                  f"in (0, 1]; got {self.target}")
        check_number("autoscaling.interval_s", self.interval_s, 0.0, strict_min=True)
        if self.provisioning_delay_s is not None:
            check_number("autoscaling.provisioning_delay_s", self.provisioning_delay_s, 0.0)
        check_number("autoscaling.load_bandwidth_gbps", self.load_bandwidth_gbps, 0.0, strict_min=True)
        if self.scale_down_stabilization_s is not None:
            check_number("autoscaling.scale_down_stabilization_s", self.scale_down_stabilization_s, 0.0)

    @property
    def metric_target(self) -> float:
        return self.target if self.target is not None else DEFAULT_TARGETS[self.metric]

    @property
    def start_replicas(self) -> int:
        return self.initial_replicas if self.initial_replicas is not None else self.min_replicas

    @property
    def stabilization_s(self) -> float:
        return 3 * self.interval_s if self.scale_down_stabilization_s is None else self.scale_down_stabilization_s

    def delay_s(self, weight_bytes_per_gpu: int) -> float:
        """Seconds from asking for a replica to its serving: the given delay, or its weights' load time."""
        if self.provisioning_delay_s is not None:
            return self.provisioning_delay_s
        return weight_bytes_per_gpu / (self.load_bandwidth_gbps * 1e9)


def desired_replicas(serving: int, metric: float, target: float, low: int, high: int) -> int:
    """ceil(serving x metric / target) within [low, high]; unchanged within the tolerance."""
    if serving == 0:
        return low
    ratio = metric / target
    if abs(ratio - 1.0) <= TOLERANCE:
        return min(max(serving, low), high)
    return min(max(math.ceil(serving * ratio - 1e-9), low), high)


class Slot:
    """One replica position: the Replica (built once, reused), its state and when it was up."""

    PROVISIONING, SERVING, DRAINING, OFF = "provisioning", "serving", "draining", "off"

    def __init__(self, replica) -> None:
        self.replica = replica
        self.state = Slot.OFF
        self.up_since: float | None = None
        self.up_s = 0.0  # closed intervals so far
        self.intervals: list[tuple[float, float]] = []  # (up, down) of every closed interval

    def start(self, now: float, state: str) -> None:
        self.state = state
        self.up_since = now

    def stop(self, now: float) -> None:
        self.intervals.append((self.up_since, now))
        self.up_s += now - self.up_since
        self.up_since = None
        self.state = Slot.OFF

    def provisioned_s(self, now: float) -> float:
        return self.up_s + (now - self.up_since if self.up_since is not None else 0.0)


class Autoscaler:
    """The SimPy process that resizes a colocated cluster's serving set (see the module docstring).

    `slots` are the cluster's replica positions (max_replicas of them, built up front, none serving
    until started); `done()` says whether the workload has nothing more to send and every request
    has ended, which stops the ticking so the simulation can end.
    """

    def __init__(self, env, config: AutoscalingConfig, slots: list[Slot], delay_s: float,
                 done: Callable[[], bool]) -> None:
        self.env = env
        self.config = config
        self.slots = slots
        self.delay_s = delay_s
        self.done = done
        self.timeline: list[tuple[float, int, int, int, float | None]] = []  # time, serving, provisioning, draining, metric
        self._wanted: list[tuple[float, int]] = []
        self._ended: list[tuple[float, float]] = []  # (first token time, TTFT) of requests ended since the tick
        self.num_scale_ups = 0
        self.num_scale_downs = 0
        for slot in slots[:config.start_replicas]:
            slot.start(0.0, Slot.SERVING)
        self._record(None)
        env.process(self._loop())

    # --- what the router sees -------------------------------------------------------------------
    def serving(self) -> list[Any]:
        return [s.replica for s in self.slots if s.state == Slot.SERVING]

    def on_finish(self, request, now: float) -> None:
        """Finish hook of every replica: a drained replica goes off; TTFTs feed the ttft_p90 metric."""
        if request.first_token_time is not None and self.config.metric == "ttft_p90":
            self._ended.append((request.first_token_time, request.first_token_time - request.arrival_time))
        for slot in self.slots:
            if slot.state == Slot.DRAINING and slot.replica.num_outstanding == 0:
                slot.stop(now)
                self._record(None)

    # --- the loop -------------------------------------------------------------------------------
    def _loop(self):
        while True:
            yield self.env.timeout(self.config.interval_s)
            if self.done():
                return
            self._tick(self.env.now)

    def measure(self, now: float) -> float:
        replicas = self.serving()
        if not replicas:
            return 0.0
        metric = self.config.metric
        if metric == "queue":
            return float(np.mean([r.scheduler.num_waiting for r in replicas]))
        if metric == "kv_usage":
            return float(np.mean([r.scheduler.block_manager.usage for r in replicas]))
        # ttft_p90: first tokens of the last interval, and the waits so far of requests still waiting
        since = now - self.config.interval_s
        waits = [ttft for first, ttft in self._ended if first >= since]
        for r in replicas:
            for req in r.scheduler.requests.values():
                first = req.first_token_time
                if first is None:
                    waits.append(now - req.arrival_time)
                elif first >= since:
                    waits.append(first - req.arrival_time)
        self._ended.clear()
        return float(np.percentile(waits, 90)) if waits else 0.0

    def _tick(self, now: float) -> None:
        cfg = self.config
        serving = [s for s in self.slots if s.state == Slot.SERVING]
        provisioning = [s for s in self.slots if s.state == Slot.PROVISIONING]
        metric = self.measure(now)
        want = desired_replicas(len(serving), metric, cfg.metric_target, cfg.min_replicas, cfg.max_replicas)
        self._wanted = [(t, w) for t, w in self._wanted if t > now - cfg.stabilization_s] + [(now, want)]
        active = len(serving) + len(provisioning)
        if want > active:
            self._scale_up(now, want - active)
        elif want < len(serving) and not provisioning:
            keep = max(w for _, w in self._wanted)  # the most replicas wanted lately
            if keep < len(serving):
                self._scale_down(now, len(serving) - keep)
        self._record(metric)

    def _scale_up(self, now: float, n: int) -> None:
        self.num_scale_ups += 1
        for slot in [s for s in self.slots if s.state == Slot.DRAINING][:n]:
            slot.state = Slot.SERVING  # taken back: already loaded, still up
            n -= 1
        for slot in [s for s in self.slots if s.state == Slot.OFF][:n]:
            slot.start(now, Slot.PROVISIONING)
            self.env.timeout(self.delay_s).callbacks.append(lambda _e, s=slot: self._ready(s))

    def _ready(self, slot: Slot) -> None:
        if slot.state == Slot.PROVISIONING:
            slot.state = Slot.SERVING
            self._record(None)

    def _scale_down(self, now: float, n: int) -> None:
        self.num_scale_downs += 1
        serving = sorted((s for s in self.slots if s.state == Slot.SERVING),
                         key=lambda s: (s.replica.num_outstanding_tokens(), -self.slots.index(s)))
        for slot in serving[:n]:
            if slot.replica.num_outstanding == 0:
                slot.stop(now)
            else:
                slot.state = Slot.DRAINING

    def _record(self, metric: float | None) -> None:
        counts = {state: 0 for state in (Slot.SERVING, Slot.PROVISIONING, Slot.DRAINING)}
        for s in self.slots:
            if s.state in counts:
                counts[s.state] += 1
        self.timeline.append((self.env.now, counts[Slot.SERVING], counts[Slot.PROVISIONING],
                              counts[Slot.DRAINING], metric))

    # --- results --------------------------------------------------------------------------------
    def finish(self, now: float) -> None:
        """Close every slot still up at the end of the run (its GPU-hours end there)."""
        for slot in self.slots:
            if slot.up_since is not None:
                slot.stop(now)
        self._record(None)

    def provisioned_s(self, now: float) -> dict[str, float]:
        return {s.replica.name: s.provisioned_s(now) for s in self.slots}

    def timeline_table(self):
        import pandas as pd

        return pd.DataFrame(self.timeline, columns=["time", "num_serving", "num_provisioning", "num_draining",
                                                    "metric"])

    def summary(self) -> dict:
        t = self.timeline_table()
        up = t["num_serving"] + t["num_provisioning"] + t["num_draining"]
        span = float(t["time"].iloc[-1] - t["time"].iloc[0]) if len(t) > 1 else 0.0
        mean = float((up.iloc[:-1].to_numpy() * np.diff(t["time"].to_numpy())).sum() / span) if span > 0 else None
        return {"metric": self.config.metric, "target": self.config.metric_target,
                "max_replicas_up": int(up.max()), "mean_replicas_up": mean,
                "num_scale_ups": self.num_scale_ups, "num_scale_downs": self.num_scale_downs,
                "provisioning_delay_s": self.delay_s}

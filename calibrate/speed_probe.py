"""`SpeedProbe`: how fast the machine runs the engine right now, read off one fixed reference step.

On the shared 2-core VM the same engine step ran 15-25% faster or slower from one stretch of ten
seconds to the next, at a load average of 0.6 and with no wait for a core (the hypervisor's other
tenants: docs/results/2026-12-06-speed-probe.md). A profile describes the machine of its calibration;
a run met another, and the per-step comparison then measured the machine, not the model. A synthetic
probe (a loop of small matmuls) followed that speed only loosely; the engine's own kind of work does.

The probe runs one fixed `BatchPlan` (a few decodes and a short prefill chunk, `PROBE_PLAN`) on the
model the engine runs, on a small KV cache of its own, at most every `interval_s` and timed on the
calibration's clock (`calibrate.op_bench.clock_for`: thread CPU time on a CPU). `speed_at(t)` is the
median of the readings nearest to `t` over a reference level (the calibration's median reading):
1.10 means the machine ran the engine 10% slower than at the reference. `calibrate` divides its op
timings and engine steps by it, so that a slow stretch within a calibration does not bend its fit
(the profile then describes the machine at the reference speed). `validate` reads the speed during
its run and compares the predictions scaled by it too; they are its headline only where the model's
weights exceed the CPU's last-level cache (`calibrate.validate.speed_basis`): where they fit, run and
calibration readings differed by ~5% with no change in the steps (what the cache held before them).
"""
from __future__ import annotations

import time
from bisect import bisect_left
from typing import Callable

import numpy as np
import torch

from gpu_backend.attention import select_backend
from gpu_backend.kv_cache import KVCache
from gpu_backend.model_runner import ModelRunner
from policies import BatchPlan, Request, ScheduledSeq

#: (decodes, their KV length, prefill chunk tokens): a small mixed step of every kind of op
PROBE_PLAN = (2, 64, 16)
#: where a reading was taken: after an engine step, or between two op benchmarks
CONTEXTS = ("steps", "ops")
#: untimed runs of the plan before the timed one of a reading
WARM_RUNS = 2
#: seconds between two readings at least: ~8 ms a reading on the tiny CPU model, so ~4% of the time
INTERVAL_S = 0.2
#: readings whose median is the speed at a time (~2 s at `INTERVAL_S`; the machine's speed moved
#: over seconds, single readings scatter by ~3%)
WINDOW = 9


def fake_seq(req_id, num_tokens: int, computed: int, first_block: int, block_size: int) -> ScheduledSeq:
    """A sequence with token ids and its own contiguous block table, for a hand-made plan (the
    probe's, and `calibrate.op_bench`'s op benchmarks)."""
    ctx = computed + num_tokens
    r = Request(req_id, 0.0, ctx, 1, prompt_token_ids=[3] * ctx)
    r.block_table = list(range(first_block, first_block + -(-ctx // block_size)))
    return ScheduledSeq(r, num_tokens, computed, True)


class SpeedProbe:
    """Readings of a fixed reference step on `model`, and the machine's relative speed from them."""

    def __init__(self, model, device: str | torch.device = "cpu", *, clock: Callable[[], float],
                 interval_s: float = INTERVAL_S, window: int = WINDOW) -> None:
        """`clock`: the calibration's (`calibrate.op_bench.clock_for`), so that readings and timings agree."""
        self.device = torch.device(device)
        self.interval_s, self.window = interval_s, window
        self.clock = clock
        decodes, kv_len, chunk = PROBE_PLAN
        block_size = 16
        per = -(-kv_len // block_size)
        seqs = [fake_seq(f"probe{i}", 1, kv_len - 1, i * per, block_size) for i in range(decodes)]
        seqs.append(fake_seq("probe-prefill", chunk, 0, decodes * per, block_size))
        num_blocks = decodes * per + -(-chunk // block_size)
        dtype = next(model.parameters()).dtype
        kv = KVCache(model.config, num_blocks, block_size, 0, dtype, self.device)
        self._runner = ModelRunner(model, kv, select_backend(self.device))
        self._plan = BatchPlan(0, tuple(seqs))
        # (time.perf_counter() at the reading, seconds, context): what ran before a reading moves it
        # (after the op benchmarks' cold-weight rotations the caches hold other data than after an
        # engine step), so each reading says which of `CONTEXTS` it was taken in
        self.readings: list[tuple[float, float, str]] = []
        self._last = float("-inf")
        self._warm = False

    def read(self, context: str = "steps") -> float:
        """Run the reference step once and keep its time; returns the wall seconds this took."""
        w = time.perf_counter()
        with torch.inference_mode():
            # untimed runs first: the timed one then finds its own data in the caches whatever ran
            # before it (read cold, after a large step or a cold-weight op benchmark it ran up to
            # 10% slower than after a small step, which is not the machine's speed)
            for _ in range(WARM_RUNS if self._warm else 3):
                self._runner.execute(self._plan)
            self._warm = True
            t = self.clock()
            self._runner.execute(self._plan)
            spent = self.clock() - t
        end = time.perf_counter()
        self.readings.append((end, spent, context))
        self._last = end
        return end - w

    def maybe_read(self, context: str = "steps") -> float:
        """`read` when `interval_s` has passed since the last reading; the wall seconds spent (0 if not)."""
        if time.perf_counter() - self._last < self.interval_s:
            return 0.0
        return self.read(context)

    def level(self, start: float = float("-inf"), end: float = float("inf"), outside: bool = False,
              context: str = "steps") -> float | None:
        """Median reading (seconds) in `context` taken within [start, end] (`outside`: not within it);
        None without any."""
        r = [s for t, s, c in self.readings if c == context and (start <= t <= end) != outside]
        return float(np.median(r)) if r else None

    def speed_at(self, times, reference: float, context: str = "steps") -> np.ndarray:
        """The machine's slowness at each of `times` (perf_counter seconds) against `reference`
        seconds: the median of the `window` readings in `context` nearest in time over `reference`
        (1.0 where there are no readings)."""
        times = np.asarray(times, dtype=float)
        mine = [(t, s) for t, s, c in self.readings if c == context]
        if not mine or not reference:
            return np.ones_like(times)
        stamps = [t for t, _ in mine]
        values = np.array([s for _, s in mine])
        n, half = len(values), self.window // 2
        out = np.empty_like(times)
        for i, t in enumerate(times):
            j = bisect_left(stamps, t)
            lo = max(0, min(j - half, n - self.window))
            out[i] = np.median(values[lo:lo + self.window]) / reference
        return out

    def normalize_steps(self, steps: list, reference: float) -> list:
        """`calibrate.engine_bench.measure_engine_steps`' (configuration, plan, seconds, after_idle, at) with
        seconds divided by the speed at `at`: the steps of a machine running at the reference speed."""
        if not steps:
            return steps
        speed = self.speed_at([s[4] for s in steps], reference)
        return [(n, p, t / f, idle, at) for (n, p, t, idle, at), f in zip(steps, speed)]

    def normalize_points(self, points: dict, stamps: dict) -> dict:
        """`calibrate.op_bench.measure_ops`' {op: [[x..., seconds]]} with each time divided by the speed
        when it was taken (`stamps`, aligned with the points), against the median reading among the
        op benchmarks (the in-step scales carry the op timings over to the steps' reference)."""
        reference, out = self.level(context="ops"), {}
        for op, rows in points.items():
            speed = self.speed_at(stamps[op], reference, context="ops")
            out[op] = [[*r[:-1], r[-1] / f] for r, f in zip(rows, speed)]
        return out

    def scatter(self, start: float = float("-inf"), end: float = float("inf"), outside: bool = False) -> float | None:
        """Median |reading / the speed around it - 1| in % over the "steps" readings within [start, end]
        (`outside`: not within it); None with fewer than three readings in all (no median to miss).

        The probe times one fixed step, and `speed_at` gives each time the median of the readings
        nearest to it: a prediction that was exact up to that speed would still miss each reading by
        this much. It is the per-step error floor of the machine at that time, for steps of the
        probe's size: where it nears a per-step bar, the machine, not the model, decides the figure."""
        mine = [(t, s) for t, s, c in self.readings if c == "steps"]
        if len(mine) < 3:
            return None
        chosen = [(t, s) for t, s in mine if (start <= t <= end) != outside]
        if not chosen:
            return None
        around = self.speed_at([t for t, _ in chosen], 1.0)  # the window's median reading, in seconds
        return float(np.median([abs(s / a - 1.0) for (_, s), a in zip(chosen, around)]) * 100.0)

    def summary(self, reference: float, start: float | None = None, end: float | None = None) -> dict:
        """What the readings say, for a report: the reference, and the run's speed within [start, end]
        against it (none without a reference: `speed_at` would read 1.0, a speed no probe saw)."""
        out = {"plan": {"decodes": PROBE_PLAN[0], "kv_len": PROBE_PLAN[1], "prefill_chunk": PROBE_PLAN[2]},
               "reference_s": reference, "num_readings": len(self.readings), "interval_s": self.interval_s,
               "window": self.window}
        if start is not None and end is not None:
            inside = [t for t, _, c in self.readings if c == "steps" and start <= t <= end]
            if inside and reference:
                s = self.speed_at(inside, reference)
                out.update({"run_num_readings": len(inside), "run_median": round(float(np.median(s)), 4),
                            "run_p10": round(float(np.percentile(s, 10)), 4),
                            "run_p90": round(float(np.percentile(s, 90)), 4)})
            for key, outside in (("run_scatter_pct", False), ("calibration_scatter_pct", True)):
                v = self.scatter(start, end, outside)
                if v is not None:
                    out[key] = round(v, 2)
        return out

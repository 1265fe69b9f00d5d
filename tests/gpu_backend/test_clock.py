"""The engine clocks (gpu_backend.clock): the uncontended clock leaves out exactly the waits for a core."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

import pytest

from gpu_backend.clock import ExcludingClock, UncontendedClock, make_clock
from gpu_backend.engine import Engine, EngineConfig
from policies import CacheConfig, ConfigError, Request, SchedulerConfig

needs_schedstat = pytest.mark.skipif(not UncontendedClock.available(), reason="no per-thread schedstat")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


needs_fork = pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "sched_setaffinity"),
                                reason="needs fork and affinity")


@contextmanager
def _sharing_one_core_with_two_busy_children(seconds: float):
    """Pin this thread to one core and fork two children that spin on it for `seconds`."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(saved)})
    children = []
    try:
        for _ in range(2):
            pid = os.fork()
            if pid == 0:  # pragma: no cover (child)
                try:
                    _spin(seconds)
                finally:
                    os._exit(0)
            children.append(pid)
        yield
    finally:
        os.sched_setaffinity(0, saved)
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)


@needs_schedstat
@needs_fork
def test_the_uncontended_clock_is_the_wall_clock_less_the_wait_for_a_core():
    clock = UncontendedClock()
    with _sharing_one_core_with_two_busy_children(1.0):
        w, u, c = time.perf_counter(), clock(), time.thread_time()
        _spin(0.5)
        wall, unc, used = time.perf_counter() - w, clock() - u, time.thread_time() - c
    # with two busy tasks on its core this thread ran about a third of the time: the wall clock
    # counts the waits, the uncontended clock the thread's own running time, to a scheduler tick
    assert used < 0.75 * wall
    assert abs(unc - used) < 0.05 * used + 0.01, (wall, unc, used)


@needs_schedstat
@needs_fork
def test_the_uncontended_clock_never_runs_ahead_of_the_wall_and_never_back():
    # on a contended core the thread loses the core between any two reads, also between the
    # wall's and schedstat's inside one reading: the clock must not step back a tick for that
    clock = UncontendedClock()
    readings = []
    with _sharing_one_core_with_two_busy_children(0.6):
        end = time.perf_counter() + 0.4
        while time.perf_counter() < end:
            readings.append((time.perf_counter(), clock()))
    walls, uncs = zip(*readings)
    assert all(b >= a for a, b in zip(uncs, uncs[1:]))
    assert all(w - u >= -1e-6 for w, u in zip(walls, uncs))  # the wait only grows
    assert clock.waited_s() >= 0.0


def test_clock_names_are_checked():
    with pytest.raises(ValueError, match="engine.clock"):
        make_clock("cpu")
    with pytest.raises(ConfigError, match="engine.clock"):
        EngineConfig(clock="cpu")


@needs_schedstat
def test_an_engine_on_the_uncontended_clock_steps_on_its_thread_only(tiny_model):
    config = EngineConfig(model=tiny_model.config, scheduler=SchedulerConfig(max_model_len=128),
                          cache=CacheConfig(block_size=16, num_gpu_blocks=32), clock="uncontended")
    engine = Engine(config, "cpu", model=tiny_model)
    engine.add_request(Request("a", engine.now(), 12, 3, prompt_token_ids=[5] * 12))
    engine.run_until_done()
    steps = engine.result().steps
    assert len(steps) == 3 and (steps.duration > 0).all() and engine.now() > 0
    with pytest.raises(ConfigError, match="engine.clock"):  # a background thread would read another thread's waits
        engine.start()


def test_the_excluding_clock_leaves_out_what_it_is_told_to_and_nothing_else():
    clock = ExcludingClock(time.perf_counter)
    a = clock()
    with clock.excluded():
        time.sleep(0.05)
    b = clock()
    time.sleep(0.02)
    c = clock()
    assert 0.0 <= b - a < 0.01  # the excluded sleep did not pass on this clock
    assert c - b >= 0.02  # an ordinary one did
    assert clock.excluded_s >= 0.05

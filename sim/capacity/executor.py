"""Where sweep points run: serially, in local processes (the default), or on a Ray cluster.

Each executor maps a picklable module-level function over a list of items and returns the results
in input order, showing a tqdm progress bar. Points are independent and carry their own seed, so
the results are the same whichever executor runs them.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Sequence

from tqdm import tqdm

from policies import ConfigError
from policies.config import check_choice

EXECUTORS = ("local", "serial", "ray")


class SerialExecutor:
    """Runs points one after the other in this process (debugging, tiny sweeps, tests)."""

    name = "serial"

    def map(self, fn: Callable, items: Sequence, desc: str = "points", progress: bool = True) -> list:
        return [fn(item) for item in tqdm(items, desc=desc, disable=not progress)]


class LocalExecutor:
    """Runs points in a pool of local processes (`concurrent.futures`)."""

    name = "local"

    def __init__(self, max_workers: int | None = None) -> None:
        if max_workers is not None and max_workers < 1:
            raise ConfigError(f"workers: must be >= 1, got {max_workers}")
        self.max_workers = max_workers or max(1, os.cpu_count() or 1)

    def map(self, fn: Callable, items: Sequence, desc: str = "points", progress: bool = True) -> list:
        if len(items) <= 1 or self.max_workers == 1:
            return SerialExecutor().map(fn, items, desc, progress)
        results: list = [None] * len(items)
        with ProcessPoolExecutor(max_workers=min(self.max_workers, len(items))) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            for fut in tqdm(as_completed(futures), total=len(futures), desc=desc, disable=not progress):
                results[futures[fut]] = fut.result()
        return results


class RayExecutor:
    """Runs points as Ray tasks: a local Ray instance, or a cluster at `address` (`ray://...` or `auto`).

    Ray is the optional `ray` extra; it is imported only here.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError("executor: 'ray' needs the ray extra (pip install 'servesim[ray]')") from exc
        self.address = address
        self.num_cpus = num_cpus

    def map(self, fn: Callable, items: Sequence, desc: str = "points", progress: bool = True) -> list:
        import ray

        started_here = not ray.is_initialized()
        if started_here:
            kwargs = {"address": self.address} if self.address else {"num_cpus": self.num_cpus}
            ray.init(ignore_reinit_error=True, log_to_driver=False, include_dashboard=False, **kwargs)
        try:
            remote = ray.remote(num_cpus=1)(fn)
            refs = [remote.remote(item) for item in items]
            index = {ref: i for i, ref in enumerate(refs)}
            results: list = [None] * len(items)
            pending = list(refs)
            with tqdm(total=len(refs), desc=desc, disable=not progress) as bar:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    for ref in done:
                        results[index[ref]] = ray.get(ref)
                        bar.update(1)
            return results
        finally:
            if started_here:
                ray.shutdown()


def make_executor(name: str = "local", workers: int | None = None, address: str | None = None):
    """The executor called `name` (one of EXECUTORS)."""
    check_choice("executor", name, EXECUTORS)
    if name == "local":
        return LocalExecutor(workers)
    if name == "serial":
        return SerialExecutor()
    return RayExecutor(address, workers)

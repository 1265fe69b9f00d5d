"""`IdleHostLayer`: the file form of the idle-engine host layer (`fidelity/host/*.json`), and the shipped one.

Per-run medians of the engine's host time per step, of the front-end gap of each TTFT and of the
sustained-compute factor of its GEMMs, per-run lines of what a client's TTFT holds beyond the
server's (where a client timed the same requests), the method and the runs they came from;
`host_s_for(run)` is the median over the *other* runs. Below `fidelity.predict`, which reads it, and
`fidelity.idle_host`, which measures it (by simulating runs) and says how.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from records.files import read_json_object, write_json

HOST_DIR = Path(__file__).resolve().parent / "host"
#: the shipped layer for vLLM v1 on H100 with per-op (aiconfigurator) GPU times
VLLM_V1_H100 = HOST_DIR / "vllm-v1-h100.json"
FORMAT = "servesim-idle-host"


def _median_but(values: dict[str, float], run_name: str | None) -> float | None:
    vals = [v for k, v in values.items() if k != run_name]
    return float(np.median(vals)) if vals else None


def _check_lines(d, path) -> dict[str, tuple[float, float]]:
    """run -> (intercept seconds, seconds per prompt token), both >= 0, from a layer file."""
    if not isinstance(d, dict):
        raise ValueError(f"host layer.client_frontend_per_run: {path}: expected run -> [seconds, seconds per token]")
    out = {}
    for k, v in d.items():
        if (not isinstance(v, (list, tuple)) or len(v) != 2
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 for x in v)):
            raise ValueError(f"host layer.client_frontend_per_run.{k}: {path}: expected [seconds >= 0, "
                             f"seconds per token >= 0], got {v!r}")
        out[k] = (float(v[0]), float(v[1]))
    return out


@dataclass
class IdleHostLayer:
    """Per-run medians of the idle-engine host time per step (and of the front-end gap of each
    request's TTFT, where the run's spans time it), and where they came from.

    `client_frontend_per_run`: per run whose client timed the same requests, the line (intercept,
    per prompt token) of what the client's TTFT holds beyond the server's span (the client's send,
    HTTP, tokenizing before vLLM's arrival stamp; the first chunk's way back)."""

    per_run: dict[str, float]
    method: str = ("median over requests alone in the engine of measured TPOT - the per-op GPU time "
                   "of their decode steps; frontend: median of TTFT - queue - prefill of vLLM's spans; "
                   "client frontend: Theil-Sen line over prompt tokens of the client's TTFT - the span's "
                   "(fidelity.idle_host)")
    source: str = ""
    gpu_model: str = "aiconfigurator"
    num_requests: dict[str, int] = field(default_factory=dict)
    frontend_per_run: dict[str, float] = field(default_factory=dict)
    compute_factor_per_run: dict[str, float] = field(default_factory=dict)
    client_frontend_per_run: dict[str, tuple[float, float]] = field(default_factory=dict)

    def host_s_for(self, run_name: str | None = None) -> float | None:
        """The median over every run but `run_name` (None when no other run has a value)."""
        return _median_but(self.per_run, run_name)

    def frontend_s_for(self, run_name: str | None = None) -> float | None:
        """The front-end gap: the median over every run but `run_name` (None without one)."""
        return _median_but(self.frontend_per_run, run_name)

    def client_frontend_for(self, run_name: str | None = None) -> tuple[float, float] | None:
        """(intercept s, s per prompt token) of a client's TTFT beyond the server's: the medians
        of each over every run but `run_name` (None without one)."""
        intercept = _median_but({k: a for k, (a, _) in self.client_frontend_per_run.items()}, run_name)
        per_token = _median_but({k: b for k, (_, b) in self.client_frontend_per_run.items()}, run_name)
        return None if intercept is None else (intercept, per_token)

    def compute_factor_for(self, run_name: str | None = None) -> float | None:
        """The sustained-compute factor of GEMMs: the median over every run but `run_name`."""
        return _median_but(self.compute_factor_per_run, run_name)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": 1, "method": self.method, "source": self.source,
                "gpu_model": self.gpu_model, "per_run": self.per_run, "num_requests": self.num_requests,
                "frontend_per_run": self.frontend_per_run, "compute_factor_per_run": self.compute_factor_per_run,
                "client_frontend_per_run": {k: list(v) for k, v in self.client_frontend_per_run.items()},
                "fitted_on": sorted(set(self.per_run) | set(self.frontend_per_run) | set(self.compute_factor_per_run)
                                    | set(self.client_frontend_per_run))}

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "IdleHostLayer":
        data = read_json_object(path, "host layer")
        if data.get("format") != FORMAT:
            raise ValueError(f"host layer: {path} is not a {FORMAT} file (format: {data.get('format')!r})")
        per_run = data.get("per_run")
        if not isinstance(per_run, dict) or any(not isinstance(v, (int, float)) or v < 0 for v in per_run.values()):
            raise ValueError(f"host layer.per_run: {path}: expected run -> seconds >= 0")
        extra = {}
        for key in ("frontend_per_run", "compute_factor_per_run"):
            d = data.get(key) or {}
            if not isinstance(d, dict) or any(not isinstance(v, (int, float)) or v < 0 for v in d.values()):
                raise ValueError(f"host layer.{key}: {path}: expected run -> a number >= 0")
            extra[key] = {k: float(v) for k, v in d.items()}
        extra["client_frontend_per_run"] = _check_lines(data.get("client_frontend_per_run") or {}, path)
        return cls({k: float(v) for k, v in per_run.items()}, data.get("method", ""), data.get("source", ""),
                   data.get("gpu_model", "aiconfigurator"), dict(data.get("num_requests") or {}), **extra)



_LAYERS: dict[Path, IdleHostLayer | None] = {}


def shipped_layer(path: Path = VLLM_V1_H100) -> IdleHostLayer | None:
    """The shipped layer (cached), or None when the file is absent."""
    if path not in _LAYERS:
        _LAYERS[path] = IdleHostLayer.load(path) if path.is_file() else None
    return _LAYERS[path]

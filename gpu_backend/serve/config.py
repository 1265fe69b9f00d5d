"""The `[serve]` section of a serving config: what the HTTP layer adds to the engine's config.

A serve TOML is an ordinary servesim config (model, hardware, scheduler, cache, ...) plus this
optional section; `servesim serve` splits it off (`split_serve_section`) before the rest goes to the
engine's config.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from policies import ConfigError
from policies.config import check_int, check_keys, check_number


@dataclass(frozen=True)
class ServeConfig:
    """HTTP-side knobs: the model's public name, its tokenizer, admission limit, records folder, and
    how long a shutdown lets the requests in flight finish."""

    model_name: str = "tiny-llama"
    tokenizer: str | None = None  # a local directory with tokenizer.json; default: the model's folder
    max_num_waiting: int = 512  # requests accepted but without a first token; beyond it: 503
    retry_after_s: int = 1  # the Retry-After header of a 503
    out_dir: str | None = None  # requests/steps tables are written here on shutdown and POST /admin/dump
    # on SIGINT/SIGTERM, how long the requests in flight may run on before they are aborted (new ones
    # answer 503 meanwhile): vLLM's --shutdown-timeout, and its default, 0: abort them at once
    shutdown_timeout_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ConfigError(f"serve.model_name: expected a non-empty string, got {self.model_name!r}")
        if self.tokenizer is not None and not isinstance(self.tokenizer, str):
            raise ConfigError(f"serve.tokenizer: expected a directory path, got {self.tokenizer!r}")
        check_int("serve.max_num_waiting", self.max_num_waiting, 1)
        check_int("serve.retry_after_s", self.retry_after_s, 0)
        check_number("serve.shutdown_timeout_s", self.shutdown_timeout_s, 0.0)
        if self.out_dir is not None and not isinstance(self.out_dir, str):
            raise ConfigError(f"serve.out_dir: expected a directory path, got {self.out_dir!r}")


def build_serve_config(values: Any, base: Path | None = None) -> ServeConfig:
    """A ServeConfig from a `[serve]` table; relative paths are relative to `base` (the config's folder)."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"serve: expected a table of keys, got {values!r}")
    check_keys("serve", values, ServeConfig)
    values = dict(values)
    for key in ("tokenizer", "out_dir"):
        if base is not None and isinstance(values.get(key), str) and not Path(values[key]).is_absolute():
            values[key] = str(base / values[key])
    return ServeConfig(**values)

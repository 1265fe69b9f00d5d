"""`SamplingParams`: how a request picks its next tokens (it goes in `Request.sampling`).

Plain Python, apart from the torch `Sampler` (`gpu_backend.sampler`) that applies it, so that the
HTTP server builds requests' parameters without importing torch.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from policies.config import ConfigError, check_int, check_number


# below this a temperature is greedy, as vLLM's sampler takes it (its _SAMPLING_EPS): dividing
# float32 logits by, say, 1e-40 overflows to inf and the softmax to NaN
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token: greedy (temperature 0, or under `GREEDY_BELOW`), or temperature +
    top-p with a seed."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_number("sampling.temperature", self.temperature, 0.0)
        check_number("sampling.top_p", self.top_p, 0.0, 1.0, strict_min=True)
        check_int("sampling.seed", self.seed, -2**63, allow_none=True, maximum=2**63 - 1)  # torch.long, as vLLM
        if not isinstance(self.stop_token_ids, (tuple, list)):
            raise ConfigError(f"sampling.stop_token_ids: expected a list of token ids, got {self.stop_token_ids!r}")
        for t in self.stop_token_ids:
            check_int("sampling.stop_token_ids", t, 0)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


GREEDY = SamplingParams()


def request_seed(req_id, base_seed: int = 0) -> int:
    """A stable per-request seed for requests that give none (crc32, not Python's salted hash)."""
    return zlib.crc32(f"{base_seed}:{req_id}".encode())

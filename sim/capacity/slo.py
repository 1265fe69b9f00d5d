"""Service-level objectives and DistServe-style goodput (SLO attainment).

A request *attains* the SLO when its TTFT, TPOT and E2E are all within their targets (a target of
None is not checked; a request with one output token has no TPOT and passes that check). Rejected
or unfinished requests never attain. A configuration *sustains* a rate when at least
`min_attainment` (DistServe: 90%) of its requests attain.
"""
from __future__ import annotations

from dataclasses import dataclass

from policies import ConfigError
from policies.config import check_number
from records.metrics import meets_slo

# an infinite target would read as "no target", which is what leaving it out already says; refused,
# so that inf or NaN never quietly turns a target off (or, as NaN, fails every request)
NO_TARGET_HINT = "leave it out for no target"


def _check_target(name: str, value: float | None) -> None:
    """A target is None (not checked) or a finite number of seconds > 0."""
    if value is None:
        return
    check_number(f"slo.{name}", value, 0.0, strict_min=True, hint=NO_TARGET_HINT)


@dataclass(frozen=True)
class SLO:
    """Latency targets in seconds and the fraction of requests that must meet all of them."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    min_attainment: float = 0.9

    def __post_init__(self) -> None:
        _check_target("ttft_s", self.ttft_s)
        _check_target("tpot_s", self.tpot_s)
        _check_target("e2e_s", self.e2e_s)
        if not isinstance(self.min_attainment, (int, float)) or not 0 < self.min_attainment <= 1:
            raise ConfigError(f"slo.min_attainment: must be in (0, 1], got {self.min_attainment!r}")

    @property
    def is_empty(self) -> bool:
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None

    def require_targets(self) -> None:
        """Raise unless at least one target is set (what an SLO search or a plan needs)."""
        if self.is_empty:
            raise ConfigError("slo: give at least one of --slo-ttft, --slo-tpot, --slo-e2e (or an [slo] section)")

    @classmethod
    def from_config(cls, config: object, **overrides: float | None) -> "SLO":
        """Targets from a config's `slo` section (if any), replaced by the non-None `overrides`."""
        section = getattr(config, "slo", None)
        values: dict[str, float | None] = {}
        for name in ("ttft_s", "tpot_s", "e2e_s", "min_attainment"):
            v = overrides.get(name)
            if v is None and section is not None:
                v = getattr(section, name, None)
                if v is None and name == "min_attainment":
                    v = getattr(section, "attainment", None)
            if v is not None:
                values[name] = v
        return cls(**values)


def attainment(requests, slo: SLO) -> float:
    """Fraction of rows of a `requests` table (DataFrame) that finished within every target of `slo`
    (`records.metrics.meets_slo`: the summary's `slo_attainment`, so both say the same)."""
    return float(meets_slo(requests, slo).mean()) if len(requests) else 0.0

"""SLO attainment (DistServe goodput): every target must hold; rejected requests never attain."""
import math

import pandas as pd
import pytest

from policies import ConfigError
from sim.capacity.slo import SLO, attainment


def make_table(rows):
    return pd.DataFrame(rows, columns=["ttft_s", "tpot_s", "e2e_s", "finish_reason"])


def test_attainment_counts_requests_meeting_every_target():
    t = make_table([
        (0.1, 0.01, 1.0, "length"),       # meets all
        (0.6, 0.01, 1.0, "length"),       # TTFT too slow
        (0.1, 0.05, 1.0, "length"),       # TPOT too slow
        (0.1, math.nan, 0.1, "length"),   # one output token: no TPOT, passes
        (0.1, 0.01, 3.0, "stop"),         # E2E too slow (only checked when given)
        (math.nan, math.nan, math.nan, "rejected"),
    ])
    assert attainment(t, SLO(ttft_s=0.5, tpot_s=0.02)) == pytest.approx(3 / 6)
    assert attainment(t, SLO(ttft_s=0.5, tpot_s=0.02, e2e_s=2.0)) == pytest.approx(2 / 6)
    assert attainment(t, SLO(ttft_s=10)) == pytest.approx(5 / 6)  # the rejected one never attains
    assert attainment(t.iloc[:0], SLO(ttft_s=1)) == 0.0


def test_slo_from_config_prefers_explicit_targets():
    from sim.config import load_config

    cfg = load_config({"slo": {"ttft_s": 0.5, "tpot_s": 0.05}})
    assert SLO.from_config(cfg) == SLO(0.5, 0.05, None)
    assert SLO.from_config(cfg, tpot_s=0.01, min_attainment=0.99) == SLO(0.5, 0.01, None, 0.99)


@pytest.mark.parametrize("kwargs, field", [({"ttft_s": 0}, "slo.ttft_s"), ({"tpot_s": -1}, "slo.tpot_s"),
                                           ({"min_attainment": 1.5}, "slo.min_attainment")])
def test_bad_slo_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        SLO(**kwargs)


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_an_infinite_or_nan_target_is_refused_saying_how_to_have_none(value):
    """A target left out is no target; inf would say it a second way (and NaN failed every request)."""
    with pytest.raises(ConfigError, match=r"^slo\.ttft_s: expected a .* \(leave it out for no target\)$"):
        SLO(ttft_s=value)

"""`records.display`: what people read stays within rounding of the value, without exponents."""
from __future__ import annotations

import math

import numpy as np
import pytest

from records.display import ms, number, percent, slower_or_faster


def parse(text: str) -> float:
    return float(text.replace(",", "").rstrip("%"))


@pytest.mark.parametrize("seed", range(3))
def test_shown_numbers_are_the_value_to_three_significant_digits_without_exponents(seed):
    rng = np.random.default_rng(seed)
    for v in rng.lognormal(0.0, 6.0, 2000) * rng.choice([-1, 1], 2000):
        if not 1e-4 <= abs(v) < 1e15:
            continue
        text = number(float(v))
        assert "e" not in text, (v, text)
        # 3 significant digits (integers in full above 1000): off by at most half the last digit shown
        last = 1.0 if abs(v) >= 1000 else 10.0 ** (math.floor(math.log10(abs(v))) - 2)
        assert abs(parse(text) - v) <= 0.5 * last * (1 + 1e-9), (v, text)
        digits = text.lstrip("-").split(".")[0].replace(",", "")
        assert "," not in text or all(len(g) == 3 for g in text.lstrip("-").split(".")[0].split(",")[1:])
        assert len(digits) < 4 or "," in text, (v, text)  # thousands separated


def test_the_app_card_case_and_missing_values():
    assert ms(4.88) == "4,880"  # was "4.88e+03" (ms) on the app's cards
    assert number(None) == number(float("nan")) == ms(None) == percent(None) == "-"
    assert number(7) == "7" and number(np.int64(12345)) == "12,345"
    assert number(15.0, trim=True) == "15" and number(0.25, trim=True) == "0.25"
    assert percent(0.1234) == "12.3%" and percent(1.0) == "100.0%" and percent(0.04) == "4.0%"
    assert percent(0.0000042) == "0.00042%" and percent(0.0) == "0.0%"


@pytest.mark.parametrize("pct, text", [(4.24, "4.2% slower"), (-3.0, "3.0% faster"), (0.0, "0.0% slower"),
                                       (-16.5, "16.5% faster")])
def test_a_signed_slow_down_reads_as_slower_or_faster(pct, text):
    assert slower_or_faster(pct) == text

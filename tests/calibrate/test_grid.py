"""The calibration grids: what shapes each mode times."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("max_len", [300, 1024, 2048])
def test_grids_reach_the_longest_prompt_and_context_and_never_pass_them(max_len):
    from calibrate.grid import Grid

    for mode in ("quick", "full"):
        g = Grid.make(mode, max_len=max_len)
        assert (max_len, max_len) in g.prefill  # a whole prompt of max_len, one chunk (continuous, static)
        assert max(L for _, L in g.decode) == max_len
        assert all(ctx <= max_len for _, ctx in g.prefill) and all(L <= max_len for _, L in g.decode)
    smoke, quick = Grid.make("smoke", max_len=max_len), Grid.make("quick", max_len=max_len)
    assert len(smoke.prefill) + len(smoke.decode) < (len(quick.prefill) + len(quick.decode)) / 3
    with pytest.raises(ValueError, match="grid"):
        Grid.make("tiny")

"""`RandomStreams`: the random number generators a workload draws its quantities from.

Two layouts, both seeded by `workload.seed`:

- `one` (every workload `simulate`, `reproduce` and `validate` generate): a single
  `numpy.random.Generator(seed)` serves every quantity in turn: arrival gaps, then classes, then
  prompt and output lengths, then users. Request i's lengths therefore depend on how many arrival
  gaps were drawn before them: a run at another rate or request count gets other lengths.
- `per_quantity` (common random numbers: `servesim capacity`, and sweeps that set the rate): each
  quantity has its own stream, `SeedSequence(seed, spawn_key=(quantity, index))`. numpy fills an
  array from a stream in order, so the first n draws of a quantity are the same whatever n is:
  request i gets the same lengths, class and user, and the same arrival gap in unit-rate time (gaps
  are drawn at rate 1 and scaled by 1/rate), at every rate and every request count.
"""
from __future__ import annotations

import numpy as np

from policies.config import check_choice

STREAMS = ("one", "per_quantity")
# a quantity's place here is its stream's spawn key: append new ones, never reorder
QUANTITIES = ("arrivals", "classes", "prompt", "output", "users", "class_prompt", "class_output")


class RandomStreams:
    """The generator for each quantity a workload draws (`get`), laid out as `layout` says (module doc).

    A quantity's generator is made once and then continues where its last draw stopped, so a
    closed loop that draws lengths chunk by chunk reads one stream.
    """

    def __init__(self, seed: int, layout: str = "one") -> None:
        check_choice("workload streams", layout, STREAMS)
        self.seed = seed
        self.layout = layout
        self._one = np.random.default_rng(seed) if layout == "one" else None
        self._made: dict[tuple[str, int], np.random.Generator] = {}

    def get(self, quantity: str, index: int = 0) -> np.random.Generator:
        """The generator for `quantity` (one of QUANTITIES); `index` tells apart one stream per class."""
        check_choice("workload stream quantity", quantity, QUANTITIES)
        if self._one is not None:
            return self._one
        key = (quantity, index)
        if key not in self._made:
            seq = np.random.SeedSequence(self.seed, spawn_key=(QUANTITIES.index(quantity), index))
            self._made[key] = np.random.default_rng(seq)
        return self._made[key]

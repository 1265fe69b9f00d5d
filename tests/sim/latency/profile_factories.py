"""Factories for the latency-model tests: a toy profile whose every op is a known line or plane."""
from __future__ import annotations

from policies import BatchPlan, Request, ScheduledSeq
from sim.latency.curves import Bilinear, PiecewiseLinear
from sim.latency.profile import OP_INPUTS, OpProfile, Profile

DIMS = {"name": "toy", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 688, "vocab_size": 2048,
        "tensor_parallel_size": 1, "dtype": "float32"}


def line(a: float, b: float) -> PiecewiseLinear:
    """t = a + b*x for x >= 1 (two knots; extrapolates with the same slope)."""
    return PiecewiseLinear((1.0, 1001.0), (a + b, a + b * 1001))


def make_profile(**model_overrides) -> Profile:
    ops = {}
    for i, (name, inputs) in enumerate(OP_INPUTS.items()):
        if len(inputs) == 2:
            curve = Bilinear((1e-5, 1e-7, 1e-8, 1e-9))
        else:
            curve = line(1e-6 * (i + 1), 1e-8 * (i + 1))
        ops[name] = OpProfile(name, inputs, curve, [], {"median_abs_pct": 0.0, "max_abs_pct": 0.0})
    return Profile({"device": "test", "dtype": "float32", "source": "test"}, {**DIMS, **model_overrides}, ops)


def seq(req_id, num_tokens: int, computed: int, samples: bool = True) -> ScheduledSeq:
    return ScheduledSeq(Request(req_id, 0.0, max(computed + num_tokens, 1), 4), num_tokens, computed, samples)


def plan(*seqs, **kw) -> BatchPlan:
    return BatchPlan(0, tuple(seqs), **kw)

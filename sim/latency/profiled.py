"""Profiled latency model: step times from measured per-op latency curves (profile files).

A *profile* (`sim.latency.profile.Profile`, a JSON file documented in docs/formats.md) is written
by `calibrate`: micro-benchmarks of the engine's own ops, or an importer of published per-op data.
It loads without torch or scipy and its curves (`sim.latency.curves`) are evaluated in plain
Python, so a planner can simulate with measured data on a laptop. A step is composed as the engine runs it: per layer
the GEMMs, norms, rotary, KV writes and residual adds over all tokens of the step, prefill
attention per chunk over (chunk, context), decode attention once over (batch, mean KV length; the
longest with `meta.attn_decode_kv = "max"`, less `meta.attn_decode_padding_discount` of the padding's
share), two all-reduces when TP > 1; once per step the embedding, final norm, LM head and sampler,
the swap copies and the engine's host overhead. `meta.in_step_scale` multiplies the op curves inside a step
(ops timed alone run in other cache conditions), `meta.in_step_offset_s` (<= 0) is what every step
saves on the ops' per-step floor as timed alone (cold weights, a micro-benchmark's own calls),
`meta.after_idle_s` is charged to the first step
after an idle wait (or, with `meta.after_idle_curve`, the cost at that wait's length), the replica
adds `meta.after_prefill_curve` to the first decode steps after a prefill (`after_prefill_cost`), and
`meta.executor_skips_padding` leaves static batching's padding uncharged.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from policies import BatchPlan, ConfigError
from policies.batch_plan import ScheduledSeqs
from sim.latency.base import LatencyModel
from sim.latency.curves import PiecewiseLinear, locate
from sim.latency.profile import DTYPE_BYTES, OP_INPUTS, Profile

#: groups of ops `meta.in_step_scale` may scale (see the module docstring)
IN_STEP_SCALE_KEYS = ("dense", "attn_prefill", "attn_decode")


def _in_step_scale(raw: Any) -> tuple[float, float, float]:
    """(dense, attn_prefill, attn_decode) factors from `meta.in_step_scale` (absent: 1, 1, 1)."""
    if raw is None:
        return 1.0, 1.0, 1.0
    if not isinstance(raw, Mapping) or set(raw) - set(IN_STEP_SCALE_KEYS):
        raise ConfigError.at("profile.meta.in_step_scale",
                             f"expected an object with keys among {', '.join(IN_STEP_SCALE_KEYS)}")
    out = []
    for key in IN_STEP_SCALE_KEYS:
        v = raw.get(key, 1.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError.at(f"profile.meta.in_step_scale.{key}", f"expected a positive number, got {v!r}")
        out.append(float(v))
    return out[0], out[1], out[2]


def _after_prefill(raw: Any) -> tuple[float, ...]:
    """`meta.after_prefill_excess` [e_1, ..., e_K], each >= 0, as a tuple (absent: ())."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                                 or not math.isfinite(v) or v < 0 for v in raw):
        raise ConfigError.at("profile.meta.after_prefill_excess", f"expected a list of fractions >= 0, got {raw!r}")
    return tuple(float(v) for v in raw)


def _prefill_curve(raw: Any):
    """`meta.after_prefill_curve` {"prefill_tokens": [ascending counts > 0], "excess_s": [[seconds >= 0 for
    k = 1..K] per count]} as cost(k, prefill tokens) in seconds: linear in log(tokens) between the
    knots, flat above the last, shrinking in proportion below the first; 0 for k > K. None when absent."""
    if raw is None:
        return None
    name = "profile.meta.after_prefill_curve"
    try:
        xs = [float(v) for v in raw["prefill_tokens"]]
        ys = [[float(v) for v in row] for row in raw["excess_s"]]
    except (TypeError, KeyError, ValueError):
        raise ConfigError.at(name, f"expected {{prefill_tokens: [...], excess_s: [[...], ...]}}, got {raw!r}") from None
    if not xs or len(xs) != len(ys) or any(not x > 0 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])) \
            or len({len(row) for row in ys}) != 1 or any(not (math.isfinite(y) and y >= 0) for row in ys for y in row):
        raise ConfigError.at(name, "expected ascending prefill_tokens > 0 and one row of excess_s >= 0 per count, "
                             f"all rows of one length, got {raw!r}")
    lx, num_k = [math.log(x) for x in xs], len(ys[0])

    def cost(k: int, prefill_tokens: int) -> float:
        if not 0 < k <= num_k or prefill_tokens <= 0:
            return 0.0
        if prefill_tokens <= xs[0]:
            return ys[0][k - 1] * prefill_tokens / xs[0]
        if prefill_tokens >= xs[-1]:
            return ys[-1][k - 1]
        i, t = locate(lx, math.log(prefill_tokens))
        return ys[i][k - 1] + (ys[i + 1][k - 1] - ys[i][k - 1]) * t

    return cost


def _discount_table(raw: Any):
    """`meta.attn_decode_padding_discount` {"batch": [ascending], "max_kv": [ascending], "discount":
    [[share in [0, 1] per max_kv] per batch]} as share(batch, longest KV length): bilinear between
    the knots, the nearest edge beyond them (one knot on an axis: flat along it; `Grid2D` needs two).
    None when absent."""
    if raw is None:
        return None
    name = "profile.meta.attn_decode_padding_discount"
    try:
        xs, ys = [float(v) for v in raw["batch"]], [float(v) for v in raw["max_kv"]]
        zs = [[float(v) for v in row] for row in raw["discount"]]
    except (TypeError, KeyError, ValueError):
        raise ConfigError.at(name, f"expected {{batch: [...], max_kv: [...], discount: [[...], ...]}}, "
                                   f"got {raw!r}") from None
    if not xs or not ys or any(b <= a for a, b in zip(xs, xs[1:])) or any(b <= a for a, b in zip(ys, ys[1:])) \
            or len(zs) != len(xs) or any(len(row) != len(ys) for row in zs) \
            or any(not (math.isfinite(z) and 0.0 <= z <= 1.0) for row in zs for z in row):
        raise ConfigError.at(name, "expected ascending batch and max_kv and one row of shares in [0, 1] per batch, "
                             f"one share per max_kv, got {raw!r}")

    def at(knots, v):  # `locate` clamped to the knots (one knot: (0, 0.0) already)
        i, t = locate(knots, v)
        return i, min(max(t, 0.0), 1.0)

    def share(batch: float, max_kv: float) -> float:
        (i, s), (j, t) = at(xs, batch), at(ys, max_kv)
        i2, j2 = min(i + 1, len(xs) - 1), min(j + 1, len(ys) - 1)
        return ((1 - s) * ((1 - t) * zs[i][j] + t * zs[i][j2]) + s * ((1 - t) * zs[i2][j] + t * zs[i2][j2]))

    return share


def _idle_curve(raw: Any):
    """`meta.after_idle_curve` {"idle_s": [ascending seconds > 0], "excess_s": [seconds >= 0]} as a
    function of log(idle seconds), linear between the knots and flat beyond them; None when absent."""
    if raw is None:
        return None
    try:
        xs, ys = [float(v) for v in raw["idle_s"]], [float(v) for v in raw["excess_s"]]
    except (TypeError, KeyError, ValueError):
        raise ConfigError.at("profile.meta.after_idle_curve",
                             f"expected {{idle_s: [...], excess_s: [...]}}, got {raw!r}") from None
    if not xs or len(xs) != len(ys) or any(not x > 0 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])) \
            or any(not (math.isfinite(y) and y >= 0) for y in ys):
        raise ConfigError.at("profile.meta.after_idle_curve", "expected ascending idle_s > 0 and as many excess_s >= 0, "
                             f"got {raw!r}")
    lx = [math.log(x) for x in xs]

    def cost(v: float) -> float:
        if v <= lx[0]:
            return ys[0]
        if v >= lx[-1]:
            return ys[-1]
        i, t = locate(lx, v)
        return ys[i] + (ys[i + 1] - ys[i]) * t

    return cost


# --- the latency model --------------------------------------------------------------------------
class ProfiledLatencyModel(LatencyModel):
    """`step_time(plan) -> seconds` from a profile's per-op curves (one TP rank; ranks run in lock-step).

    Per layer: the four GEMMs, activation, two norms, rotary and KV writes over all tokens of the
    step; prefill attention per chunk sequence over (chunk tokens, context length); decode attention
    once over (number of decodes, mean KV length); with tensor parallelism two all-reduces of the
    hidden states. Once per step: embedding, LM head and sampler over sampled sequences, swap copies
    over the plan's bytes, and the engine's host overhead over the number of sequences.
    """

    def __init__(self, profile: Profile, model: Any = None, block_size: int = 16) -> None:
        if model is not None:
            profile.check_model(model)
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError.at("cache.block_size", f"expected a positive integer, got {block_size!r}")
        self.profile = profile
        self.block_size = block_size
        m = profile.model
        self.num_layers = m["num_hidden_layers"]
        self.tp = m["tensor_parallel_size"]
        self.hidden_bytes_per_token = m["hidden_size"] * DTYPE_BYTES[m["dtype"]]
        self.bytes_per_block = profile.kv_bytes_per_token * block_size
        zero = PiecewiseLinear((1.0,), (0.0,))
        self.missing_ops = tuple(sorted(op for op in OP_INPUTS if op not in profile.ops))
        self.decode_kv = profile.meta.get("attn_decode_kv", "mean")
        if self.decode_kv not in ("mean", "max"):
            raise ConfigError.at("profile.meta.attn_decode_kv",
                                 f"{self.decode_kv!r} is not allowed; choose one of mean, max")
        # the share of a padded decode batch's attention its padding does not cost ("max" only)
        self._padding_discount = _discount_table(profile.meta.get("attn_decode_padding_discount"))
        self.kv_write_in_attention = bool(profile.meta.get("attention_includes_kv_write", False))
        self.scale = _in_step_scale(profile.meta.get("in_step_scale"))
        self.skips_padding = profile.meta.get("executor_skips_padding", False)
        if not isinstance(self.skips_padding, bool):
            raise ConfigError.at("profile.meta.executor_skips_padding",
                                 f"expected true or false, got {self.skips_padding!r}")
        self.after_idle_s = profile.meta.get("after_idle_s", 0.0)
        if isinstance(self.after_idle_s, bool) or not isinstance(self.after_idle_s, (int, float)) \
                or not math.isfinite(self.after_idle_s) or self.after_idle_s < 0:
            raise ConfigError.at("profile.meta.after_idle_s", f"expected seconds >= 0, got {self.after_idle_s!r}")
        self.after_idle_s = float(self.after_idle_s)
        self._idle_curve = _idle_curve(profile.meta.get("after_idle_curve"))
        self.after_prefill_excess = _after_prefill(profile.meta.get("after_prefill_excess"))
        self._prefill_curve = _prefill_curve(profile.meta.get("after_prefill_curve"))
        # the replica counts decode steps after a prefill only for a model that charges them
        self.has_after_prefill = bool(self.after_prefill_excess) or self._prefill_curve is not None
        self.offset_s = profile.meta.get("in_step_offset_s", 0.0)
        if isinstance(self.offset_s, bool) or not isinstance(self.offset_s, (int, float)) \
                or not math.isfinite(self.offset_s) or self.offset_s > 0:
            raise ConfigError.at("profile.meta.in_step_offset_s", f"expected seconds <= 0, got {self.offset_s!r}")
        self.offset_s = float(self.offset_s)
        self._op = {name: (profile.ops[name].curve if name in profile.ops else zero) for name in OP_INPUTS}
        if "attn_prefill" not in profile.ops or "attn_decode" not in profile.ops:  # guarded by from_dict
            raise ConfigError.at("profile.ops", "attention curves are required")

    @classmethod
    def from_file(cls, path: str | Path, model: Any = None, block_size: int = 16) -> "ProfiledLatencyModel":
        return cls(Profile.load(path), model=model, block_size=block_size)

    def breakdown(self, plan: BatchPlan, scaled: bool = True) -> dict[str, float]:
        """Seconds per component of the step (sums to `step_time(plan)`).

        `scaled=False` leaves out the profile's `in_step_scale` (the isolated op curves as timed).
        """
        op = self._op
        skip = self.skips_padding
        num_tokens = plan.num_live_tokens if skip else plan.num_tokens
        seqs = plan.seqs
        num_decode, decode_kv, max_kv = 0, 0, 0
        if type(seqs) is ScheduledSeqs:  # the leading decodes, read from their contexts (no entries built)
            contexts, seqs = seqs.contexts, seqs.rest
            if contexts:  # each samples one token after its context: context_len = context + 1
                num_decode, decode_kv, max_kv = len(contexts), sum(contexts) + len(contexts), max(contexts) + 1
        num_sampled = num_decode + sum(1 for s in seqs if s.samples or (s.is_padding and not skip))
        if plan.spec_token_ids:  # a verify scores every draft position too
            num_sampled += plan.totals.num_spec_tokens
        num_seqs = plan.num_seqs - (sum(1 for s in seqs if s.is_padding) if skip else 0)
        prefill_attn = 0.0
        num_prefill_seqs = 0
        for s in seqs:
            if skip and s.is_padding:
                continue
            if s.is_decode:
                num_decode += 1
                decode_kv += s.context_len
                max_kv = max(max_kv, s.context_len)
            else:
                num_prefill_seqs += 1
                prefill_attn += op["attn_prefill"](s.num_tokens, s.context_len)
        if not skip:  # static batching: the padded keys/values its live decodes read (a padded engine's)
            decode_kv += plan.padding_context
        kv = (max_kv if self.decode_kv == "max" else decode_kv / num_decode) if num_decode else 0
        decode_attn = op["attn_decode"](num_decode, kv) if num_decode else 0.0
        if self.decode_kv == "max" and self._padding_discount is not None and num_decode and max_kv:
            pad = 1.0 - decode_kv / (num_decode * max_kv)  # the padding's share of the padded batch
            if pad > 0:
                decode_attn *= 1.0 - self._padding_discount(num_decode, max_kv) * pad
        t = num_tokens
        linear = op["qkv_proj"](t) + op["o_proj"](t) + op["gate_up_proj"](t) + op["down_proj"](t)
        elementwise = op["act"](t) + 2 * op["input_norm"](t) + op["rotary"](t) + 2 * op["residual_add"](t)
        if not self.kv_write_in_attention:
            elementwise += op["kv_write"](t)
        comm = 2 * op["all_reduce"](t * self.hidden_bytes_per_token) if self.tp > 1 and t else 0.0
        out_bytes, in_bytes = plan.swap_bytes(self.bytes_per_block)
        L = self.num_layers
        dense, s_pre, s_dec = self.scale if scaled else (1.0, 1.0, 1.0)
        return {
            "linear": dense * L * linear,
            "elementwise": dense * L * elementwise,
            "attn_prefill": s_pre * L * prefill_attn,
            "attn_decode": s_dec * L * decode_attn,
            "all_reduce": L * comm,
            "embed": dense * (op["embed"](t) + op["input_norm"](t)),  # embedding and the final norm
            "lm_head": dense * (op["lm_head"](num_sampled) + op["sampler"](num_sampled)),
            "swap": op["swap_out"](out_bytes) + op["swap_in"](in_bytes),
            "overhead": (op["step_overhead"](num_seqs) + op["prefill_overhead"](num_prefill_seqs)
                         + (self.offset_s if scaled else 0.0) if not plan.is_empty else 0.0),
        }

    def after_prefill_factor(self, k: int) -> float:
        """The factor on the `k`-th decode-only step after a step that carried prefill tokens:
        1 + `meta.after_prefill_excess`[k - 1], 1 beyond it."""
        e = self.after_prefill_excess
        return 1.0 + e[k - 1] if 0 < k <= len(e) else 1.0

    def after_prefill_cost(self, k: int, prefill_tokens: int, seconds: float) -> float:
        """Seconds the `k`-th decode-only step after a step of `prefill_tokens` prefill tokens takes,
        its plan alone costing `seconds`: times `after_prefill_factor(k)`, plus `meta.after_prefill_curve`
        at (k, prefill_tokens). The simulator's replica applies it (a plan's step time cannot know what
        ran before it: a prefill leaves the caches to its activations, more the longer it was)."""
        seconds *= self.after_prefill_factor(k)
        if self._prefill_curve is not None:
            seconds += self._prefill_curve(k, prefill_tokens)
        return seconds

    def after_idle_cost(self, idle_s: float) -> float:
        """Seconds the first step after `idle_s` of idleness costs on top of its plan: `meta.after_idle_curve`
        interpolated in log(idle) between its knots and flat beyond them, else `after_idle_s`."""
        if self._idle_curve is None:
            return self.after_idle_s
        return self._idle_curve(math.log(max(idle_s, 1e-6)))

    def step_time(self, plan: BatchPlan) -> float:
        """Seconds one step of `plan` takes on the profiled device."""
        return float(sum(self.breakdown(plan).values()))

    def is_pure(self) -> bool:
        return True  # step_time depends on the plan alone: the simulator's decode stretches may use it

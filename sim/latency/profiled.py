"""Profiled latency model: step times from measured per-op latency curves (profile files).

A *profile* is a JSON file (`"format": "servesim-profile"`, documented in docs/formats.md) written
by `calibrate`: micro-benchmarks of the engine's own ops, or an importer of published per-op data.
It loads here without torch or scipy and its curves are evaluated in plain Python, so a planner
can simulate with measured data on a laptop. A step is composed as the engine runs it: per layer
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

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from policies import BatchPlan, ConfigError
from records.files import read_json_object, write_json
from sim.latency.base import LatencyModel

FORMAT = "servesim-profile"
VERSION = 1

#: model dims a profile records; a mismatch with the simulated model is an error.
MODEL_DIMS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "tensor_parallel_size",
)
REQUIRED_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attn_prefill", "attn_decode", "lm_head")
#: op -> its inputs (the file must agree)
OP_INPUTS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("num_tokens",), "o_proj": ("num_tokens",), "gate_up_proj": ("num_tokens",),
    "down_proj": ("num_tokens",), "act": ("num_tokens",), "input_norm": ("num_tokens",),
    "rotary": ("num_tokens",), "kv_write": ("num_tokens",), "residual_add": ("num_tokens",), "embed": ("num_tokens",),
    "lm_head": ("num_tokens",), "sampler": ("num_tokens",),
    "attn_prefill": ("num_tokens", "context_len"), "attn_decode": ("batch_size", "kv_len"),
    "all_reduce": ("bytes",), "swap_out": ("bytes",), "swap_in": ("bytes",), "step_overhead": ("num_seqs",),
    "prefill_overhead": ("num_seqs",),
}
#: groups of ops `meta.in_step_scale` may scale (see the module docstring)
IN_STEP_SCALE_KEYS = ("dense", "attn_prefill", "attn_decode")
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
               "fp8": 1, "float8": 1, "int8": 1}


def _err(field_name: str, msg: str) -> ConfigError:
    return ConfigError(f"{field_name}: {msg}")


# --- curves -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PiecewiseLinear:
    """Monotone piecewise-linear curve through (x, y) knots; see the module docstring for the ends."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or not self.x:
            raise ValueError("curve: x and y must be non-empty and of equal length")
        if any(b <= a for a, b in zip(self.x, self.x[1:])):
            raise ValueError("curve.x: knots must be strictly increasing")
        if any(not math.isfinite(v) or v < 0 for v in self.y):
            raise ValueError("curve.y: values must be finite and >= 0")

    def __call__(self, x: float) -> float:
        if x <= 0:
            return 0.0
        xs, ys = self.x, self.y
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            if len(xs) == 1:
                return ys[0]
            slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
            return ys[-1] + slope * (x - xs[-1])
        i = bisect.bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    def to_dict(self) -> dict:
        return {"kind": "pwl", "x": list(self.x), "y": list(self.y)}


@dataclass(frozen=True)
class Bilinear:
    """``c0 + cx*x + cy*y + cxy*x*y`` with non-negative coefficients: monotone in x and y."""

    coef: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        if len(self.coef) != 4 or any(not math.isfinite(c) or c < 0 for c in self.coef):
            raise ValueError("curve.coef: expected 4 finite non-negative numbers")

    def __call__(self, x: float, y: float) -> float:
        if x <= 0:
            return 0.0
        c0, cx, cy, cxy = self.coef
        return c0 + cx * x + cy * y + cxy * x * y

    def to_dict(self) -> dict:
        return {"kind": "bilinear", "coef": list(self.coef)}


def _locate(knots: tuple[float, ...], v: float) -> tuple[int, float]:
    """(i, t): v = knots[i] + t * (knots[i+1] - knots[i]); t = 0 below the grid, t > 1 beyond it."""
    if len(knots) == 1 or v <= knots[0]:
        return 0, 0.0
    if v >= knots[-1]:
        i = len(knots) - 2
    else:
        i = bisect.bisect_right(knots, v) - 1
    return i, (v - knots[i]) / (knots[i + 1] - knots[i])


@dataclass(frozen=True)
class Grid2D:
    """Bilinear interpolation in a rectangular grid of medians (see the module docstring)."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    z: tuple[tuple[float, ...], ...]  # z[i][j] at (x[i], y[j])
    y_minus_x: bool = False

    def __post_init__(self) -> None:
        if len(self.x) < 2 or len(self.y) < 2:
            raise ValueError("curve: a grid needs at least 2 knots on each axis")
        for name, knots in (("x", self.x), ("y", self.y)):
            if any(b <= a for a, b in zip(knots, knots[1:])):
                raise ValueError(f"curve.{name}: knots must be strictly increasing")
        if len(self.z) != len(self.x) or any(len(row) != len(self.y) for row in self.z):
            raise ValueError("curve.z: expected len(x) rows of len(y) values")
        if any(not math.isfinite(v) or v < 0 for row in self.z for v in row):
            raise ValueError("curve.z: values must be finite and >= 0")

    def __call__(self, x: float, y: float) -> float:
        if x <= 0:
            return 0.0
        if self.y_minus_x:
            y = y - x
        i, tx = _locate(self.x, x)
        j, ty = _locate(self.y, y)
        z = self.z
        z00, z01, z10, z11 = z[i][j], z[i][j + 1], z[i + 1][j], z[i + 1][j + 1]
        v = (z00 * (1 - tx) * (1 - ty) + z10 * tx * (1 - ty) + z01 * (1 - tx) * ty + z11 * tx * ty)
        return max(v, 0.0)

    def to_dict(self) -> dict:
        return {"kind": "grid", "x": list(self.x), "y": list(self.y), "z": [list(r) for r in self.z],
                "y_minus_x": self.y_minus_x}


def curve_from_dict(d: Mapping, where: str) -> PiecewiseLinear | Bilinear | Grid2D:
    """Build a curve from its JSON form; errors name `where` (the field path)."""
    if not isinstance(d, Mapping):
        raise _err(where, f"expected an object, got {type(d).__name__}")
    kind = d.get("kind")
    try:
        if kind == "pwl":
            return PiecewiseLinear(tuple(float(v) for v in d["x"]), tuple(float(v) for v in d["y"]))
        if kind == "bilinear":
            return Bilinear(tuple(float(v) for v in d["coef"]))
        if kind == "grid":
            return Grid2D(tuple(float(v) for v in d["x"]), tuple(float(v) for v in d["y"]),
                          tuple(tuple(float(v) for v in row) for row in d["z"]), bool(d.get("y_minus_x", False)))
    except KeyError as exc:
        raise _err(where, f"missing key {exc}") from None
    except (TypeError, ValueError) as exc:
        raise _err(where, str(exc)) from None
    raise _err(f"{where}.kind", f"{kind!r} is not allowed; choose one of pwl, bilinear, grid")


# --- profile file -------------------------------------------------------------------------------
@dataclass
class OpProfile:
    """One op's raw points, fitted curve and fit error."""

    name: str
    inputs: tuple[str, ...]
    curve: PiecewiseLinear | Bilinear | Grid2D
    points: list = field(default_factory=list)  # [[x..., seconds], ...]
    fit_error: dict = field(default_factory=dict)  # {"median_abs_pct", "max_abs_pct"}
    source: str = "measured"

    def __call__(self, *xs: float) -> float:
        return self.curve(*xs)

    def to_dict(self) -> dict:
        return {"inputs": list(self.inputs), "points": self.points, "curve": self.curve.to_dict(),
                "fit_error": self.fit_error, "source": self.source}


@dataclass
class Profile:
    """A device's per-op latency curves for one model shape (one TP rank), plus metadata."""

    meta: dict
    model: dict
    ops: dict[str, OpProfile]

    # -- I/O --
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "meta": self.meta, "model": self.model,
                "ops": {name: op.to_dict() for name, op in sorted(self.ops.items())}}

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        return cls.from_dict(read_json_object(path, "profile", missing=FileNotFoundError))

    @classmethod
    def from_dict(cls, data: Any) -> "Profile":
        if not isinstance(data, Mapping):
            raise _err("profile", "expected a JSON object at the top level")
        if data.get("format") != FORMAT:
            raise _err("profile.format", f"{data.get('format')!r} is not allowed; expected {FORMAT!r}")
        if data.get("version") != VERSION:
            raise _err("profile.version", f"{data.get('version')!r} is not supported; expected {VERSION}")
        meta, model, ops_raw = data.get("meta"), data.get("model"), data.get("ops")
        if not isinstance(meta, Mapping):
            raise _err("profile.meta", "missing or not an object")
        if not isinstance(model, Mapping):
            raise _err("profile.model", "missing or not an object")
        for dim in MODEL_DIMS:
            v = model.get(dim)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _err(f"profile.model.{dim}", f"expected a positive integer, got {v!r}")
        if model.get("dtype") not in DTYPE_BYTES:
            raise _err("profile.model.dtype", f"{model.get('dtype')!r} is not allowed; choose one of "
                       f"{', '.join(DTYPE_BYTES)}")
        if not isinstance(ops_raw, Mapping):
            raise _err("profile.ops", "missing or not an object")
        ops: dict[str, OpProfile] = {}
        for name, raw in ops_raw.items():
            where = f"profile.ops.{name}"
            if name not in OP_INPUTS:
                raise _err(where, f"unknown op; choose from {', '.join(OP_INPUTS)}")
            if not isinstance(raw, Mapping):
                raise _err(where, "expected an object")
            inputs = tuple(raw.get("inputs") or ())
            if inputs != OP_INPUTS[name]:
                raise _err(f"{where}.inputs", f"{list(inputs)} does not match {list(OP_INPUTS[name])}")
            curve = curve_from_dict(raw.get("curve"), f"{where}.curve")
            if isinstance(curve, (Bilinear, Grid2D)) != (len(inputs) == 2):
                raise _err(f"{where}.curve.kind", f"a {len(inputs)}-input op needs "
                           f"{'bilinear or grid' if len(inputs) == 2 else 'pwl'}")
            points = raw.get("points", [])
            if not isinstance(points, list) or any(
                    not isinstance(p, (list, tuple)) or len(p) != len(inputs) + 1 for p in points):
                raise _err(f"{where}.points", f"expected a list of [{', '.join(inputs)}, seconds] rows")
            ops[name] = OpProfile(name, inputs, curve, list(points), dict(raw.get("fit_error") or {}),
                                  str(raw.get("source", "measured")))
        missing = [op for op in REQUIRED_OPS if op not in ops]
        if missing:
            raise _err("profile.ops", f"missing required op(s) {', '.join(missing)}")
        return cls(dict(meta), dict(model), ops)

    # -- checks --
    def check_model(self, model: Any) -> None:
        """Raise if `model` (a dict or an object with HF config names) differs in any recorded dim."""
        for dim in MODEL_DIMS:
            theirs = _get_dim(model, dim)
            if theirs is None:
                continue
            if int(theirs) != int(self.model[dim]):
                raise _err(f"profile.model.{dim}",
                           f"profile was made for {dim}={self.model[dim]} but the model has {theirs}; "
                           f"re-run `servesim calibrate` (or import) for this model")

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token on one rank (keys + values, all layers)."""
        m = self.model
        kv_heads = max(m["num_key_value_heads"] // m["tensor_parallel_size"], 1)
        return 2 * m["num_hidden_layers"] * kv_heads * m["head_dim"] * DTYPE_BYTES[m["dtype"]]

    def fit_error_table(self) -> list[tuple[str, int, float, float]]:
        """(op, number of points, median abs %, max abs %) for every op: for CLI output."""
        return [(name, len(op.points), float(op.fit_error.get("median_abs_pct", float("nan"))),
                 float(op.fit_error.get("max_abs_pct", float("nan")))) for name, op in sorted(self.ops.items())]


_ALIASES = {
    "num_hidden_layers": ("num_hidden_layers", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "d_model"),
    "num_attention_heads": ("num_attention_heads", "num_heads", "n_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads"),
    "head_dim": ("head_dim",),
    "intermediate_size": ("intermediate_size", "ffn_dim"),
    "vocab_size": ("vocab_size",),
    "tensor_parallel_size": ("tensor_parallel_size", "tp", "tp_size"),
}


def _in_step_scale(raw: Any) -> tuple[float, float, float]:
    """(dense, attn_prefill, attn_decode) factors from `meta.in_step_scale` (absent: 1, 1, 1)."""
    if raw is None:
        return 1.0, 1.0, 1.0
    if not isinstance(raw, Mapping) or set(raw) - set(IN_STEP_SCALE_KEYS):
        raise _err("profile.meta.in_step_scale", f"expected an object with keys among {', '.join(IN_STEP_SCALE_KEYS)}")
    out = []
    for key in IN_STEP_SCALE_KEYS:
        v = raw.get(key, 1.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise _err(f"profile.meta.in_step_scale.{key}", f"expected a positive number, got {v!r}")
        out.append(float(v))
    return out[0], out[1], out[2]


def _after_prefill(raw: Any) -> tuple[float, ...]:
    """`meta.after_prefill_excess` [e_1, ..., e_K], each >= 0, as a tuple (absent: ())."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                                 or not math.isfinite(v) or v < 0 for v in raw):
        raise _err("profile.meta.after_prefill_excess", f"expected a list of fractions >= 0, got {raw!r}")
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
        raise _err(name, f"expected {{prefill_tokens: [...], excess_s: [[...], ...]}}, got {raw!r}") from None
    if not xs or len(xs) != len(ys) or any(not x > 0 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])) \
            or len({len(row) for row in ys}) != 1 or any(not (math.isfinite(y) and y >= 0) for row in ys for y in row):
        raise _err(name, "expected ascending prefill_tokens > 0 and one row of excess_s >= 0 per count, "
                   f"all rows of one length, got {raw!r}")
    lx, num_k = [math.log(x) for x in xs], len(ys[0])

    def cost(k: int, prefill_tokens: int) -> float:
        if not 0 < k <= num_k or prefill_tokens <= 0:
            return 0.0
        if prefill_tokens <= xs[0]:
            return ys[0][k - 1] * prefill_tokens / xs[0]
        if prefill_tokens >= xs[-1]:
            return ys[-1][k - 1]
        i, t = _locate(lx, math.log(prefill_tokens))
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
        raise _err(name, f"expected {{batch: [...], max_kv: [...], discount: [[...], ...]}}, got {raw!r}") from None
    if not xs or not ys or any(b <= a for a, b in zip(xs, xs[1:])) or any(b <= a for a, b in zip(ys, ys[1:])) \
            or len(zs) != len(xs) or any(len(row) != len(ys) for row in zs) \
            or any(not (math.isfinite(z) and 0.0 <= z <= 1.0) for row in zs for z in row):
        raise _err(name, "expected ascending batch and max_kv and one row of shares in [0, 1] per batch, "
                   f"one share per max_kv, got {raw!r}")

    def at(knots, v):  # `_locate` clamped to the knots (one knot: (0, 0.0) already)
        i, t = _locate(knots, v)
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
        raise _err("profile.meta.after_idle_curve", f"expected {{idle_s: [...], excess_s: [...]}}, got {raw!r}") from None
    if not xs or len(xs) != len(ys) or any(not x > 0 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])) \
            or any(not (math.isfinite(y) and y >= 0) for y in ys):
        raise _err("profile.meta.after_idle_curve", "expected ascending idle_s > 0 and as many excess_s >= 0, "
                   f"got {raw!r}")
    lx = [math.log(x) for x in xs]

    def cost(v: float) -> float:
        if v <= lx[0]:
            return ys[0]
        if v >= lx[-1]:
            return ys[-1]
        i, t = _locate(lx, v)
        return ys[i] + (ys[i + 1] - ys[i]) * t

    return cost


def _get_dim(model: Any, dim: str) -> Any:
    for name in _ALIASES[dim]:
        v = model.get(name) if isinstance(model, Mapping) else getattr(model, name, None)
        if v is not None:
            return v
    return None


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
            raise _err("cache.block_size", f"expected a positive integer, got {block_size!r}")
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
            raise _err("profile.meta.attn_decode_kv", f"{self.decode_kv!r} is not allowed; choose one of mean, max")
        # the share of a padded decode batch's attention its padding does not cost ("max" only)
        self._padding_discount = _discount_table(profile.meta.get("attn_decode_padding_discount"))
        self.kv_write_in_attention = bool(profile.meta.get("attention_includes_kv_write", False))
        self.scale = _in_step_scale(profile.meta.get("in_step_scale"))
        self.skips_padding = profile.meta.get("executor_skips_padding", False)
        if not isinstance(self.skips_padding, bool):
            raise _err("profile.meta.executor_skips_padding", f"expected true or false, got {self.skips_padding!r}")
        self.after_idle_s = profile.meta.get("after_idle_s", 0.0)
        if isinstance(self.after_idle_s, bool) or not isinstance(self.after_idle_s, (int, float)) \
                or not math.isfinite(self.after_idle_s) or self.after_idle_s < 0:
            raise _err("profile.meta.after_idle_s", f"expected seconds >= 0, got {self.after_idle_s!r}")
        self.after_idle_s = float(self.after_idle_s)
        self._idle_curve = _idle_curve(profile.meta.get("after_idle_curve"))
        self.after_prefill_excess = _after_prefill(profile.meta.get("after_prefill_excess"))
        self._prefill_curve = _prefill_curve(profile.meta.get("after_prefill_curve"))
        # the replica counts decode steps after a prefill only for a model that charges them
        self.has_after_prefill = bool(self.after_prefill_excess) or self._prefill_curve is not None
        self.offset_s = profile.meta.get("in_step_offset_s", 0.0)
        if isinstance(self.offset_s, bool) or not isinstance(self.offset_s, (int, float)) \
                or not math.isfinite(self.offset_s) or self.offset_s > 0:
            raise _err("profile.meta.in_step_offset_s", f"expected seconds <= 0, got {self.offset_s!r}")
        self.offset_s = float(self.offset_s)
        self._op = {name: (profile.ops[name].curve if name in profile.ops else zero) for name in OP_INPUTS}
        if "attn_prefill" not in profile.ops or "attn_decode" not in profile.ops:  # guarded by from_dict
            raise _err("profile.ops", "attention curves are required")

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
        num_sampled = sum(1 for s in plan.seqs if s.samples or (s.is_padding and not skip))
        if plan.spec_token_ids:  # a verify scores every draft position too
            num_sampled += plan.totals.num_spec_tokens
        num_seqs = plan.num_seqs - (sum(1 for s in plan.seqs if s.is_padding) if skip else 0)
        prefill_attn = 0.0
        num_prefill_seqs = 0
        num_decode, decode_kv, max_kv = 0, 0, 0
        for s in plan.seqs:
            if skip and s.is_padding:
                continue
            if s.is_decode:
                num_decode += 1
                decode_kv += s.context_len
                max_kv = max(max_kv, s.context_len)
            else:
                num_prefill_seqs += 1
                prefill_attn += op["attn_prefill"](s.num_tokens, s.context_len)
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

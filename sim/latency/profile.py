"""`Profile`: a profile file (`"format": "servesim-profile"`, docs/formats.md) in memory.

A device's per-op latency curves for one model shape (one TP rank), each op with its raw points and
fit error, plus the `meta` the calibration recorded. Loads with the standard library only; every
field is checked on load and a bad one is named (`profile.ops.qkv_proj.curve.kind: ...`).
`sim.latency.profiled.ProfiledLatencyModel` composes steps from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from policies import ConfigError
from records.files import read_json_object, write_json
from sim.latency.curves import Bilinear, Grid2D, PiecewiseLinear, curve_from_dict

FORMAT = "servesim-profile"
VERSION = 1

#: model dims a profile records; a mismatch with the simulated model is an error.
MODEL_DIMS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "tensor_parallel_size",
)
#: a MoE's experts, which a profile records where it has them (absent or 0: a dense MLP)
EXPERT_DIMS = ("num_experts", "num_experts_per_tok")
#: the layer's kind a profile may record, with the value an absent key means (a Llama layer of
#: 16-bit weights and cache); `quantization` is the weights' form (`specs.model_spec.QUANTIZATIONS`),
#: whose GEMMs are other kernels, `kv_cache_dtype` the KV cache's ("auto": the activations' dtype;
#: "fp8" halves the bytes attention reads, with its own kernels)
LAYER_KINDS = {"mlp_kind": ("gated", ("gated", "plain")), "position_embedding": ("rope", ("rope", "learned")),
               "quantization": ("none", ("none", "fp8", "fp8_block", "w4a16", "w8a16")),
               "kv_cache_dtype": ("auto", ("auto", "fp8"))}
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
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
               "fp8": 1, "float8": 1, "int8": 1}


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
            raise ConfigError.at("profile", "expected a JSON object at the top level")
        if data.get("format") != FORMAT:
            raise ConfigError.at("profile.format", f"{data.get('format')!r} is not allowed; expected {FORMAT!r}")
        if data.get("version") != VERSION:
            raise ConfigError.at("profile.version", f"{data.get('version')!r} is not supported; expected {VERSION}")
        meta, model, ops_raw = data.get("meta"), data.get("model"), data.get("ops")
        if not isinstance(meta, Mapping):
            raise ConfigError.at("profile.meta", "missing or not an object")
        if not isinstance(model, Mapping):
            raise ConfigError.at("profile.model", "missing or not an object")
        for dim in MODEL_DIMS:
            v = model.get(dim)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError.at(f"profile.model.{dim}", f"expected a positive integer, got {v!r}")
        for key, (default, allowed) in LAYER_KINDS.items():
            if model.get(key, default) not in allowed:
                raise ConfigError.at(f"profile.model.{key}", f"{model.get(key)!r} is not allowed; choose one of "
                                     f"{', '.join(allowed)}")
        if model.get("dtype") not in DTYPE_BYTES:
            raise ConfigError.at("profile.model.dtype", f"{model.get('dtype')!r} is not allowed; choose one of "
                                 f"{', '.join(DTYPE_BYTES)}")
        if not isinstance(ops_raw, Mapping):
            raise ConfigError.at("profile.ops", "missing or not an object")
        ops: dict[str, OpProfile] = {}
        for name, raw in ops_raw.items():
            where = f"profile.ops.{name}"
            if name not in OP_INPUTS:
                raise ConfigError.at(where, f"unknown op; choose from {', '.join(OP_INPUTS)}")
            if not isinstance(raw, Mapping):
                raise ConfigError.at(where, "expected an object")
            inputs = tuple(raw.get("inputs") or ())
            if inputs != OP_INPUTS[name]:
                raise ConfigError.at(f"{where}.inputs", f"{list(inputs)} does not match {list(OP_INPUTS[name])}")
            curve = curve_from_dict(raw.get("curve"), f"{where}.curve")
            if isinstance(curve, (Bilinear, Grid2D)) != (len(inputs) == 2):
                raise ConfigError.at(f"{where}.curve.kind", f"a {len(inputs)}-input op needs "
                                     f"{'bilinear or grid' if len(inputs) == 2 else 'pwl'}")
            points = raw.get("points", [])
            if not isinstance(points, list) or any(
                    not isinstance(p, (list, tuple)) or len(p) != len(inputs) + 1 for p in points):
                raise ConfigError.at(f"{where}.points", f"expected a list of [{', '.join(inputs)}, seconds] rows")
            ops[name] = OpProfile(name, inputs, curve, list(points), dict(raw.get("fit_error") or {}),
                                  str(raw.get("source", "measured")))
        missing = [op for op in REQUIRED_OPS if op not in ops]
        if missing:
            raise ConfigError.at("profile.ops", f"missing required op(s) {', '.join(missing)}")
        return cls(dict(meta), dict(model), ops)

    # -- checks --
    def check_model(self, model: Any) -> None:
        """Raise if `model` (a dict or an object with HF config names) differs in any recorded dim,
        expert count (`EXPERT_DIMS`; absent means dense) or layer kind (`LAYER_KINDS`; absent means a
        Llama layer on either side)."""
        pairs = [(dim, int(self.model[dim]), int(v)) for dim in MODEL_DIMS if (v := _get_dim(model, dim)) is not None]
        # a MoE is not the dense layer of one expert's width; an OPT layer not a Llama one of the same dims
        pairs += [(dim, int(self.model.get(dim) or 0), int(_get_dim(model, dim) or 0)) for dim in EXPERT_DIMS]
        pairs += [(key, layer_kind(self.model, key), layer_kind(model, key)) for key in LAYER_KINDS]
        for key, mine, theirs in pairs:
            if theirs != mine:
                raise ConfigError.at(f"profile.model.{key}", f"profile was made for {key}={mine} but the model has "
                                     f"{theirs}; re-run `servesim calibrate` (or import) for this model")

    def measured_max(self, name: str) -> tuple[float, ...] | None:
        """The largest value of each input op `name` was measured at: over its points, or its curve's
        last knots where the file keeps no points; None for an absent op or a bare formula."""
        op = self.ops.get(name)
        if op is None:
            return None
        if op.points:
            return tuple(max(float(p[i]) for p in op.points) for i in range(len(op.inputs)))
        c = op.curve
        if isinstance(c, PiecewiseLinear):
            return (c.x[-1],)
        if isinstance(c, Grid2D):  # y_minus_x: the second input is the whole context, chunk included
            return (c.x[-1], c.y[-1] + (c.x[-1] if c.y_minus_x else 0.0))
        return None

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token on one rank (keys + values, all layers)."""
        m = self.model
        kv_heads = max(m["num_key_value_heads"] // m["tensor_parallel_size"], 1)
        element = 1 if layer_kind(m, "kv_cache_dtype") == "fp8" else DTYPE_BYTES[m["dtype"]]
        return 2 * m["num_hidden_layers"] * kv_heads * m["head_dim"] * element

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
    "mlp_kind": ("mlp_kind",),
    "position_embedding": ("position_embedding",),
    "quantization": ("quantization",),
    "kv_cache_dtype": ("kv_cache_dtype",),
    "num_experts": ("num_experts", "num_local_experts"),
    "num_experts_per_tok": ("num_experts_per_tok",),
}


def _get_dim(model: Any, dim: str) -> Any:
    for name in _ALIASES[dim]:
        v = model.get(name) if isinstance(model, Mapping) else getattr(model, name, None)
        if v is not None:
            return v
    return None


def layer_kind(model: Any, key: str) -> str:
    """A model's (dict or object) layer kind `key` of `LAYER_KINDS`, Llama's where it records none."""
    return _get_dim(model, key) or LAYER_KINDS[key][0]

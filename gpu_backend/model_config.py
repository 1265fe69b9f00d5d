"""`ModelConfig`: what the engine builds a Llama-family decoder from, read from a HF `config.json`.

Its dimensions (HF names) are one `specs.ModelSpec` (`spec`), the shape the simulator uses too, from
which the projection widths and KV bytes come; the rest is what only the engine needs (norm epsilon,
rotary base, token ids). Unknown HF keys are ignored; features this engine does not implement (rope
scaling, biases, other activations) are refused with an error naming the field, rather than
silently computing a different model.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from policies import ConfigError
from policies.config import check_int, check_number
from records.files import read_json_object
from specs.model_spec import ModelSpec, kv_bytes


@dataclass(frozen=True)
class ModelConfig:
    """Llama-family dimensions (HF names). `head_dim` defaults to hidden_size // num_attention_heads."""

    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int | None = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 1
    eos_token_id: int | tuple[int, ...] | None = 2

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            check_int(f"model.{name}", getattr(self, name), 1)
        check_int("model.head_dim", self.head_dim, 1, allow_none=True)
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ConfigError(f"model.hidden_size: {self.hidden_size} is not divisible by "
                                  f"num_attention_heads={self.num_attention_heads}; give head_dim")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.head_dim % 2:
            raise ConfigError(f"model.head_dim: rotary embeddings need an even head_dim, got {self.head_dim}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"model.num_key_value_heads: {self.num_key_value_heads} must divide "
                              f"num_attention_heads={self.num_attention_heads}")
        check_number("model.rms_norm_eps", self.rms_norm_eps, 0.0, strict_min=True)
        check_number("model.rope_theta", self.rope_theta, 0.0, strict_min=True)
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """All EOS ids (HF allows one id or a list)."""
        if self.eos_token_id is None:
            return frozenset()
        if isinstance(self.eos_token_id, int):
            return frozenset({self.eos_token_id})
        return frozenset(self.eos_token_id)

    @cached_property
    def spec(self) -> ModelSpec:
        """These dimensions as the one model shape (the simulator's `ModelSpec`; a Llama layer)."""
        return ModelSpec(name="engine", num_layers=self.num_hidden_layers, hidden_size=self.hidden_size,
                         num_attention_heads=self.num_attention_heads, num_kv_heads=self.num_key_value_heads,
                         intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
                         max_position_embeddings=self.max_position_embeddings, head_dim=self.head_dim,
                         tie_word_embeddings=self.tie_word_embeddings)

    @property
    def q_size(self) -> int:
        return self.spec.q_size

    @property
    def kv_size(self) -> int:
        return self.spec.kv_size

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of every layer for one token, in `dtype_bytes` elements (`specs.model_spec.kv_bytes`)."""
        s = self.spec
        return kv_bytes(s.num_layers, s.num_kv_heads, s.head_dim, dtype_bytes)

    def to_hf_dict(self) -> dict:
        """A dict `transformers.LlamaConfig(**d)` accepts (to build the reference model)."""
        d = asdict(self)
        d["eos_token_id"] = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        d.update(hidden_act="silu", attention_bias=False, mlp_bias=False, model_type="llama")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """From a HF config dict: checks what this engine does not implement, keeps the known keys."""
        act = d.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"model.hidden_act: {act!r} is not allowed; choose one of silu")
        for flag in ("attention_bias", "mlp_bias"):
            if d.get(flag):
                raise ConfigError(f"model.{flag}: biases are not implemented; expected false")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ConfigError(f"model.rope_scaling: rope type {rope_type!r} is not implemented; choose one of default")
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if "rope_theta" not in known and "rope_theta" in rope:
            known["rope_theta"] = rope["rope_theta"]
        return cls(**known)

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        """From a HF `config.json` file (or a folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        return cls.from_dict(read_json_object(path, "model.config", missing=FileNotFoundError))

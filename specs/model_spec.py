"""`ModelSpec`: the dimensions of a transformer that decide its FLOPs, weight bytes and KV bytes.

Only what the simulator needs: no weights, no tokenizer. Specs come from the catalog
(`specs.model_catalog`) or from a Hugging Face `config.json` (`ModelSpec.from_hf_config`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from policies.config import ConfigError, check_choice, check_int, read_json_object

MLP_KINDS = ("gated", "plain")  # gated: SwiGLU gate/up/down (Llama); plain: fc1 -> ReLU -> fc2 (OPT)
POSITION_KINDS = ("rope", "learned")
HF_MODEL_TYPES = ("llama", "mistral", "mixtral", "opt")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape (names follow Hugging Face configs).

    `num_experts == 0` means a dense MLP; otherwise every token goes through `num_experts_per_tok`
    of `num_experts` experts, each an MLP of `intermediate_size`. `dtype_bytes` is the weights'
    element size; `kv_dtype_bytes` the KV cache's (None = same as the weights).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    head_dim: int | None = None  # None = hidden_size // num_attention_heads
    num_experts: int = 0
    num_experts_per_tok: int = 0
    tie_word_embeddings: bool = False
    mlp_kind: str = "gated"
    position_embedding: str = "rope"
    bias: bool = False  # linear layers and norms carry biases (OPT)
    dtype_bytes: int = 2
    kv_dtype_bytes: int | None = None

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "intermediate_size",
                  "vocab_size", "max_position_embeddings"):
            check_int(f"model.{f}", getattr(self, f), 1)
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        check_int("model.head_dim", self.head_dim, 1)
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError(f"model.num_kv_heads: {self.num_kv_heads} must divide "
                              f"num_attention_heads={self.num_attention_heads}")
        check_int("model.num_experts", self.num_experts, 0)
        check_int("model.num_experts_per_tok", self.num_experts_per_tok, 0)
        if self.num_experts and not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ConfigError(f"model.num_experts_per_tok: must be in 1..num_experts={self.num_experts}, "
                              f"got {self.num_experts_per_tok}")
        check_choice("model.mlp_kind", self.mlp_kind, MLP_KINDS)
        check_choice("model.position_embedding", self.position_embedding, POSITION_KINDS)
        check_choice("model.dtype_bytes", self.dtype_bytes, (1, 2, 4))
        if self.kv_dtype_bytes is None:
            object.__setattr__(self, "kv_dtype_bytes", self.dtype_bytes)
        check_choice("model.kv_dtype_bytes", self.kv_dtype_bytes, (1, 2, 4))

    # --- per-layer shapes ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of K (and of V) over all KV heads."""
        return self.num_kv_heads * self.head_dim

    @property
    def num_mlp_matrices(self) -> int:
        return 3 if self.mlp_kind == "gated" else 2

    @property
    def expert_params(self) -> int:
        """Weights of one MLP (one expert for MoE)."""
        return self.num_mlp_matrices * self.hidden_size * self.intermediate_size

    @property
    def attn_params_per_layer(self) -> int:
        h = self.hidden_size
        n = h * (self.q_size + 2 * self.kv_size) + self.q_size * h  # QKV + O
        if self.bias:
            n += self.q_size + 2 * self.kv_size + h
        return n

    @property
    def mlp_params_per_layer(self) -> int:
        """All MLP weights of a layer (every expert plus the router for MoE)."""
        if self.is_moe:
            return self.num_experts * self.expert_params + self.hidden_size * self.num_experts
        n = self.expert_params
        if self.bias:
            n += self.intermediate_size + self.hidden_size
        return n

    @property
    def norm_params_per_layer(self) -> int:
        # two norms per layer; LayerNorm (OPT) has a bias too, RMSNorm only a weight
        return 2 * self.hidden_size * (2 if self.bias else 1)

    @property
    def embedding_params(self) -> int:
        n = self.vocab_size * self.hidden_size
        if self.position_embedding == "learned":
            n += (self.max_position_embeddings + 2) * self.hidden_size  # OPT offsets positions by 2
        return n

    @property
    def num_params(self) -> int:
        """Total parameters (all experts counted), derived from the dimensions."""
        per_layer = self.attn_params_per_layer + self.mlp_params_per_layer + self.norm_params_per_layer
        final_norm = self.hidden_size * (2 if self.bias else 1)
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.embedding_params + self.num_layers * per_layer + final_norm + lm_head

    @property
    def num_active_params(self) -> int:
        """Parameters one token goes through (MoE: only its experts)."""
        if not self.is_moe:
            return self.num_params
        unused = self.num_experts - self.num_experts_per_tok
        return self.num_params - self.num_layers * unused * self.expert_params

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers, unsharded (`specs.memory.kv_bytes_per_token`)."""
        from specs.memory import kv_bytes_per_token  # memory imports this module

        return kv_bytes_per_token(self, 1)

    # --- construction -------------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> "ModelSpec":
        """Read a Hugging Face `config.json` (a file, or a folder holding one) of a llama, mistral,
        mixtral or opt model."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        cfg = read_json_object(p, "model.name")
        model_type = cfg.get("model_type")
        if model_type not in HF_MODEL_TYPES:
            raise ConfigError(f"model.name: {p}: model_type {model_type!r} is not supported; "
                              f"choose one of {', '.join(HF_MODEL_TYPES)}")
        name = name or cfg.get("_name_or_path") or p.parent.name or model_type
        dtype_bytes = DTYPE_BYTES.get(str(cfg.get("torch_dtype", "float16")), 2)

        def need(key: str):
            if key not in cfg:
                raise ConfigError(f"model.name: {p} lacks {key!r}, needed for model_type {model_type!r}")
            return cfg[key]

        try:
            if model_type == "opt":
                heads = need("num_attention_heads")
                if cfg.get("word_embed_proj_dim", cfg["hidden_size"]) != cfg["hidden_size"]:
                    raise ConfigError(f"model.name: {p}: OPT with word_embed_proj_dim != hidden_size "
                                      "(opt-350m) is not supported")
                return cls(
                    name=name, num_layers=need("num_hidden_layers"), hidden_size=need("hidden_size"),
                    num_attention_heads=heads, num_kv_heads=heads, intermediate_size=need("ffn_dim"),
                    vocab_size=need("vocab_size"), max_position_embeddings=need("max_position_embeddings"),
                    tie_word_embeddings=cfg.get("tie_word_embeddings", True), mlp_kind="plain",
                    position_embedding="learned", bias=cfg.get("enable_bias", True), dtype_bytes=dtype_bytes,
                )
            heads = need("num_attention_heads")
            return cls(
                name=name, num_layers=need("num_hidden_layers"), hidden_size=need("hidden_size"),
                num_attention_heads=heads, num_kv_heads=cfg.get("num_key_value_heads") or heads,
                intermediate_size=need("intermediate_size"), vocab_size=need("vocab_size"),
                max_position_embeddings=need("max_position_embeddings"), head_dim=cfg.get("head_dim"),
                num_experts=cfg.get("num_local_experts", 0) if model_type == "mixtral" else 0,
                num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if model_type == "mixtral" else 0,
                tie_word_embeddings=cfg.get("tie_word_embeddings", False),
                bias=bool(cfg.get("attention_bias", False)), dtype_bytes=dtype_bytes,
            )
        except ConfigError as e:
            if str(e).startswith("model.name"):
                raise
            raise ConfigError(f"model.name: {p}: {e}") from None

    def with_dtype(self, dtype: str, kv_cache_dtype: str = "auto") -> "ModelSpec":
        """A copy with weights (and KV cache) stored in `dtype` ("auto" keeps the current one)."""
        from dataclasses import replace

        wb = self.dtype_bytes if dtype == "auto" else DTYPE_BYTES[dtype]
        kb = wb if kv_cache_dtype == "auto" else DTYPE_BYTES[kv_cache_dtype]
        return replace(self, dtype_bytes=wb, kv_dtype_bytes=kb)

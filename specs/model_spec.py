"""`ModelSpec`: the dimensions of a transformer that decide its FLOPs, weight bytes and KV bytes.

Only what the simulator needs: no weights, no tokenizer. Specs come from the catalog
(`specs.model_catalog`) or from a Hugging Face `config.json` (`ModelSpec.from_hf_config`).

Two families beyond the Llama shape, both DeepSeek's (HF names):
- multi-head latent attention (MLA, `kv_lora_rank > 0`): K and V are one compressed latent of
  `kv_lora_rank` values per token plus a shared rotary key of `qk_rope_head_dim`, so the KV cache
  holds `kv_lora_rank + qk_rope_head_dim` values per token and layer (no separate K and V, no KV
  heads); queries go through a `q_lora_rank` bottleneck when it is set;
- fine-grained MoE: routed experts, shared experts and leading dense layers (see `ModelSpec`).
Precision: `dtype_bytes` is the weights' element size; activations are 16-bit when the weights are
FP8 (vLLM's W8A8 FP8 keeps bf16 activations) and the KV cache defaults to the activation dtype,
as vLLM's `kv_cache_dtype="auto"` does: FP8 weights and FP8 KV are independent choices. One-byte
weights are FP8 in one of two forms (`quantization`): scaled per tensor or channel, or per block,
which vLLM runs on other GEMM kernels (`specs.quantization`). Integer weights with 16-bit
activations (AWQ, GPTQ: `quantization` "w4a16", "w8a16") keep `dtype_bytes` at the activations'
2 and store `weight_element_bytes` a weight (4 or 8 bits and a 16-bit scale per 128).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from policies.config import ConfigError, check_choice, check_int
from records.files import read_json_object
from specs.quantization import checkpoint_quantization

MLP_KINDS = ("gated", "plain")  # gated: SwiGLU gate/up/down (Llama); plain: fc1 -> ReLU -> fc2 (OPT)
POSITION_KINDS = ("rope", "learned")
#: Hugging Face `model_type`s read from a config.json. Dense decoders of llama's layer shapes (RMSNorm,
#: rotary, a gated MLP of three matrices; qwen2's q/k/v biases and qwen3's q/k norms are too small to
#: time) read as llama; mixtral, qwen3_moe and qwen2_moe (its shared expert too) as a MoE of such
#: layers; opt and DeepSeek's MLA apart.
LLAMA_SHAPED = ("llama", "mistral", "qwen2", "qwen3", "granite", "gemma")
HF_MODEL_TYPES = LLAMA_SHAPED + ("mixtral", "qwen3_moe", "qwen2_moe", "opt", "deepseek_v2", "deepseek_v3")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1}
#: the weights' form: unquantized, FP8 scaled per tensor or channel, FP8 scaled per block of weights,
#: 4- or 8-bit integers dequantized to 16 bits inside the GEMM (weight-only: AWQ, GPTQ)
QUANTIZATIONS = ("none", "fp8", "fp8_block", "w4a16", "w8a16")
#: bytes a weight-only integer weight stores: its bits and a 16-bit scale per group of 128 (the
#: common group size; per-channel scales, group -1, would be ~1.5% less at 4 bits)
INT_WEIGHT_BYTES = {"w4a16": 0.5 + 2 / 128, "w8a16": 1.0 + 2 / 128}


def form_dtype_bytes(form: str) -> int | None:
    """`dtype_bytes` of weights in `form` (`QUANTIZATIONS`): 1 for FP8 (one-byte GEMMs), 2 for the
    integer forms (dequantized into 16-bit GEMMs); None for unquantized ones (their own dtype's)."""
    return 1 if form.startswith("fp8") else 2 if form in INT_WEIGHT_BYTES else None


def kv_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int, tp: int = 1) -> int:
    """K and V of one token on one GPU: 2 x layers x kv_heads/tp x head_dim x dtype bytes.

    The one definition of KV bytes per token, from plain dimensions so that the engine's
    `gpu_backend.model_config.ModelConfig` (HF names) uses it too; KV heads fewer than `tp` are
    replicated (one per GPU), as in vLLM.
    """
    return 2 * num_layers * max(1, num_kv_heads // tp) * head_dim * dtype_bytes



def mla_kv_bytes(num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype_bytes: int) -> int:
    """MLA's cache of one token: (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes, on every
    TP rank (the latent has no heads to shard). DeepSeek-V3 in bf16: (512 + 64) x 61 x 2 = 70,272."""
    return num_layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape (names follow Hugging Face configs).

    `num_experts == 0` means a dense MLP; otherwise every token goes through `num_experts_per_tok`
    of `num_experts` routed experts, each an MLP of `moe_intermediate_size` (None = `intermediate_size`),
    plus `num_shared_experts` shared ones; the first `first_k_dense_replace` layers stay dense.
    `kv_lora_rank > 0` makes attention MLA (see the module docstring). `dtype_bytes` is the weights'
    element size; `kv_dtype_bytes` the KV cache's (None = the activations', `act_dtype_bytes`).
    `quantization` names the weights' form (`QUANTIZATIONS`): one-byte weights are "fp8" (per tensor,
    as vLLM's `--quantization fp8` makes them, unless "fp8_block"); "w4a16" and "w8a16" are integer
    weights over 16-bit activations (`dtype_bytes` 2, `weight_element_bytes` below 2).
    `num_nextn_predict_layers`: DeepSeek's multi-token-prediction modules shipped beside the model
    (speculative decoding's "mtp" proposer), not counted in `num_params`.
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
    quantization: str = "none"
    # fine-grained MoE (DeepSeek)
    moe_intermediate_size: int | None = None  # None = intermediate_size
    num_shared_experts: int = 0
    first_k_dense_replace: int = 0  # leading dense layers of a MoE model
    # multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank == 0: ordinary multi-head attention
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: queries projected directly from the hidden state
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    num_nextn_predict_layers: int = 0

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
        check_choice("model.quantization", self.quantization, QUANTIZATIONS)
        if self.dtype_bytes == 1 and self.quantization == "none":
            object.__setattr__(self, "quantization", "fp8")
        if self.quantization.startswith("fp8") and self.dtype_bytes != 1:
            raise ConfigError(f"model.quantization: {self.quantization} weights are one byte each, "
                              f"got dtype_bytes={self.dtype_bytes}")
        if self.quantization in INT_WEIGHT_BYTES and self.dtype_bytes != 2:
            raise ConfigError(f"model.quantization: {self.quantization} runs 16-bit activations (dtype_bytes 2), "
                              f"got dtype_bytes={self.dtype_bytes}")
        if self.kv_dtype_bytes is None:
            object.__setattr__(self, "kv_dtype_bytes", self.act_dtype_bytes)
        check_choice("model.kv_dtype_bytes", self.kv_dtype_bytes, (1, 2, 4))
        if self.moe_intermediate_size is None:
            object.__setattr__(self, "moe_intermediate_size", self.intermediate_size)
        check_int("model.moe_intermediate_size", self.moe_intermediate_size, 1)
        for f in ("num_shared_experts", "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                  "qk_rope_head_dim", "v_head_dim", "num_nextn_predict_layers"):
            check_int(f"model.{f}", getattr(self, f), 0)
        if (self.num_shared_experts or self.first_k_dense_replace) and not self.num_experts:
            raise ConfigError("model.num_shared_experts: shared experts and first_k_dense_replace need num_experts > 0")
        if self.first_k_dense_replace >= self.num_layers and self.num_experts:
            raise ConfigError(f"model.first_k_dense_replace: {self.first_k_dense_replace} leaves no MoE layer "
                              f"of num_layers={self.num_layers}")
        if self.kv_lora_rank:
            for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f) < 1:
                    raise ConfigError(f"model.{f}: multi-head latent attention (kv_lora_rank > 0) needs {f} >= 1")

    # --- per-layer shapes ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek): the KV cache holds one latent per token and layer."""
        return self.kv_lora_rank > 0

    @property
    def act_dtype_bytes(self) -> int:
        """Activations' element size: 16-bit under FP8 weights (W8A8 keeps bf16 activations)."""
        return 2 if self.dtype_bytes == 1 else self.dtype_bytes

    @property
    def weight_element_bytes(self) -> float:
        """Bytes a layer weight stores (the embedding and LM head stay at `act_dtype_bytes`):
        `dtype_bytes`, or an integer form's bits and group scales (`INT_WEIGHT_BYTES`)."""
        return INT_WEIGHT_BYTES.get(self.quantization, self.dtype_bytes)

    @property
    def kv_cache_dtype(self) -> str:
        """The KV cache's dtype as vLLM's `--kv-cache-dtype` names it: "fp8" for a one-byte cache,
        else "auto" (the activations')."""
        return "fp8" if self.kv_dtype_bytes == 1 else "auto"

    @property
    def q_head_dim(self) -> int:
        """Query (and key) width per head: nope + rope parts under MLA, else `head_dim`."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def o_head_dim(self) -> int:
        """Value (attention output) width per head."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.q_head_dim

    @property
    def kv_size(self) -> int:
        """Width of K (and of V) over all KV heads (MHA/GQA)."""
        return self.num_kv_heads * self.head_dim

    @property
    def kv_cache_width(self) -> int:
        """Values cached per token and layer: K and V of every KV head, or MLA's latent + rotary key."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_size

    @property
    def num_mlp_matrices(self) -> int:
        return 3 if self.mlp_kind == "gated" else 2

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_replace if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert (of the MLP for a dense model)."""
        return self.num_mlp_matrices * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        """Weights of a MoE layer's shared experts (all of them)."""
        return self.num_shared_experts * self.num_mlp_matrices * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_mlp_params(self) -> int:
        """Weights of a dense layer's MLP (biases included)."""
        n = self.num_mlp_matrices * self.hidden_size * self.intermediate_size
        if self.bias:
            n += self.intermediate_size + self.hidden_size
        return n

    @property
    def moe_mlp_params(self) -> int:
        """Weights of a MoE layer's MLP: every routed expert, the shared ones and the router."""
        return (self.num_experts * self.expert_params + self.shared_expert_params
                + self.hidden_size * self.num_experts)

    @property
    def mla_replicated_params(self) -> int:
        """MLA weights every tensor-parallel rank holds whole (vLLM's replicated down-projections:
        q_a_proj with its norm, kv_a_proj_with_mqa with its norm); 0 without MLA."""
        if not self.is_mla:
            return 0
        h, ql = self.hidden_size, self.q_lora_rank
        n = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        if ql:
            n += h * ql + ql
        return n

    @property
    def attn_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            heads, ql = self.num_attention_heads, self.q_lora_rank
            q_up = (ql or h) * heads * self.q_head_dim  # q_b_proj (or q_proj)
            kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)  # kv_b_proj
            return self.mla_replicated_params + q_up + kv_up + heads * self.v_head_dim * h  # + o_proj
        n = h * (self.q_size + 2 * self.kv_size) + self.q_size * h  # QKV + O
        if self.bias:
            n += self.q_size + 2 * self.kv_size + h
        return n

    @property
    def mlp_params_per_layer(self) -> int:
        """MLP weights of one layer on average (dense and MoE layers mixed as the model mixes them)."""
        total = self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * self.moe_mlp_params
        return total // self.num_layers

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
    def vocab_params(self) -> int:
        """The embedding's weights and the LM head's where it is not tied to them: the weights vLLM
        keeps at the activations' precision whatever the layers' quantization."""
        return self.embedding_params + (0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size)

    @property
    def num_params(self) -> int:
        """Total parameters (all experts counted), derived from the dimensions (MTP modules excluded)."""
        per_layer = self.attn_params_per_layer + self.norm_params_per_layer
        mlps = self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * self.moe_mlp_params
        final_norm = self.hidden_size * (2 if self.bias else 1)
        return self.vocab_params + self.num_layers * per_layer + mlps + final_norm

    @property
    def num_active_params(self) -> int:
        """Parameters one token goes through (MoE: only its routed experts, plus the shared ones)."""
        if not self.is_moe:
            return self.num_params
        unused = self.num_experts - self.num_experts_per_tok
        return self.num_params - self.num_moe_layers * unused * self.expert_params

    @property
    def mtp_params(self) -> int:
        """Weights of the multi-token-prediction modules (DeepSeek-V3's `num_nextn_predict_layers`):
        each one decoder layer like the last, two norms and a 2h -> h projection; the embedding and
        the LM head are shared with the model."""
        if not self.num_nextn_predict_layers:
            return 0
        h = self.hidden_size
        layer = (self.attn_params_per_layer + self.norm_params_per_layer
                 + (self.moe_mlp_params if self.is_moe else self.dense_mlp_params))
        return self.num_nextn_predict_layers * (layer + 3 * h + 2 * h * h)

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights: the embedding and LM head at the activations' precision (vLLM leaves
        them unquantized), the rest at `weight_element_bytes`."""
        wide = self.vocab_params
        return round((self.num_params - wide) * self.weight_element_bytes) + wide * self.act_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes of one token over all layers, unsharded (`specs.memory.kv_bytes_per_token`)."""
        if self.is_mla:
            return mla_kv_bytes(self.num_layers, self.kv_lora_rank, self.qk_rope_head_dim, self.kv_dtype_bytes)
        return kv_bytes(self.num_layers, self.num_kv_heads, self.head_dim, self.kv_dtype_bytes)

    # --- the Hugging Face spelling (the engine's config and the profiles use it) ---------------------
    @property
    def num_hidden_layers(self) -> int:
        return self.num_layers

    @property
    def num_key_value_heads(self) -> int:
        return self.num_kv_heads

    def profile_dims(self, tp: int = 1, dtype: str = "bfloat16", name: str | None = None) -> dict:
        """The `model` object a profile records (`sim.latency.profile.MODEL_DIMS`, HF names): this
        shape on `tp` GPUs in `dtype`, under `name` (default: the spec's)."""
        return {"name": self.name if name is None else name, "num_hidden_layers": self.num_layers,
                "hidden_size": self.hidden_size, "num_attention_heads": self.num_attention_heads,
                "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "intermediate_size": self.intermediate_size, "vocab_size": self.vocab_size,
                "tensor_parallel_size": tp, "dtype": dtype,
                # the layer's kind only where it is not Llama's (older profiles omit both keys)
                **({"mlp_kind": self.mlp_kind} if self.mlp_kind != "gated" else {}),
                **({"position_embedding": self.position_embedding} if self.position_embedding != "rope" else {}),
                **({"quantization": self.quantization} if self.quantization != "none" else {}),
                **({"kv_cache_dtype": "fp8"} if self.kv_cache_dtype == "fp8" else {})}

    # --- construction -------------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> "ModelSpec":
        """Read a Hugging Face `config.json` (a file, or a folder holding one) of a `HF_MODEL_TYPES` model.

        What the spec cannot carry is refused with the reason rather than read approximately: a
        sliding-window attention on every layer (qwen2's `use_sliding_window`), or a MoE whose layers
        are not all sparse (qwen3_moe's `mlp_only_layers`, `decoder_sparse_step`)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        cfg = read_json_object(p, "model.name")
        model_type = cfg.get("model_type")
        if model_type not in HF_MODEL_TYPES:
            raise ConfigError(f"model.name: {p}: model_type {model_type!r} is not supported; "
                              f"choose one of {', '.join(HF_MODEL_TYPES)}")
        name = name or cfg.get("_name_or_path") or p.parent.name or model_type
        quantization = checkpoint_quantization(p, cfg) or "none"
        dtype_bytes = form_dtype_bytes(quantization) or DTYPE_BYTES.get(str(cfg.get("torch_dtype", "float16")), 2)

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
                    quantization=quantization,
                )
            heads = need("num_attention_heads")
            if cfg.get("use_sliding_window"):
                raise ConfigError(f"model.name: {p}: use_sliding_window is on (attention over a window, not the "
                                  "whole context): not modelled")
            if model_type in ("qwen3_moe", "qwen2_moe") and (cfg.get("mlp_only_layers")
                                                             or cfg.get("decoder_sparse_step", 1) != 1):
                raise ConfigError(f"model.name: {p}: a {model_type} with dense layers (mlp_only_layers, "
                                  "decoder_sparse_step) is not modelled")
            # what every decoder below reads alike; each branch adds its own MLP and attention fields
            common = dict(name=name, num_layers=need("num_hidden_layers"), hidden_size=need("hidden_size"),
                          num_attention_heads=heads, num_kv_heads=cfg.get("num_key_value_heads") or heads,
                          vocab_size=need("vocab_size"), max_position_embeddings=need("max_position_embeddings"),
                          dtype_bytes=dtype_bytes, quantization=quantization)
            if model_type == "qwen2_moe":
                # one shared expert of its own width beside the routed ones: as many expert-width
                # shared experts (same weights and FLOPs; its sigmoid gate, hidden x 1, is not timed)
                expert, shared = need("moe_intermediate_size"), cfg.get("shared_expert_intermediate_size") or 0
                if shared % expert:
                    raise ConfigError(f"model.name: {p}: shared_expert_intermediate_size={shared} is not a multiple "
                                      f"of moe_intermediate_size={expert}: not modelled")
                return cls(**common, intermediate_size=need("intermediate_size"), num_experts=need("num_experts"),
                           num_experts_per_tok=need("num_experts_per_tok"), moe_intermediate_size=expert,
                           num_shared_experts=shared // expert,
                           tie_word_embeddings=cfg.get("tie_word_embeddings", False))
            if model_type in ("deepseek_v2", "deepseek_v3"):
                routed = bool(cfg.get("n_routed_experts"))
                return cls(
                    **common, intermediate_size=need("intermediate_size"),
                    num_experts=cfg.get("n_routed_experts") or 0, num_experts_per_tok=cfg.get("num_experts_per_tok") or 0,
                    moe_intermediate_size=cfg.get("moe_intermediate_size"),
                    num_shared_experts=(cfg.get("n_shared_experts") or 0) if routed else 0,
                    first_k_dense_replace=(cfg.get("first_k_dense_replace") or 0) if routed else 0,
                    kv_lora_rank=need("kv_lora_rank"), q_lora_rank=cfg.get("q_lora_rank") or 0,
                    qk_nope_head_dim=need("qk_nope_head_dim"), qk_rope_head_dim=need("qk_rope_head_dim"),
                    v_head_dim=need("v_head_dim"), num_nextn_predict_layers=cfg.get("num_nextn_predict_layers", 0),
                    tie_word_embeddings=cfg.get("tie_word_embeddings", False),
                )
            experts = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts"}.get(model_type)
            return cls(
                **common,
                # a MoE's MLP is its experts' (qwen3_moe's intermediate_size is an unused dense width)
                intermediate_size=need("moe_intermediate_size" if model_type == "qwen3_moe" else "intermediate_size"),
                head_dim=cfg.get("head_dim"),
                num_experts=cfg.get(experts, 0) if experts else 0,
                num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if experts else 0,
                tie_word_embeddings=cfg.get("tie_word_embeddings", model_type == "gemma"),
                bias=bool(cfg.get("attention_bias", False)),
            )
        except ConfigError as e:
            if str(e).startswith("model.name"):
                raise
            raise ConfigError(f"model.name: {p}: {e}") from None

    def with_dtype(self, dtype: str, kv_cache_dtype: str = "auto") -> "ModelSpec":
        """A copy with weights stored in `dtype` and the KV cache in `kv_cache_dtype` ("auto" keeps the
        spec's weights; "w4a16" / "w8a16" are integer weights over 16-bit activations; an "auto" KV
        cache follows the activations, as vLLM's does: FP8 weights keep a 16-bit cache unless
        `kv_cache_dtype = "fp8"`)."""
        wb = self.dtype_bytes if dtype == "auto" else form_dtype_bytes(dtype) or DTYPE_BYTES[dtype]
        kb = None if kv_cache_dtype == "auto" else DTYPE_BYTES[kv_cache_dtype]
        if kb is None and dtype == "auto":
            kb = self.kv_dtype_bytes  # nothing asked: keep the spec's own cache dtype
        # "auto" keeps the form; FP8 weights keep theirs under "fp8", which asked of others is vLLM's
        # per-tensor `--quantization fp8`; a 16- or 32-bit dtype is the unquantized model
        if dtype == "auto" or dtype in INT_WEIGHT_BYTES:
            form = self.quantization if dtype == "auto" else dtype
        else:
            form = (self.quantization if self.dtype_bytes == 1 else "fp8") if wb == 1 else "none"
        return replace(self, dtype_bytes=wb, kv_dtype_bytes=kb, quantization=form)

"""Model dims for profiles: from a Hugging Face `config.json` (file or folder) or a few known names.

A profile records the dims it was measured or imported for (`sim.latency.profile.MODEL_DIMS`);
this module produces that dict from the one model shape, `specs.ModelSpec` (`dims_of_spec`). The
known names are the models the public per-op data serves, each a catalog model. A config.json is
read by `ModelSpec.from_hf_config` where its `model_type` is a known one whose layer is not Llama's
(OPT's layer kinds and a Mixtral-style MoE's experts then reach the dict); any other type is read as
a Llama layer, unless it carries experts, which a dense reading would drop.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from policies import ConfigError
from records.files import read_json_object
from sim.latency.profile import layer_kind
from specs.model_catalog import get_model
from specs.model_spec import HF_MODEL_TYPES, LLAMA_SHAPED, ModelSpec, form_dtype_bytes
from specs.quantization import checkpoint_quantization

# name -> the catalog model of that shape (Llama 3.1 has Llama 3's dims)
KNOWN: dict[str, str] = {
    "llama-2-7b": "Llama-2-7B",
    "llama-2-13b": "Llama-2-13B",
    "llama-2-70b": "Llama-2-70B",
    "codellama-34b": "CodeLlama-34B",
    "llama-3-8b": "Llama-3-8B",
    "llama-3-70b": "Llama-3-70B",
    "llama-3.1-8b": "Llama-3-8B",
    "llama-3.1-70b": "Llama-3-70B",
    "mistral-7b": "Mistral-7B",
    "mixtral-8x7b": "Mixtral-8x7B",
}
# config.json keys that give a model experts (Mixtral, Qwen MoE, DeepSeek, DBRX, ...)
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def _norm(name: str) -> str:
    n = name.lower().split("/")[-1].replace("_", "-")
    for prefix in ("meta-", ):
        n = n.removeprefix(prefix)
    for _ in range(2):  # "-instruct-v0.1", "-chat-hf"
        for suffix in ("-hf", "-chat", "-instruct", "-v0.1"):
            n = n.removesuffix(suffix)
    return n.replace("llama2", "llama-2").replace("llama3", "llama-3")


def _llama_shape(cfg: dict, path: Path) -> ModelSpec:
    """The Llama-family shape of a config.json's dims (HF names; any `model_type`, or none: a profile
    describes a Llama layer whatever the file calls it)."""
    try:
        heads, hidden = int(cfg["num_attention_heads"]), int(cfg["hidden_size"])
        return ModelSpec(name=cfg.get("_name_or_path") or path.parent.name, num_layers=int(cfg["num_hidden_layers"]),
                         hidden_size=hidden, num_attention_heads=heads,
                         num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                         head_dim=int(cfg.get("head_dim") or hidden // heads),
                         intermediate_size=int(cfg["intermediate_size"]), vocab_size=int(cfg["vocab_size"]),
                         # not a profile dim: a file that omits it still describes the layer
                         max_position_embeddings=int(cfg.get("max_position_embeddings") or 1))
    except KeyError as exc:
        raise ConfigError(f"model: {path} lacks {exc}") from None


def spec_of_config(path: Path) -> ModelSpec:
    """The shape a config.json describes: `ModelSpec.from_hf_config` for the known types whose layer
    is not Llama's (MoE, OPT, MLA), else the Llama layer of its dims. Refused where that reading
    would drop experts, or for weights quantized to a form the spec cannot carry."""
    cfg = read_json_object(path, "model")
    kind = cfg.get("model_type")
    if kind in HF_MODEL_TYPES and kind not in LLAMA_SHAPED:
        return ModelSpec.from_hf_config(path)
    experts = [k for k in EXPERT_KEYS if cfg.get(k)]
    if experts:
        raise ConfigError(f"model: {path}: model_type {kind!r} has experts ({experts[0]}) and is not a MoE "
                          f"servesim reads; MoE types read: mixtral, qwen3_moe, qwen2_moe")
    spec = _llama_shape(cfg, path)
    form = checkpoint_quantization(path, cfg)  # FP8 and integer weight-only forms are carried, the rest refused
    return replace(spec, dtype_bytes=form_dtype_bytes(form), quantization=form) if form else spec


def dims_of_spec(spec: ModelSpec, tp: int = 1, dtype: str = "bfloat16", name: str | None = None) -> dict:
    """The profile `model` dict of `spec` on `tp` GPUs in `dtype` (the activations'), under `name`
    (default: the spec's): a Mixtral-style MoE's experts, an OPT layer's kinds and FP8 weights' form
    (`quantization`; an importer without those GEMMs refuses it) included. What the dims cannot say
    would be timed as something else, so it is refused with the reason."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tp: expected a positive integer, got {tp!r}")
    if spec.num_attention_heads % tp:
        raise ConfigError(f"tp: {tp} does not divide num_attention_heads={spec.num_attention_heads}")
    if spec.is_mla:
        raise ConfigError(f"model: {spec.name} uses multi-head latent attention (kv_lora_rank > 0); the importers "
                          "time multi-head and grouped-query attention only")
    if spec.num_experts and (spec.num_shared_experts or spec.first_k_dense_replace
                             or spec.moe_intermediate_size != spec.intermediate_size):
        raise ConfigError(f"model: {spec.name} is a fine-grained MoE (shared experts, leading dense layers or an "
                          "expert width apart from the dense one); the importers time Mixtral-style MoE layers only")
    dims = spec.profile_dims(tp, dtype, name)  # the layer's kinds (OPT's, FP8 weights) included
    if spec.num_experts:
        dims.update(num_experts=spec.num_experts, num_experts_per_tok=spec.num_experts_per_tok)
    return dims


def resolve_model(model: str, tp: int = 1, dtype: str = "bfloat16") -> dict:
    """The profile `model` dict for `model` (a known name, a config.json, or a folder holding one)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tp: expected a positive integer, got {tp!r}")
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        spec = spec_of_config(path)
        name = spec.name
    else:
        name = _norm(model)
        if name not in KNOWN:
            raise ConfigError(f"model: {model!r} is neither a config.json nor a known name; choose one of "
                              f"{', '.join(KNOWN)} or pass a path to a Hugging Face config.json")
        spec = get_model(KNOWN[name])
    return dims_of_spec(spec, tp, dtype, name)


def per_rank_shapes(dims: dict) -> dict[str, tuple[int, int]]:
    """GEMM (k, n) per tensor-parallel rank for each linear op (Megatron-style column/row split).

    A plain MLP (`mlp_kind` "plain", OPT's fc1 -> ReLU -> fc2) keeps the op names: `gate_up_proj`
    is fc1 (hidden -> intermediate), `down_proj` fc2."""
    tp = dims["tensor_parallel_size"]
    h, hd = dims["hidden_size"], dims["head_dim"]
    q = dims["num_attention_heads"] // tp
    kv = max(dims["num_key_value_heads"] // tp, 1)  # KV heads are replicated when tp > num_kv_heads
    inter = dims["intermediate_size"] // tp
    return {
        "qkv_proj": (h, (q + 2 * kv) * hd),
        "o_proj": (q * hd, h),
        "gate_up_proj": (h, inter if layer_kind(dims, "mlp_kind") == "plain" else 2 * inter),
        "down_proj": (inter, h),
        "lm_head": (h, -(-dims["vocab_size"] // tp)),
    }

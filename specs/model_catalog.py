"""The model catalog: dimensions copied from each model's public Hugging Face `config.json`.

`get_model(name_or_path)` looks a name up case-insensitively (aliases included) or, when given a
path to a `config.json` (or a folder holding one), reads it.
"""
from __future__ import annotations

from pathlib import Path

from policies.config import ConfigError
from specs.model_spec import ModelSpec


def _llama(name, layers, hidden, heads, kv_heads, inter, vocab, max_pos, **kw) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     num_kv_heads=kv_heads, intermediate_size=inter, vocab_size=vocab,
                     max_position_embeddings=max_pos, **kw)


# name -> spec. Source of each line: the `config.json` of the HF repo named in the comment.
MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    # meta-llama/Llama-2-7b-hf
    _llama("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000, 4096),
    # meta-llama/Llama-2-13b-hf
    _llama("Llama-2-13B", 40, 5120, 40, 40, 13824, 32000, 4096),
    # meta-llama/Llama-2-70b-hf (GQA, 8 KV heads)
    _llama("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000, 4096),
    # meta-llama/Meta-Llama-3-8B
    _llama("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, 8192),
    # meta-llama/Meta-Llama-3-70B
    _llama("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, 8192),
    # meta-llama/Llama-3.1-8B and -70B: Llama 3's shapes with a 131,072-token context (rope_scaling
    # "llama3", factor 8 over 8,192); the scaling changes no cost, the context is what differs
    _llama("Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072),
    _llama("Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072),
    # codellama/CodeLlama-34b-hf
    _llama("CodeLlama-34B", 48, 8192, 64, 8, 22016, 32000, 16384),
    # mistralai/Mistral-7B-v0.1 (sliding window 4096 not modelled: attention reads the full context)
    _llama("Mistral-7B", 32, 4096, 32, 8, 14336, 32000, 32768),
    # mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token
    _llama("Mixtral-8x7B", 32, 4096, 32, 8, 14336, 32000, 32768, num_experts=8, num_experts_per_tok=2),
    # deepseek-ai/deepseek-llm-67b-base (llama architecture, 95 layers)
    _llama("DeepSeek-67B", 95, 8192, 64, 8, 22016, 102400, 4096),
    # facebook/opt-13b: MHA, fc1/fc2 with ReLU (ffn_dim = 4 x hidden), learned positions, biases,
    # LayerNorm, LM head tied to the embeddings
    _llama("OPT-13B", 40, 5120, 40, 40, 20480, 50272, 2048, mlp_kind="plain", position_embedding="learned",
           bias=True, tie_word_embeddings=True),
    # deepseek-ai/DeepSeek-V3 (also DeepSeek-R1's shape): MLA (q_lora_rank 1536, kv_lora_rank 512, rope 64,
    # nope 128, v 128), 256 routed experts of 2048 (top 8) + 1 shared, the first 3 layers dense (18432),
    # one MTP module; the published checkpoint is FP8 (quantization_config fp8, e4m3, 128x128
    # weight blocks), served as such
    _llama("DeepSeek-V3", 61, 7168, 128, 128, 18432, 129280, 163840, num_experts=256, num_experts_per_tok=8,
           moe_intermediate_size=2048, num_shared_experts=1, first_k_dense_replace=3, kv_lora_rank=512,
           q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
           num_nextn_predict_layers=1, dtype_bytes=1, quantization="fp8_block"),
    # deepseek-ai/DeepSeek-V2-Lite (bf16): MLA without the query bottleneck, 64 routed experts of 1408
    # (top 6) + 2 shared, the first layer dense (10944); fits one 80 GB GPU
    _llama("DeepSeek-V2-Lite", 27, 2048, 16, 16, 10944, 102400, 163840, num_experts=64, num_experts_per_tok=6,
           moe_intermediate_size=1408, num_shared_experts=2, first_k_dense_replace=1, kv_lora_rank=512,
           qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
)}

# extra spellings (compared after lower-casing and dropping '-', '_', ' ', '.')
_ALIASES = {
    "llama2-7b": "Llama-2-7B", "meta-llama/llama-2-7b-hf": "Llama-2-7B", "llama-2-7b-chat": "Llama-2-7B",
    "llama2-13b": "Llama-2-13B", "meta-llama/llama-2-13b-hf": "Llama-2-13B",
    "llama2-70b": "Llama-2-70B", "meta-llama/llama-2-70b-hf": "Llama-2-70B",
    "llama3-8b": "Llama-3-8B", "meta-llama/meta-llama-3-8b": "Llama-3-8B",
    "llama3-70b": "Llama-3-70B", "meta-llama/meta-llama-3-70b": "Llama-3-70B",
    "meta-llama/meta-llama-3.1-8b": "Llama-3.1-8B", "llama-3.1-8b-instruct": "Llama-3.1-8B",
    "meta-llama/meta-llama-3.1-70b": "Llama-3.1-70B", "llama-3.1-70b-instruct": "Llama-3.1-70B",
    "codellama/codellama-34b-hf": "CodeLlama-34B", "codellama-34b-instruct": "CodeLlama-34B",
    "mistralai/mistral-7b-v0.1": "Mistral-7B", "mistral-7b-instruct": "Mistral-7B",
    "mistralai/mixtral-8x7b-v0.1": "Mixtral-8x7B", "mixtral": "Mixtral-8x7B",
    "deepseek-ai/deepseek-llm-67b-base": "DeepSeek-67B", "deepseek-llm-67b": "DeepSeek-67B",
    "facebook/opt-13b": "OPT-13B",
    "deepseek-ai/deepseek-v3": "DeepSeek-V3", "deepseek-v3-0324": "DeepSeek-V3", "deepseek-ai/deepseek-r1": "DeepSeek-V3",
    "deepseek-r1": "DeepSeek-V3", "deepseek-ai/deepseek-v2-lite": "DeepSeek-V2-Lite",
}


def _key(name: str) -> str:
    return "".join(c for c in name.lower() if c not in "-_ .")


_LOOKUP = {_key(n): n for n in MODELS} | {_key(a): n for a, n in _ALIASES.items()}


def model_names() -> list[str]:
    return list(MODELS)


def get_model(name_or_path: str) -> ModelSpec:
    """A catalog model by (case-insensitive) name or alias, or a HF `config.json` file / folder."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ConfigError(f"model.name: expected a model name or a config.json path, got {name_or_path!r}")
    hit = _LOOKUP.get(_key(name_or_path))
    if hit is not None:
        return MODELS[hit]
    p = Path(name_or_path)
    if p.suffix == ".json" or p.is_dir() or p.exists():
        return ModelSpec.from_hf_config(p)
    raise ConfigError(f"model.name: unknown model {name_or_path!r}; choose one of {', '.join(MODELS)} "
                      "or give the path of a Hugging Face config.json")

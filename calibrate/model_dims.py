"""Model dims for profiles: from a Hugging Face `config.json` (file or folder) or a few known names.

A profile records the dims it was measured or imported for (`sim.latency.profiled.MODEL_DIMS`);
this module produces that dict. The known names cover the Llama family the public per-op data
serves (published HF configs, copied as numbers).
"""
from __future__ import annotations

from pathlib import Path

from policies import ConfigError
from records.files import read_json_object

# name -> (layers, hidden, heads, kv_heads, intermediate, vocab); head_dim = hidden // heads
KNOWN: dict[str, tuple[int, int, int, int, int, int]] = {
    "llama-2-7b": (32, 4096, 32, 32, 11008, 32000),
    "llama-2-13b": (40, 5120, 40, 40, 13824, 32000),
    "llama-2-70b": (80, 8192, 64, 8, 28672, 32000),
    "codellama-34b": (48, 8192, 64, 8, 22016, 32000),
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256),
    "llama-3-70b": (80, 8192, 64, 8, 28672, 128256),
    "llama-3.1-8b": (32, 4096, 32, 8, 14336, 128256),
    "llama-3.1-70b": (80, 8192, 64, 8, 28672, 128256),
    "mistral-7b": (32, 4096, 32, 8, 14336, 32000),
}


def _norm(name: str) -> str:
    n = name.lower().split("/")[-1].replace("_", "-")
    for prefix in ("meta-", ):
        n = n.removeprefix(prefix)
    for suffix in ("-hf", "-chat", "-instruct"):
        n = n.removesuffix(suffix)
    return n.replace("llama2", "llama-2").replace("llama3", "llama-3")


def resolve_model(model: str, tp: int = 1, dtype: str = "bfloat16") -> dict:
    """The profile `model` dict for `model` (a known name, a config.json, or a folder holding one)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tp: expected a positive integer, got {tp!r}")
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        cfg = read_json_object(path, "model")
        try:
            heads = int(cfg["num_attention_heads"])
            dims = {
                "name": cfg.get("_name_or_path") or path.parent.name,
                "num_hidden_layers": int(cfg["num_hidden_layers"]),
                "hidden_size": int(cfg["hidden_size"]),
                "num_attention_heads": heads,
                "num_key_value_heads": int(cfg.get("num_key_value_heads") or heads),
                "head_dim": int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                "intermediate_size": int(cfg["intermediate_size"]),
                "vocab_size": int(cfg["vocab_size"]),
            }
        except KeyError as exc:
            raise ConfigError(f"model: {path} lacks {exc}") from None
    else:
        key = _norm(model)
        if key not in KNOWN:
            raise ConfigError(f"model: {model!r} is neither a config.json nor a known name; choose one of "
                              f"{', '.join(KNOWN)} or pass a path to a Hugging Face config.json")
        layers, hidden, heads, kv, inter, vocab = KNOWN[key]
        dims = {"name": key, "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
                "num_key_value_heads": kv, "head_dim": hidden // heads, "intermediate_size": inter,
                "vocab_size": vocab}
    if dims["num_attention_heads"] % tp:
        raise ConfigError(f"tp: {tp} does not divide num_attention_heads={dims['num_attention_heads']}")
    dims["tensor_parallel_size"] = tp
    dims["dtype"] = dtype
    return dims


def per_rank_shapes(dims: dict) -> dict[str, tuple[int, int]]:
    """GEMM (k, n) per tensor-parallel rank for each linear op (Megatron-style column/row split)."""
    tp = dims["tensor_parallel_size"]
    h, hd = dims["hidden_size"], dims["head_dim"]
    q = dims["num_attention_heads"] // tp
    kv = max(dims["num_key_value_heads"] // tp, 1)  # KV heads are replicated when tp > num_kv_heads
    inter = dims["intermediate_size"] // tp
    return {
        "qkv_proj": (h, (q + 2 * kv) * hd),
        "o_proj": (q * hd, h),
        "gate_up_proj": (h, 2 * inter),
        "down_proj": (inter, h),
        "lm_head": (h, -(-dims["vocab_size"] // tp)),
    }

"""A checkpoint's quantization, as the weight form the spec carries (`ModelSpec.quantization`).

Where it is written: config.json's `quantization_config`, or, for a ModelOpt checkpoint, the
`hf_quant_config.json` beside it. What it means here (`checkpoint_quantization`): FP8 forms are one
byte a weight, scaled per tensor or channel ("fp8", vLLM's CUTLASS scaled-mm GEMMs) or per block of
weights ("fp8_block", its block-scaled GEMMs: other kernels, other timings); integer weights with
16-bit activations (AWQ, GPTQ, compressed-tensors W4A16/W8A16: "w4a16", "w8a16") are 4 or 8 bits
a weight plus a 16-bit scale per group, dequantized inside 16-bit GEMMs (vLLM's Marlin kernels).
Anything else is refused, because read as 16-bit it would double or quadruple the weight bytes
and its kernels are not the spec's GEMMs.
"""
from __future__ import annotations

from pathlib import Path

from policies.config import ConfigError
from records.files import read_json_object


def checkpoint_quantization(config_path: Path, cfg: dict) -> str | None:
    """The weight form ("fp8", "fp8_block", "w4a16" or "w8a16") of the checkpoint whose config.json
    `cfg` was read from `config_path` (`_quantization`, `_form`); None for an unquantized one."""
    quant, where = _quantization(config_path, cfg)
    return _form(quant, where) if quant else None


def _form(quant, where: str) -> str:
    """The weight form of a checkpoint's `quantization_config`, for the FP8 forms vLLM serves as
    FP8 (`fp8`; ModelOpt's `quant_algo` FP8; 8-bit float weights in every `config_groups` group, as
    compressed-tensors and ModelOpt write them): "fp8_block" where the weights are scaled per block
    (`weight_block_size`, a group's `strategy` "block"), else "fp8". Any other form (4-bit AWQ, GPTQ,
    NVFP4, MXFP4, int8, ...) is refused with the reason: read as 16-bit it would double or
    quadruple the weight bytes, and its kernels are not the spec's 16-bit or FP8 GEMMs. `where`
    names the field in errors. Weight-only integers: AWQ's and GPTQ's `bits` 4 or 8, and
    compressed-tensors groups of 4- or 8-bit int weights without quantized activations.
    """
    if not isinstance(quant, dict):
        raise ConfigError(f"{where}: expected an object, got {quant!r}")
    method, algo = str(quant.get("quant_method", "")).lower(), str(quant.get("quant_algo", "")).upper()
    groups = quant.get("config_groups") if isinstance(quant.get("config_groups"), dict) else {}
    group_list = [g for g in groups.values() if isinstance(g, dict)]
    weights = [g.get("weights") or {} for g in group_list]
    if method == "fp8" or algo == "FP8" or (weights and all(w.get("num_bits") == 8 and w.get("type") == "float"
                                                            for w in weights)):
        blocked = quant.get("weight_block_size") or any(str(w.get("strategy", "")).lower() == "block"
                                                        for w in weights)
        return "fp8_block" if blocked else "fp8"
    if method in ("awq", "gptq") and quant.get("bits") in (4, 8):
        return f"w{quant['bits']}a16"
    bits = {w.get("num_bits") for w in weights}
    if group_list and len(bits) == 1 and bits <= {4, 8} and all(w.get("type", "int") == "int" for w in weights) \
            and not any(g.get("input_activations") for g in group_list):
        return f"w{bits.pop()}a16"
    form = ", ".join(f"{k} {quant[k]!r}" for k in ("quant_method", "quant_algo", "bits") if k in quant) or "no quant_method"
    raise ConfigError(f"{where} ({form}) is not modelled; servesim models 16-bit weights, FP8 (quant_method fp8, "
                      "quant_algo FP8, 8-bit float config_groups) and 4- or 8-bit integer weights with 16-bit "
                      "activations (awq, gptq, int weight-only config_groups)")


def _quantization(config_path: Path, cfg: dict) -> tuple[dict | None, str]:
    """(the checkpoint's quantization, the field it was read from, for errors): config.json's
    `quantization_config`, else the `quantization` section of the `hf_quant_config.json` a ModelOpt
    checkpoint keeps beside it (`<prefix>hf_quant_config.json` for `<prefix>config.json`)."""
    where = f"model.name: {config_path}: quantization_config"
    if cfg.get("quantization_config") or not config_path.name.endswith("config.json"):
        return cfg.get("quantization_config"), where
    sibling = config_path.with_name(config_path.name[:-len("config.json")] + "hf_quant_config.json")
    if not sibling.is_file():
        return None, where
    quant = read_json_object(sibling, "model.name").get("quantization")
    where = f"model.name: {sibling}: quantization"
    if not isinstance(quant, dict):
        raise ConfigError(f"{where}: expected an object, got {quant!r}")
    if not quant.get("quant_algo"):  # the KV cache alone quantized (kv_cache_quant_algo): 16-bit weights
        return None, where
    return {"quant_method": "modelopt", **quant}, where

"""A checkpoint's quantization (specs.quantization): FP8 forms read as one byte a weight, others refused."""
import json

import pytest

from policies import ConfigError
from specs import get_model
from specs.model_spec import QUANTIZATIONS, ModelSpec

from spec_factories import LLAMA2_7B_HF, make_hf_config


@pytest.mark.parametrize("quant, form", [
    ({"quant_method": "fp8", "fmt": "e4m3"}, "fp8"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8_block"),  # Qwen3-*-FP8, DeepSeek-V3
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_algo": "FP8", "producer": {"name": "modelopt"}}, "fp8"),  # ModelOpt's, no quant_method
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {  # RedHatAI's FP8-dynamic
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}, "fp8"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}},
     "fp8_block"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "w4a16"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "w4a16"),
    ({"quant_method": "gptq", "bits": 8}, "w8a16"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {  # RedHatAI's W4A16
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
        "input_activations": None}}}, "w4a16"),
    ({"quant_method": "gptq", "bits": 3}, "quant_method 'gptq', bits 3"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {  # W8A8 int8: int8 GEMMs, not modelled
        "weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8, "type": "int"}}}},
     "quant_method 'compressed-tensors'"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "quant_algo 'NVFP4'"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "float"}}}}, "quant_method 'compressed-tensors'"),
    ({"quant_method": "mxfp4"}, "quant_method 'mxfp4'"),
    ("fp8", "expected an object"),
])
def test_a_quantized_checkpoint_is_read_in_its_form_or_refused_never_as_16_bit(tmp_path, quant, form):
    fields = dict(LLAMA2_7B_HF, torch_dtype="bfloat16", quantization_config=quant)
    if form in QUANTIZATIONS:
        spec = ModelSpec.from_hf_config(make_hf_config(tmp_path, **fields))
        # FP8 runs one-byte GEMMs; integer weights are dequantized into 16-bit ones
        assert (spec.dtype_bytes, spec.quantization) == (1 if form.startswith("fp8") else 2, form)
        llama = get_model("Llama-2-7B")
        wide = 2 * llama.vocab_size * llama.hidden_size  # embedding and LM head, left 16-bit
        per_weight = {"w4a16": 0.5, "w8a16": 1.0}.get(form, 1.0) + (2 / 128 if form.startswith("w") else 0)
        assert spec.weight_bytes == pytest.approx((llama.num_params - wide) * per_weight + 2 * wide, rel=1e-9)
        assert spec.kv_dtype_bytes == 2  # quantized weights keep a 16-bit cache unless asked
        return
    with pytest.raises(ConfigError, match=r"^model\.name: .*quantization_config.*" + form):
        ModelSpec.from_hf_config(make_hf_config(tmp_path, **fields))


def test_the_weight_form_follows_the_weights_bytes():
    llama = get_model("Llama-2-7B")
    assert ModelSpec(**{**llama.__dict__, "dtype_bytes": 1}).quantization == "fp8"  # one byte, no form: per tensor
    with pytest.raises(ConfigError, match=r"^model\.quantization: fp8_block weights are one byte each"):
        ModelSpec(**{**llama.__dict__, "quantization": "fp8_block"})
    with pytest.raises(ConfigError, match=r"^model\.quantization"):
        ModelSpec(**{**llama.__dict__, "dtype_bytes": 1, "quantization": "int4"})
    v3 = get_model("DeepSeek-V3")
    assert v3.quantization == "fp8_block"
    assert v3.with_dtype("auto").quantization == v3.with_dtype("fp8").quantization == "fp8_block"  # kept
    assert v3.with_dtype("bfloat16").quantization == "none"
    assert llama.with_dtype("fp8").quantization == "fp8"


def test_a_modelopt_checkpoint_is_read_from_its_hf_quant_config(tmp_path):
    # ModelOpt keeps the quantization beside config.json, not in it (aiconfigurator-core's copies too)
    config = make_hf_config(tmp_path, **dict(LLAMA2_7B_HF, torch_dtype="bfloat16"))
    assert ModelSpec.from_hf_config(config).dtype_bytes == 2
    quant = tmp_path / "hf_quant_config.json"
    quant.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}))
    assert ModelSpec.from_hf_config(config).dtype_bytes == 1
    quant.write_text(json.dumps({"quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}}))
    assert ModelSpec.from_hf_config(config).dtype_bytes == 2  # the KV cache alone quantized
    quant.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}}))
    with pytest.raises(ConfigError, match=r"^model\.name: .*hf_quant_config\.json: quantization .*'NVFP4'"):
        ModelSpec.from_hf_config(config)
    named = tmp_path / "Acme--Widget-7B_config.json"  # the <org>--<name>_config.json naming
    named.write_text(config.read_text())
    (tmp_path / "Acme--Widget-7B_hf_quant_config.json").write_text(quant.read_text())
    with pytest.raises(ConfigError, match="NVFP4"):
        ModelSpec.from_hf_config(named)

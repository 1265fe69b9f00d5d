"""Model catalog: parameter counts against the published sizes, HF config.json reading, lookups."""
from __future__ import annotations

import json

import pytest

from policies import ConfigError
from specs import MODELS, ModelSpec, get_model

# published totals (billions): model cards / HF "Model size" of the safetensors; MoE counts every expert
PUBLISHED_B = {
    "Llama-2-7B": 6.74, "Llama-2-13B": 13.0, "Llama-2-70B": 69.0, "Llama-3-8B": 8.03, "Llama-3-70B": 70.6,
    "CodeLlama-34B": 33.7, "Mistral-7B": 7.24, "Mixtral-8x7B": 46.7, "DeepSeek-67B": 67.4, "OPT-13B": 12.85,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_param_counts_match_published_sizes(name):
    assert get_model(name).num_params / 1e9 == pytest.approx(PUBLISHED_B[name], rel=0.01)


def test_catalog_covers_the_required_models():
    assert set(PUBLISHED_B) <= set(MODELS)


def test_mixtral_active_params_are_two_experts():
    m = get_model("mixtral-8x7b")
    assert m.num_active_params / 1e9 == pytest.approx(12.9, rel=0.01)  # Mistral's "12.9B active"
    assert m.num_active_params < m.num_params


def test_kv_bytes_per_token_llama2_7b_fp16_is_512_kib():
    assert get_model("Llama-2-7B").kv_bytes_per_token == 512 * 1024


def test_gqa_shrinks_kv_by_the_head_ratio():
    l2, l3 = get_model("llama-2-70b"), get_model("llama-3-70b")
    assert l2.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert l3.kv_bytes_per_token == l2.kv_bytes_per_token
    assert get_model("llama-2-13b").kv_bytes_per_token == 2 * 40 * 5120 * 2


@pytest.mark.parametrize("alias", ["llama-2-7b", "LLAMA2-7B", "meta-llama/Llama-2-7b-hf", "llama_2_7b"])
def test_aliases_are_case_insensitive(alias):
    assert get_model(alias).name == "Llama-2-7B"


def test_unknown_model_lists_the_names():
    with pytest.raises(ConfigError, match=r"^model\.name: unknown model 'gpt-5'.*Llama-2-7B"):
        get_model("gpt-5")


def make_hf_config(tmp_path, **fields):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return path


LLAMA2_7B_HF = dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                    num_hidden_layers=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
                    torch_dtype="float16", tie_word_embeddings=False)


def test_from_hf_config_equals_catalog(tmp_path):
    spec = ModelSpec.from_hf_config(make_hf_config(tmp_path, **LLAMA2_7B_HF))
    assert spec.num_params == get_model("Llama-2-7B").num_params
    assert spec.kv_bytes_per_token == 512 * 1024
    assert get_model(str(tmp_path)).num_params == spec.num_params  # a folder holding config.json


def test_from_hf_config_mixtral_and_opt(tmp_path):
    mixtral = dict(LLAMA2_7B_HF, model_type="mixtral", num_key_value_heads=8, intermediate_size=14336,
                   num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768, torch_dtype="bfloat16")
    assert ModelSpec.from_hf_config(make_hf_config(tmp_path, **mixtral)).num_params == get_model("Mixtral-8x7B").num_params
    opt = dict(model_type="opt", hidden_size=5120, ffn_dim=20480, num_attention_heads=40, num_hidden_layers=40,
               vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=5120, enable_bias=True,
               torch_dtype="float16")
    spec = ModelSpec.from_hf_config(make_hf_config(tmp_path, **opt))
    assert spec.mlp_kind == "plain" and spec.position_embedding == "learned" and spec.tie_word_embeddings
    assert spec.num_params == get_model("OPT-13B").num_params


@pytest.mark.parametrize("fields, match", [
    (dict(LLAMA2_7B_HF, model_type="gpt2"), "model_type 'gpt2' is not supported"),
    ({k: v for k, v in LLAMA2_7B_HF.items() if k != "hidden_size"}, "lacks 'hidden_size'"),
])
def test_bad_hf_config_names_the_problem(tmp_path, fields, match):
    with pytest.raises(ConfigError, match=r"^model\.name: .*" + match):
        ModelSpec.from_hf_config(make_hf_config(tmp_path, **fields))


def test_invalid_json_is_one_clear_error(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match=r"^model\.name: .*not valid JSON"):
        ModelSpec.from_hf_config(p)


def test_spec_validation_names_fields():
    with pytest.raises(ConfigError, match=r"^model\.num_kv_heads"):
        ModelSpec("x", 2, 64, 8, 3, 128, 100, 128)
    with pytest.raises(ConfigError, match=r"^model\.num_experts_per_tok"):
        ModelSpec("x", 2, 64, 8, 8, 128, 100, 128, num_experts=4, num_experts_per_tok=5)

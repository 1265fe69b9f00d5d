"""Model catalog: parameter counts against the published sizes, HF config.json reading, lookups."""
from __future__ import annotations

import pytest

from policies import ConfigError
from specs import MODELS, ModelSpec, get_model

from spec_factories import LLAMA2_7B_HF, make_hf_config

# published totals (billions): model cards / HF "Model size" of the safetensors; MoE counts every expert
PUBLISHED_B = {
    "Llama-2-7B": 6.74, "Llama-2-13B": 13.0, "Llama-2-70B": 69.0, "Llama-3-8B": 8.03, "Llama-3-70B": 70.6,
    "CodeLlama-34B": 33.7, "Mistral-7B": 7.24, "Mixtral-8x7B": 46.7, "DeepSeek-67B": 67.4, "OPT-13B": 12.85,
    "Llama-3.1-8B": 8.03, "Llama-3.1-70B": 70.6,
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


@pytest.mark.parametrize("three, three_one", [("Llama-3-8B", "llama-3.1-8b"), ("Llama-3-70B", "Llama-3.1-70B-Instruct")])
def test_llama_3_1_is_llama_3_with_its_long_context(three, three_one):
    """A planner's long prompts are clipped to the context (max_model_len's default): Llama 3.1's is
    131,072 tokens (rope scaling), not Llama 3's 8,192, on the same layers."""
    old, new = get_model(three), get_model(three_one)
    assert (old.max_position_embeddings, new.max_position_embeddings) == (8192, 131072)
    assert new.num_params == old.num_params and new.kv_bytes_per_token == old.kv_bytes_per_token


def test_unknown_model_lists_the_names():
    with pytest.raises(ConfigError, match=r"^model\.name: unknown model 'gpt-5'.*Llama-2-7B"):
        get_model("gpt-5")


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


QWEN3_8B_HF = dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                   num_hidden_layers=36, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                   max_position_embeddings=40960, tie_word_embeddings=False, torch_dtype="bfloat16")
QWEN3_30B_A3B_HF = dict(QWEN3_8B_HF, model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144,
                        moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, num_key_value_heads=4,
                        num_hidden_layers=48, decoder_sparse_step=1, mlp_only_layers=[])


def test_qwen3_dense_and_moe_configs_read_to_their_published_sizes(tmp_path):
    # Qwen3-8B's model card: 8.2B parameters, 6.95B without embeddings; Qwen3-30B-A3B: 30.5B, 3.3B active
    dense = ModelSpec.from_hf_config(make_hf_config(tmp_path, **QWEN3_8B_HF))
    assert dense.num_params / 1e9 == pytest.approx(8.19, rel=0.01) and dense.num_experts == 0
    moe = ModelSpec.from_hf_config(make_hf_config(tmp_path, **QWEN3_30B_A3B_HF))
    assert moe.num_params / 1e9 == pytest.approx(30.5, rel=0.01)
    assert moe.num_active_params / 1e9 == pytest.approx(3.3, rel=0.03)
    assert moe.intermediate_size == 768  # the experts' width, not the unused dense one


@pytest.mark.parametrize("model_type", ["qwen2", "granite", "gemma", "mistral"])
def test_llama_shaped_families_read_as_llama(tmp_path, model_type):
    fields = dict(LLAMA2_7B_HF, num_key_value_heads=8, head_dim=128)
    llama = ModelSpec.from_hf_config(make_hf_config(tmp_path, **fields))
    other = ModelSpec.from_hf_config(make_hf_config(tmp_path, **dict(fields, model_type=model_type)))
    assert (other.num_params, other.kv_bytes_per_token) == (llama.num_params, llama.kv_bytes_per_token)
    untied = {k: v for k, v in fields.items() if k != "tie_word_embeddings"}
    gemma = ModelSpec.from_hf_config(make_hf_config(tmp_path, **dict(untied, model_type="gemma")))
    assert gemma.tie_word_embeddings  # Gemma's default: one matrix for the embedding and the LM head


@pytest.mark.parametrize("fields, match", [
    (dict(QWEN3_8B_HF, model_type="qwen2", use_sliding_window=True), "use_sliding_window is on"),
    (dict(QWEN3_30B_A3B_HF, mlp_only_layers=[0, 1]), "dense layers"),
    (dict(QWEN3_30B_A3B_HF, decoder_sparse_step=2), "dense layers"),
])
def test_what_a_spec_cannot_carry_is_refused_with_the_reason(tmp_path, fields, match):
    with pytest.raises(ConfigError, match=r"^model\.name: .*" + match):
        ModelSpec.from_hf_config(make_hf_config(tmp_path, **fields))


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


# DeepSeek's published figures (the DeepSeek-V3 model card and README_WEIGHTS.md; DeepSeek-V2 paper for
# V2-Lite): total parameters, activated parameters (embedding excluded, output head included) and the
# MTP module's unique parameters (embedding and head shared with the model)
DEEPSEEK_PUBLISHED_B = {"DeepSeek-V3": (671.0, 36.6), "DeepSeek-V2-Lite": (15.7, 2.4)}


@pytest.mark.parametrize("name", sorted(DEEPSEEK_PUBLISHED_B))
def test_deepseek_total_and_activated_params_match_published(name):
    m = get_model(name)
    total, active = DEEPSEEK_PUBLISHED_B[name]
    assert m.num_params / 1e9 == pytest.approx(total, rel=0.005)
    assert (m.num_active_params - m.embedding_params) / 1e9 == pytest.approx(active, rel=0.03)


def test_deepseek_v3_mtp_module_is_the_published_size():
    assert get_model("DeepSeek-V3").mtp_params / 1e9 == pytest.approx(11.5, rel=0.02)
    assert get_model("Llama-2-7B").mtp_params == 0


def test_mla_kv_bytes_per_token_is_the_latent_formula():
    """(kv_lora_rank + qk_rope_head_dim) x layers x bytes: DeepSeek-V3 in bf16 caches 70,272 bytes a token."""
    v3 = get_model("DeepSeek-V3")
    assert v3.dtype_bytes == 1 and v3.kv_dtype_bytes == 2  # FP8 checkpoint, 16-bit cache (vLLM's "auto")
    assert v3.kv_bytes_per_token == 70_272 == (512 + 64) * 61 * 2
    assert get_model("DeepSeek-V2-Lite").kv_bytes_per_token == (512 + 64) * 27 * 2
    # a Llama-shaped model of V3's width would cache 2 x 128 heads x 128 x 61 x 2 = 57x more
    assert 2 * 128 * 128 * 61 * 2 / v3.kv_bytes_per_token > 50


DEEPSEEK_V3_HF = dict(
    model_type="deepseek_v3", hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
    num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
    n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536,
    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, vocab_size=129280, max_position_embeddings=163840,
    num_nextn_predict_layers=1, torch_dtype="bfloat16", tie_word_embeddings=False,
    quantization_config={"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]})


def test_from_hf_config_reads_deepseek_v3_as_the_catalog(tmp_path):
    spec = ModelSpec.from_hf_config(make_hf_config(tmp_path, **DEEPSEEK_V3_HF))
    v3 = get_model("DeepSeek-V3")
    assert (spec.num_params, spec.kv_bytes_per_token, spec.dtype_bytes, spec.mtp_params) == \
        (v3.num_params, v3.kv_bytes_per_token, 1, v3.mtp_params)
    bf16 = {k: v for k, v in DEEPSEEK_V3_HF.items() if k != "quantization_config"}
    assert ModelSpec.from_hf_config(make_hf_config(tmp_path, **bf16)).dtype_bytes == 2


def test_mla_and_moe_fields_are_validated():
    with pytest.raises(ConfigError, match=r"^model\.qk_rope_head_dim"):
        ModelSpec("x", 2, 64, 8, 8, 128, 100, 128, kv_lora_rank=32, qk_nope_head_dim=8, v_head_dim=8)
    with pytest.raises(ConfigError, match=r"^model\.num_shared_experts"):
        ModelSpec("x", 2, 64, 8, 8, 128, 100, 128, num_shared_experts=1)
    with pytest.raises(ConfigError, match=r"^model\.first_k_dense_replace"):
        ModelSpec("x", 2, 64, 8, 8, 128, 100, 128, num_experts=4, num_experts_per_tok=2, first_k_dense_replace=2)


QWEN2_MOE_HF = dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
                    shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4, num_hidden_layers=24,
                    num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, max_position_embeddings=8192,
                    decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False, torch_dtype="bfloat16")


@pytest.mark.parametrize("fields, total, active", [
    ({}, 14.3e9, 2.7e9),  # Qwen1.5-MoE-A2.7B as published: 14.3B parameters, 2.7B activated
    (dict(hidden_size=3584, intermediate_size=18944, moe_intermediate_size=2560, shared_expert_intermediate_size=20480,
          num_experts=64, num_experts_per_tok=8, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4),
     57.4e9, 14e9),  # Qwen2-57B-A14B: 57B, 14B activated
])
def test_a_qwen2_moe_keeps_its_shared_expert(tmp_path, fields, total, active):
    spec = ModelSpec.from_hf_config(make_hf_config(tmp_path, **{**QWEN2_MOE_HF, **fields}))
    assert spec.num_params == pytest.approx(total, rel=0.01)
    assert spec.num_active_params == pytest.approx(active, rel=0.025)
    without = ModelSpec.from_hf_config(make_hf_config(tmp_path, **{**QWEN2_MOE_HF, **fields,
                                                                   "shared_expert_intermediate_size": 0}))
    assert spec.num_active_params - without.num_active_params == \
        spec.num_layers * 3 * spec.hidden_size * (fields or QWEN2_MOE_HF)["shared_expert_intermediate_size"]


def test_a_qwen2_moe_the_spec_cannot_carry_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="shared_expert_intermediate_size=1000 is not a multiple"):
        ModelSpec.from_hf_config(make_hf_config(tmp_path, **{**QWEN2_MOE_HF, "shared_expert_intermediate_size": 1000}))
    with pytest.raises(ConfigError, match="a qwen2_moe with dense layers"):
        ModelSpec.from_hf_config(make_hf_config(tmp_path, **{**QWEN2_MOE_HF, "mlp_only_layers": [0]}))

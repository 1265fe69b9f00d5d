"""ModelConfig: reading HF config.json, and refusing what the engine does not implement."""
import json

import pytest

from engine_factories import TINY_CONFIG
from gpu_backend.model_config import ModelConfig
from policies import ConfigError


def test_tiny_example_is_a_gqa_llama():
    c = ModelConfig.from_json(TINY_CONFIG)
    assert c.num_attention_heads % c.num_key_value_heads == 0 and c.num_key_value_heads < c.num_attention_heads
    assert c.head_dim * c.num_attention_heads == c.hidden_size
    assert c.eos_token_ids == {2}


def test_head_dim_defaults_from_hidden_size():
    assert ModelConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2).head_dim == 32


@pytest.mark.parametrize("patch, field", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "model.rope_scaling"),
    ({"hidden_act": "gelu"}, "model.hidden_act"),
    ({"num_key_value_heads": 3}, "model.num_key_value_heads"),
    ({"attention_bias": True}, "model.attention_bias"),
])
def test_unsupported_features_are_refused_naming_the_field(tmp_path, patch, field):
    d = json.loads(TINY_CONFIG.read_text()) | patch
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=f"^{field}"):
        ModelConfig.from_json(tmp_path)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^model\.config: no such file .*nope$"):
        ModelConfig.from_json(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"^model\.config: no such file .*config\.json$"):
        ModelConfig.from_json(tmp_path)  # a folder without one: the config.json looked for is named


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_broken_config_json_is_one_error_naming_the_file(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=r"^model\.config: .*config\.json"):
        ModelConfig.from_json(tmp_path)


def test_the_engine_shape_is_the_simulators():
    """One model shape: the engine's dims are the `ModelSpec` the simulator reads from the same file."""
    from specs import get_model

    config = ModelConfig.from_json(TINY_CONFIG)
    sim = get_model(str(TINY_CONFIG))
    assert config.kv_bytes_per_token(sim.kv_dtype_bytes) == sim.kv_bytes_per_token
    assert (config.q_size, config.kv_size, config.spec.num_params) == (sim.q_size, sim.kv_size, sim.num_params)
    assert config.spec.profile_dims(2, "float32", "x") == {**sim.profile_dims(2, "float32"), "name": "x"}

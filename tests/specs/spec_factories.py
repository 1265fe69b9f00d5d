"""Factories for the spec tests: Hugging Face config.json files written to a temporary folder."""
import json

#: Llama-2-7B's config.json fields (HF names)
LLAMA2_7B_HF = dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                    num_hidden_layers=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
                    torch_dtype="float16", tie_word_embeddings=False)


def make_hf_config(tmp_path, **fields):
    """`fields` as tmp_path/config.json; its path."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return path

"""Factory helpers for the calibrate tests: a micro Llama config and a tiny calibration grid."""
from __future__ import annotations

from calibrate.grid import Grid

MICRO = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
         "hidden_act": "silu", "eos_token_id": 2}


def micro_grid(**kw) -> Grid:
    base = dict(tokens=(1, 8, 64), sampled=(1, 4), prefill=((8, 8), (8, 72), (64, 64)),
                decode=((1, 32), (4, 32), (1, 128), (4, 128)), swap_blocks=(1, 4), warmup=1, repeats=3,
                engine_groups=(1, 3, 2), after_prefill_repeats=2)
    base.update(kw)
    return Grid(**base)

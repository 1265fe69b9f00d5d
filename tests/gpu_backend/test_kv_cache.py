"""Paged KV tensors: layout, swap out/in of block pairs, default sizing."""
import torch

from engine_factories import make_model_config
from gpu_backend.kv_cache import KVCache


def test_layers_are_views_of_one_buffer_with_the_paged_shape():
    c = make_model_config(num_hidden_layers=2)
    kv = KVCache(c, num_blocks=10, block_size=4)
    assert kv.k[0].shape == (10, 4, c.num_key_value_heads, c.head_dim)
    kv.k[1][3, 2] = 7.0
    assert kv.buffer[1, 0, 3, 2].eq(7.0).all() and kv.buffer.eq(7.0).sum() == c.kv_size


def test_swap_out_then_in_moves_block_contents_to_new_ids():
    c = make_model_config(num_hidden_layers=2)
    kv = KVCache(c, num_blocks=8, block_size=4, num_cpu_blocks=4)
    kv.buffer.copy_(torch.randn(kv.buffer.shape))
    before = kv.buffer.clone()
    kv.swap_out([(5, 0), (2, 3)])
    kv.buffer[:, :, [5, 2]] = float("nan")  # the GPU blocks are reused by someone else
    kv.swap_in([(0, 6), (3, 1)])
    assert torch.equal(kv.buffer[:, :, 6], before[:, :, 5])
    assert torch.equal(kv.buffer[:, :, 1], before[:, :, 2])
    untouched = [0, 3, 4, 7]
    assert torch.equal(kv.buffer[:, :, untouched], before[:, :, untouched])


def test_default_num_blocks_respects_the_byte_budget():
    c = make_model_config()
    n = KVCache.default_num_blocks(c, 16, torch.float32, "cpu", max_bytes=10 * 2**20)
    per_block = c.kv_bytes_per_token(4) * 16
    assert n * per_block <= 10 * 2**20 < (n + 1) * per_block

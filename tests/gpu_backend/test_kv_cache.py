"""Paged KV tensors: layout, swap out/in of block pairs, default sizing."""
import os

import pytest
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


# HF config.json dims of a few attention layouts: GQA with explicit head_dim (the example), MHA,
# MQA (one KV head), and a head_dim that differs from hidden / heads
KV_LAYOUTS = {
    "tiny-llama": {},
    "mha": dict(num_attention_heads=4, num_key_value_heads=4, head_dim=None),  # head_dim 256 / 4
    "mqa": dict(num_hidden_layers=3, num_key_value_heads=1),
    "wide-heads": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=96),
}


def _write_hf_config(tmp_path, name: str, torch_dtype: str):
    import json

    from engine_factories import TINY_CONFIG

    cfg = json.loads(TINY_CONFIG.read_text())
    cfg.update({k: v for k, v in KV_LAYOUTS[name].items() if v is not None})
    if KV_LAYOUTS[name].get("head_dim", 0) is None:
        cfg.pop("head_dim")
    cfg["torch_dtype"] = torch_dtype
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("name", sorted(KV_LAYOUTS))
@pytest.mark.parametrize("torch_dtype", ["float32", "bfloat16"])
def test_sim_and_engine_agree_on_kv_bytes_per_token_with_the_tensors_allocated(tmp_path, name, torch_dtype):
    from gpu_backend.model_config import ModelConfig
    from specs import ModelSpec, kv_bytes_per_token

    path = _write_hf_config(tmp_path, name, torch_dtype)
    config = ModelConfig.from_json(path)
    dtype = getattr(torch, torch_dtype)
    num_blocks, block_size = 3, 4
    kv = KVCache(config, num_blocks=num_blocks, block_size=block_size, dtype=dtype)
    allocated = kv.buffer.numel() * kv.buffer.element_size() // (num_blocks * block_size)  # what the engine holds
    spec = ModelSpec.from_hf_config(path)
    assert kv_bytes_per_token(spec, 1) == spec.kv_bytes_per_token == allocated
    assert config.kv_bytes_per_token(kv.buffer.element_size()) == allocated
    assert kv.bytes_per_block == block_size * allocated


def test_engine_swap_blocks_match_the_simulators_for_the_same_config():
    from engine_factories import TINY_CONFIG
    from calibrate.engine_config import engine_config_from_sim
    from sim.config import load_config
    from specs import num_cpu_blocks

    config = load_config({"model": {"name": str(TINY_CONFIG), "dtype": "float32"},
                          "hardware": {"num_gpu_blocks": 64, "swap_space_gb": 0.01}})
    engine_config, _ = engine_config_from_sim(config, "cpu")
    expected = num_cpu_blocks(config.model.spec(), config.hardware, config.cache.block_size)
    assert engine_config.cache.num_cpu_blocks == expected > 0


def test_available_host_memory_is_the_kernels_figure(monkeypatch, tmp_path):
    import gpu_backend.kv_cache as kv_cache
    from gpu_backend.kv_cache import available_memory

    free = available_memory("cpu")
    assert 0 < free <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683772 kB\nMemFree:          100 kB\nMemAvailable:   22224088 kB\n")
    monkeypatch.setattr(kv_cache, "Path", lambda path: meminfo)
    assert available_memory("cpu") == 22224088 * 1024  # the page cache it would give back counts


@pytest.mark.parametrize("blocks, field", [({"num_blocks": 10**9}, "cache.num_gpu_blocks"),
                                           ({"num_blocks": 4, "num_cpu_blocks": 10**9}, "cache.num_cpu_blocks"),
                                           ({"num_blocks": 4, "num_offload_blocks": 10**9}, "cache.num_offload_blocks")])
def test_blocks_beyond_the_machine_are_refused_naming_the_count_before_allocating(blocks, field):
    """Through the Python API too (`Engine(EngineConfig(...))`), not only the config route: before,
    torch's allocator raised 'can't allocate memory' (or the OOM killer came while zeroing)."""
    with pytest.raises(ValueError, match=rf"^{field}: 1,?000,?000,?00\d KV blocks of \d+ bytes need .* GiB"):
        KVCache(make_model_config(), block_size=16, **blocks)
    cache = KVCache(make_model_config(), num_blocks=4, block_size=16, num_cpu_blocks=2)  # what fits is built
    assert cache.num_blocks == 4 and cache.num_cpu_blocks == 2

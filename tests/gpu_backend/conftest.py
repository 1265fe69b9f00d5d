"""Fixtures for the engine tests: a tiny random Llama and transformers' LlamaForCausalLM with its weights."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
# one intra-op thread: the tiny model gains nothing from two, and on a shared 2-core CI box (pytest -n 2)
# OpenMP threads spinning against each other make steps 10x slower
torch.set_num_threads(1)

from engine_factories import TINY_CONFIG, HFReference  # noqa: E402
from gpu_backend.model import build_model  # noqa: E402
from gpu_backend.model_config import ModelConfig  # noqa: E402


@pytest.fixture(scope="session")
def tiny_config() -> ModelConfig:
    return ModelConfig.from_json(TINY_CONFIG)


@pytest.fixture(scope="session")
def tiny_model(tiny_config):
    return build_model(tiny_config, seed=0)


@pytest.fixture(scope="session")
def hf_model(tiny_model, tmp_path_factory):
    """transformers' LlamaForCausalLM with the tiny model's weights, loaded through a safetensors file."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    path = tiny_model.save_safetensors(tmp_path_factory.mktemp("weights") / "model.safetensors")
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**tiny_model.config.to_hf_dict()))
    missing, unexpected = hf.load_state_dict(load_file(str(path)), strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return hf.eval().float()


@pytest.fixture(scope="session")
def hf_ref(hf_model) -> HFReference:
    return HFReference(hf_model)

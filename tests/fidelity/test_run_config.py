"""Which model a run folder names (`fidelity.run_config.resolve_model_name`): the config.json the
folder carries, the shipped configs, the catalog, aiconfigurator-core's copies; otherwise one line
that says where a config would be read from."""
from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import pytest

from fidelity.run_config import aiconfigurator_model_config, resolve_model_name
from policies import ConfigError, SchedulerConfig
from specs.model_catalog import get_model

QWEN3_8B = dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                num_hidden_layers=36, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                max_position_embeddings=40960, tie_word_embeddings=False, torch_dtype="bfloat16")


def write_config(folder, name="config.json", **fields):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(fields))
    return folder / name


def test_a_run_folder_may_carry_its_models_config(tmp_path):
    path = write_config(tmp_path / "run", **QWEN3_8B)
    resolved = resolve_model_name("acme/Widget-8B-Instruct", tmp_path / "run")
    assert resolved == str(path) and get_model(resolved).num_layers == 36
    # a catalog model is still itself when its folder carries nothing
    assert get_model(resolve_model_name("meta-llama/Llama-2-7b-hf", tmp_path / "empty")).name == "Llama-2-7B"


def test_a_folders_other_json_files_are_not_taken_for_a_model(tmp_path):
    write_config(tmp_path / "run", name="config.json", rate=4, stages=[])  # no model_type: some tool's config
    with pytest.raises(ConfigError, match=r"^model\.name: 'acme/Widget-8B' is not in the model catalog; put its "
                                          r"Hugging Face config\.json in the run folder"):
        resolve_model_name("acme/Widget-8B", tmp_path / "run")


def test_a_config_servesim_cannot_read_says_why(tmp_path):
    write_config(tmp_path / "run", **dict(QWEN3_8B, model_type="gpt2"))
    with pytest.raises(ConfigError, match=r"not in the model catalog \(.*model_type 'gpt2' is not supported"):
        resolve_model_name("acme/Widget-8B", tmp_path / "run")


def test_aiconfigurator_cores_copy_of_a_models_config_is_used(tmp_path, monkeypatch):
    package = tmp_path / "aiconfigurator_core"
    path = write_config(package / "model_configs", name="Acme--Widget-8B_config.json", **QWEN3_8B)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: SimpleNamespace(
        submodule_search_locations=[str(package)]) if name == "aiconfigurator_core" else real(name, *a))
    assert aiconfigurator_model_config("acme/widget-8b") == path  # HF ids are case-insensitive
    assert aiconfigurator_model_config("Widget-8B") is None  # only an org/name id names a copy
    assert resolve_model_name("Acme/Widget-8B") == str(path)


LLAMA_70B_HF = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
                "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("quant, form, kind", [
    ({"quant_method": "fp8"}, "fp8", "aiconfigurator"),  # per-tensor FP8: aiconfigurator's FP8 GEMMs
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8_block", "roofline"),  # not imported
])
def test_an_fp8_checkpoint_is_predicted_from_its_own_gemms_or_the_roofline(tmp_path, quant, form, kind):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    from fidelity.predict import gpu_latency_model
    from fidelity.run_config import config_dict_for_run
    from fidelity.runs import RealRun, ServerArgs
    from fidelity_helpers import make_requests, write_exp_config
    from sim.config import load_config

    write_exp_config(tmp_path, model="acme/Llama-70B-FP8", tensor_parallelism=4, gpu="H100")
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_70B_HF, "quantization_config": quant}))
    server = ServerArgs(model="acme/Llama-70B-FP8", gpu="H100", tensor_parallel_size=4, max_model_len=4096)
    run = RealRun(name="fp8", source="hand-made", path=tmp_path, server=server,
                  requests=make_requests().assign(prefix_group=-1, num_prefix_tokens=0))
    config = load_config(config_dict_for_run(run))
    assert config.model.spec().quantization == form
    model, got = gpu_latency_model(run, config)
    assert got == kind
    if kind == "aiconfigurator":
        assert "fp8" in model.profile.ops["qkv_proj"].source and "fp8" not in model.profile.ops["lm_head"].source


@pytest.mark.parametrize("version, on", [(None, True), ("0.15.1", False), ("0.18.1", False), ("0.19.0", True)])
def test_a_v1_run_admits_on_the_whole_prompt_from_vllm_0_19(version, on):
    from fidelity.run_config import ServerArgs, scheduler_section

    section = scheduler_section(ServerArgs(model="m", engine_version=version), "H100-SXM", "api_server")
    assert section.get("reserve_full_isl", False) is on  # vLLM 0.19's scheduler_reserve_full_isl default
    v0 = scheduler_section(ServerArgs(model="m", engine_version="0.2.3", enable_chunked_prefill=False),
                           "H100-SXM", "api_server")
    assert "reserve_full_isl" not in v0


@pytest.mark.parametrize("version, policy, chunked", [
    (None, "continuous", None),  # unrecorded: taken for v0's era
    ("0.4.3", "continuous", None),  # v0
    ("0.11.0", "vllm", True),  # v1 before 0.11.1 chunks whatever the flag says
    ("0.11.1", "vllm", False),  # honoured: decodes and whole prompts share a step
    ("0.19.0", "vllm", False)])
def test_chunked_prefill_off_maps_to_the_release_s_engine(version, policy, chunked):
    from fidelity.run_config import ServerArgs, scheduler_section

    server = ServerArgs(model="m", engine_version=version, enable_chunked_prefill=False, max_model_len=4096)
    section = scheduler_section(server, "H100-SXM", "api_server")
    assert section["policy"] == policy
    assert section.get("enable_chunked_prefill", True if policy == "vllm" else None) is chunked
    if chunked is False:  # vLLM's default budget without chunking covers max_model_len
        assert section["max_num_batched_tokens"] >= 4096
        SchedulerConfig(**section)  # a config vLLM accepts

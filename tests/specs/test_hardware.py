"""The model and hardware config sections: defaults, validation messages, derived figures."""
from __future__ import annotations

import pytest

from policies import ConfigError
from specs import HardwareConfig, ModelConfig, get_gpu


def test_defaults_build():
    assert ModelConfig().spec().name == "Llama-2-7B"
    assert HardwareConfig().gpu_spec().name == "H100-SXM"


@pytest.mark.parametrize("kwargs, field", [
    (dict(gpu="nope"), "hardware.gpu"), (dict(tp=6), "hardware.tp"), (dict(num_gpu_blocks=0), "hardware.num_gpu_blocks"),
    (dict(gpu_memory_utilization=1.5), "hardware.gpu_memory_utilization"), (dict(swap_space_gb=-1), "hardware.swap_space_gb"),
    (dict(latency="magic"), "hardware.latency"), (dict(latency="profiled"), "hardware.profile"),
])
def test_hardware_errors_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match="^" + field.replace(".", r"\.")):
        HardwareConfig(**kwargs)


@pytest.mark.parametrize("kwargs, field", [(dict(name="gpt-9"), "model.name"), (dict(dtype="int3"), "model.dtype")])
def test_model_errors_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match="^" + field.replace(".", r"\.")):
        ModelConfig(**kwargs)


def test_fp8_kv_cache_halves_kv_bytes():
    assert ModelConfig(kv_cache_dtype="fp8").spec().kv_bytes_per_token * 2 == ModelConfig().spec().kv_bytes_per_token


def test_pcie_override_and_cost():
    assert HardwareConfig(pcie_bandwidth_gbps=10).pcie_bandwidth == 10e9
    assert HardwareConfig().pcie_bandwidth == get_gpu("H100-SXM").pcie_bandwidth
    hw = HardwareConfig(tp=4, price_per_hour=2.0)
    assert hw.cost_per_hour == 8.0


def test_fp8_weights_keep_a_16_bit_cache_unless_asked():
    """vLLM: quantized weights leave kv_cache_dtype 'auto' at the activations' dtype; the two are independent."""
    base, w8 = ModelConfig(name="Llama-3-8B").spec(), ModelConfig(name="Llama-3-8B", dtype="fp8").spec()
    assert w8.dtype_bytes == 1 and w8.kv_bytes_per_token == base.kv_bytes_per_token
    both = ModelConfig(name="Llama-3-8B", dtype="fp8", kv_cache_dtype="fp8").spec()
    assert both.kv_bytes_per_token * 2 == base.kv_bytes_per_token
    # the layers' weights at one byte, the embedding and LM head (vLLM leaves them unquantized) at two
    wide = 2 * base.vocab_size * base.hidden_size
    assert both.weight_bytes == (base.num_params - wide) + 2 * wide < base.weight_bytes
    assert (w8.quantization, base.quantization) == ("fp8", "none")  # vLLM's --quantization fp8: per tensor


@pytest.mark.parametrize("kwargs, match", [
    (dict(tp=8, ep=3), r"^hardware\.ep: 3 must divide hardware\.tp"),
    (dict(ep=0), r"^hardware\.ep: must be >= 1"),
    (dict(ep=2, ep_link_bandwidth_gbps=0), r"^hardware\.ep_link_bandwidth_gbps"),
])
def test_expert_parallel_errors_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        HardwareConfig(**kwargs)


def test_expert_parallelism_needs_a_moe_model_whose_experts_it_divides():
    from specs import check_parallelism, get_model

    with pytest.raises(ConfigError, match=r"^hardware\.ep: 2 needs a mixture-of-experts model"):
        check_parallelism(get_model("Llama-2-7B"), 1, 2)
    with pytest.raises(ConfigError, match=r"^hardware\.ep: 16 does not divide .* 8 routed experts"):
        check_parallelism(get_model("Mixtral-8x7B"), 8, 16)
    check_parallelism(get_model("DeepSeek-V3"), 8, 32)

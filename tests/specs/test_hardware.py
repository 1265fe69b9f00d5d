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

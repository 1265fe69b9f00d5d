"""GPU catalog: the required GPUs exist, their figures are consistent, lookups are forgiving."""
from __future__ import annotations

import pytest

from policies import ConfigError
from specs import GPUS, get_gpu


def test_required_gpus_present():
    assert {"H100-SXM", "H800", "H200", "A100-80G", "A100-40G", "L40S"} <= set(GPUS)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_figures_are_physically_consistent(name):
    g = GPUS[name]
    assert g.flops_fp8 >= g.flops_bf16
    # ridge point (FLOPs per byte where GEMMs turn compute-bound) lies between 100 and 600 on
    # every tensor-core GPU of the last two generations
    assert 100 < g.flops_bf16 / g.hbm_bandwidth < 600
    assert g.interconnect_bandwidth >= g.pcie_bandwidth
    assert 16 * 2**30 < g.memory_bytes < 200 * 2**30


def test_h800_differs_from_h100_only_in_nvlink():
    h100, h800 = get_gpu("H100"), get_gpu("H800")
    assert h800.flops_bf16 == h100.flops_bf16 and h800.hbm_bandwidth == h100.hbm_bandwidth
    assert h800.nvlink_bandwidth < h100.nvlink_bandwidth


def test_h200_has_more_and_faster_memory_than_h100():
    assert get_gpu("h200").memory_bytes > get_gpu("h100").memory_bytes
    assert get_gpu("h200").hbm_bandwidth > get_gpu("h100").hbm_bandwidth


@pytest.mark.parametrize("alias, name", [("h100", "H100-SXM"), ("A100-80GB", "A100-80G"), ("rtx4090", "RTX-4090"),
                                         ("l40s", "L40S")])
def test_aliases(alias, name):
    assert get_gpu(alias).name == name


def test_unknown_gpu_lists_choices():
    with pytest.raises(ConfigError, match=r"^hardware\.gpu: unknown GPU 'tpu'.*H100-SXM"):
        get_gpu("tpu")

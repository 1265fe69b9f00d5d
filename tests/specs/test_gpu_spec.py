"""GPU catalog: the required GPUs exist, their figures are consistent, lookups are forgiving."""
from __future__ import annotations

import pytest

from policies import ConfigError
from specs import GPUS, get_gpu


def test_required_gpus_present():
    assert {"H100-SXM", "H800", "H200", "A100-80G", "A100-40G", "L40S"} <= set(GPUS)
    assert {"B200", "GB200", "H20", "MI300X", "MI325X", "MI355X", "A10G"} <= set(GPUS)


def test_each_generation_is_faster_than_the_last():
    # Blackwell over Hopper over Ampere in dense BF16 and HBM bandwidth; MI355X over MI300X
    for newer, older in (("B200", "H200"), ("H200", "A100-80G"), ("GB200", "B200"), ("MI355X", "MI325X")):
        assert get_gpu(newer).flops_bf16 >= get_gpu(older).flops_bf16
        assert get_gpu(newer).hbm_bandwidth >= get_gpu(older).hbm_bandwidth
    assert get_gpu("MI325X").memory_bytes > get_gpu("MI300X").memory_bytes > get_gpu("H200").memory_bytes


@pytest.mark.parametrize("name", sorted(GPUS))
def test_figures_are_physically_consistent(name):
    g = GPUS[name]
    assert g.flops_fp8 >= g.flops_bf16
    # ridge point (FLOPs per byte where GEMMs turn compute-bound) lies between 100 and 600 on
    # every tensor-core GPU of the last two generations, except export parts cut in compute (H20: 37)
    low = 30 if name == "H20" else 100
    assert low < g.flops_bf16 / g.hbm_bandwidth < 600
    assert g.interconnect_bandwidth >= g.pcie_bandwidth
    assert 16 * 2**30 < g.memory_bytes < 300 * 2**30
    # power: idle below board power, board power within what air- or liquid-cooled parts draw
    assert 0 < g.idle_power_w < 0.25 * g.board_power_w and 100 <= g.board_power_w <= 1500
    assert g.source and g.vendor in ("NVIDIA", "AMD")


def test_h800_differs_from_h100_only_in_nvlink():
    h100, h800 = get_gpu("H100"), get_gpu("H800")
    assert h800.flops_bf16 == h100.flops_bf16 and h800.hbm_bandwidth == h100.hbm_bandwidth
    assert h800.nvlink_bandwidth < h100.nvlink_bandwidth


def test_h200_has_more_and_faster_memory_than_h100():
    assert get_gpu("h200").memory_bytes > get_gpu("h100").memory_bytes
    assert get_gpu("h200").hbm_bandwidth > get_gpu("h100").hbm_bandwidth


def test_the_cut_down_and_pcie_parts_are_not_their_big_siblings():
    """Each variant a planner may type has its own figures: the L40 has half the L40S's tensor rate
    in the same memory, AWS's A10G runs the GeForce rate under the A10's 125 TFLOPS, and the PCIe
    H100/A100 have less bandwidth and power than the SXM parts, and no NVLink to shard over."""
    l40, l40s = get_gpu("l40"), get_gpu("l40s")
    assert l40.name == "L40" and l40.flops_bf16 == pytest.approx(l40s.flops_bf16 / 2, rel=0.01)
    assert l40.hbm_bandwidth == l40s.hbm_bandwidth and l40.board_power_w < l40s.board_power_w
    assert get_gpu("a10").name == "A10" and get_gpu("a10g").flops_bf16 < get_gpu("a10").flops_bf16
    for pcie, sxm in (("h100-pcie", "h100"), ("a100-pcie", "a100")):
        p, s = get_gpu(pcie), get_gpu(sxm)
        assert p.hbm_bandwidth < s.hbm_bandwidth and p.board_power_w < s.board_power_w
        assert p.nvlink_bandwidth == 0 and p.interconnect_bandwidth == p.pcie_bandwidth
        assert p.memory_bytes == pytest.approx(s.memory_bytes, rel=0.01)


@pytest.mark.parametrize("alias, name", [("h100", "H100-SXM"), ("A100-80GB", "A100-80G"), ("rtx4090", "RTX-4090"),
                                         ("l40s", "L40S"), ("l40", "L40"), ("a10", "A10"), ("H100 PCIe", "H100-PCIe")])
def test_aliases(alias, name):
    assert get_gpu(alias).name == name


def test_unknown_gpu_lists_choices():
    with pytest.raises(ConfigError, match=r"^hardware\.gpu: unknown GPU 'tpu'.*H100-SXM"):
        get_gpu("tpu")

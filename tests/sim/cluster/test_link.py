"""The KV link: transfer time = latency + bytes / bandwidth, presets, and errors naming the field."""
import pytest

from policies import ConfigError
from sim.cluster.link import GB, LINK_PRESETS, Link


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    link = Link(bandwidth=10 * GB, latency=1e-3)
    assert link.transfer_time(0) == 0.0
    assert link.transfer_time(10 * GB) == pytest.approx(1.0 + 1e-3)
    # linear in bytes: doubling the bytes doubles the bandwidth term
    t1, t2 = link.transfer_time(1e9), link.transfer_time(2e9)
    assert t2 - link.latency == pytest.approx(2 * (t1 - link.latency))


def test_presets_order_and_parallel_lanes():
    times = {name: Link.preset(name).transfer_time(1e9) for name in LINK_PRESETS}
    assert times["nvlink"] < times["infiniband"] < times["roce"] < times["ethernet"]
    one, four = Link.preset("infiniband"), Link.preset("infiniband", num_parallel=4)
    assert four.bandwidth == pytest.approx(4 * one.bandwidth)
    assert Link.preset("pcie", bandwidth_gbps=1.0).bandwidth == pytest.approx(1e9)


@pytest.mark.parametrize("kwargs, field", [
    ({"bandwidth": 0}, "link_bandwidth_gbps"),
    ({"bandwidth": 1e9, "latency": -1}, "link_latency_s"),
])
def test_bad_link_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        Link(**kwargs)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ConfigError, match="disaggregation.link: 'carrier-pigeon'.*nvlink"):
        Link.preset("carrier-pigeon")

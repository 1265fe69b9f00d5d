"""The replica's running count of outstanding tokens (`sim.outstanding`) against summing every live
request, at every read a router (or the autoscaler) makes, over fleets that preempt, swap, chunk,
cache prefixes, load KV from the offload tier, speculate, time out, hand off between pools and scale."""
from __future__ import annotations

from pathlib import Path

import pytest

from policies import Request
from sim.config import load_config
from sim.outstanding import OutstandingTokens
from sim.replica import Replica
from sim.runner import simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLEET = ["cluster.num_replicas=4", "cluster.router=least_tokens", "workload.num_requests=300"]
PREFIXES = ["workload.num_prefix_groups=8", "workload.prefix_len=512", "workload.users_per_group=4",
            "cache.enable_prefix_caching=true"]
SHORT_OF_BLOCKS = ["hardware.num_gpu_blocks=300", "workload.rate=100"]

CONFIGS = {
    "chunked": ("default.toml", FLEET + ["workload.rate=60"]),
    "recompute": ("default.toml", FLEET + SHORT_OF_BLOCKS),
    "swap": ("default.toml", FLEET + SHORT_OF_BLOCKS + ["scheduler.preemption=swap", "hardware.swap_space_gb=4"]),
    "hybrid": ("default.toml", FLEET + SHORT_OF_BLOCKS + [
        "scheduler.preemption=hybrid", "hardware.swap_space_gb=4", "scheduler.hybrid_swap_threshold=16",
        "cluster.router=power_of_two"]),
    "continuous": ("default.toml", FLEET + SHORT_OF_BLOCKS + ["scheduler.policy=continuous"]),
    "static": ("default.toml", FLEET + ["workload.rate=30", "scheduler.policy=static"]),
    "prefix caching": ("default.toml", FLEET + PREFIXES + ["workload.rate=40", "cluster.router=prefix_aware",
                                                           "hardware.num_gpu_blocks=600"]),
    "offload": ("default.toml", FLEET + PREFIXES + ["workload.rate=40", "hardware.num_gpu_blocks=400",
                                                    "cache.offload_size_gb=8"]),
    "speculative": ("default.toml", FLEET + ["workload.rate=60", "speculative.method=ngram",
                                             "speculative.num_speculative_tokens=3", "speculative.acceptance_rate=0.7"]),
    "timeouts": ("default.toml", FLEET + ["workload.rate=120", "workload.request_timeout_s=3"]),
    # each end sends the next request at once: routed from inside the replica's finish hooks
    "closed loop": ("default.toml", FLEET + ["workload.kind=closed_loop", "workload.num_users=48"]),
    "closed loop, speculative": ("default.toml", FLEET + [
        "workload.kind=closed_loop", "workload.num_users=48", "speculative.method=ngram",
        "speculative.num_speculative_tokens=3", "speculative.acceptance_rate=0.7"]),
    # equal lengths: requests finish together at the end of a fast path's stretch
    "closed loop, equal lengths": ("default.toml", FLEET + [
        "workload.kind=closed_loop", "workload.num_users=16", "cluster.num_replicas=2",
        "workload.prompt_len={kind='constant',value=256}", "workload.output_len={kind='constant',value=64}"]),
    "async": ("default.toml", FLEET + ["workload.rate=60", "scheduler.async_scheduling=true"]),
    "disaggregated": ("disagg.toml", ["workload.rate=20", "workload.num_requests=300"]),
    "autoscaled": ("default.toml", ["cluster.router=least_tokens", "workload.num_requests=400", "workload.rate=40", "autoscaling.enabled=true",
                                    "autoscaling.min_replicas=1", "autoscaling.max_replicas=4",
                                    "autoscaling.metric=queue", "autoscaling.target=2", "autoscaling.interval_s=2",
                                    "autoscaling.provisioning_delay_s=3"]),
}


@pytest.fixture
def checked_reads(monkeypatch):
    """Every read of a replica's count, with the sum over its live requests at that moment."""
    reads = []
    count = Replica.num_outstanding_tokens

    def checked(self):
        # a carried stretch writes its cohort's tokens when it ends: until then the requests hold fewer
        # than the loop would have written by now, and the count says so (`MixedReplay.pending`;
        # tests/sim/cluster/test_carried_fleet.py checks the reads against a run that carries nothing)
        unwritten = self._mixed.pending if self._mixed is not None else 0
        reads.append((count(self), OutstandingTokens.recount(self._live.values()) - unwritten))
        return reads[-1][0]

    monkeypatch.setattr(Replica, "num_outstanding_tokens", checked)
    return reads


@pytest.mark.parametrize("name", list(CONFIGS))
def test_count_equals_the_sum_over_live_requests_at_every_read(name, checked_reads):
    file, overrides = CONFIGS[name]
    result = simulate(load_config(EXAMPLES / file, overrides))
    wrong = [(i, kept, summed) for i, (kept, summed) in enumerate(checked_reads) if kept != summed]
    assert len(checked_reads) > 100 and not wrong, wrong[:5]
    assert sum(1 for kept, _ in checked_reads if kept) > len(checked_reads) // 4  # the fleet was loaded
    s = result.summary
    if name in ("recompute", "swap", "continuous", "hybrid"):
        assert s["num_preemptions"] > 0
    if name == "timeouts":
        assert s["num_timed_out"] > 0


@pytest.mark.parametrize("drafts", [True, False])
def test_count_follows_requests_in_and_out(drafts):
    """Added, advanced (a refresh), ended: the count is the owed tokens of those still in it."""
    a, b, stranger = Request("a", 0.0, 100, 10), Request("b", 0.0, 50, 5), Request("x", 0.0, 7, 7)
    load = OutstandingTokens([a], drafts)
    load.add(b)
    a.num_computed_tokens = 100  # its prefill scheduled: the step runs
    load.refresh(iter([a, stranger]))
    assert load.total == OutstandingTokens.recount([a, b]) == 10 + 55
    a.output_token_ids.append(0)  # its first token: the step ended
    load.refresh([a, b])
    assert load.total == OutstandingTokens.recount([a, b])
    load.remove(b)
    load.remove(stranger)
    assert load.total == OutstandingTokens.recount([a]) == 10  # 1 token now in the cache, 9 outputs to go

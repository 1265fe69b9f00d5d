"""Colocated clusters: round-robin scaling, prefix affinity, heterogeneous replicas, nothing lost."""
import numpy as np
import pytest
from scipy import stats

from sim.runner import simulate
from cluster_helpers import make_config


def test_two_replicas_at_twice_the_rate_match_one_replica():
    """Round-robin halves a Poisson stream: each replica sees rate r, so latencies match.

    Each half is Erlang-2 (more regular than Poisson), so fewer prefills collide and TTFT comes out
    a little lower; TPOT and E2E match within a few percent. Doubling the load on one replica
    instead moves every metric by a quarter or more, so the check can tell.
    """
    one = simulate(make_config(["workload.rate=15", "workload.num_requests=300"])).requests
    two = simulate(make_config(["workload.rate=30", "workload.num_requests=600", "cluster.num_replicas=2",
                                "cluster.router=round_robin"])).requests
    crowded = simulate(make_config(["workload.rate=30", "workload.num_requests=600"])).requests
    assert set(two["replica"]) == {"0", "1"}
    assert abs((two["replica"] == "0").mean() - 0.5) < 0.01
    for metric, tol in (("ttft_s", 0.15), ("tpot_s", 0.05), ("e2e_s", 0.05)):
        a, b, c = one[metric].dropna(), two[metric].dropna(), crowded[metric].dropna()
        for q in (0.5, 0.9):
            assert b.quantile(q) == pytest.approx(a.quantile(q), rel=tol), (metric, q)
            assert c.quantile(q) > 1.25 * a.quantile(q), (metric, q)
    assert stats.ks_2samp(one["e2e_s"].dropna(), two["e2e_s"].dropna()).pvalue > 0.01


def test_prefix_aware_router_hits_the_prefix_cache_more_than_round_robin():
    """16 shared prefixes of 1024 tokens do not fit one replica's 600-block cache, but a quarter do.

    Round-robin makes every replica see every prefix (LRU thrash); prefix-aware routing keeps each
    group on one replica, so its blocks stay cached.
    """
    shared = ["workload.num_prefix_groups=16", "workload.prefix_len=1024", "workload.users_per_group=4",
              "cache.enable_prefix_caching=true", "cluster.num_replicas=4", "workload.rate=20",
              "workload.num_requests=300", "hardware.num_gpu_blocks=600"]
    rr = simulate(make_config(shared + ["cluster.router=round_robin"]))
    pa = simulate(make_config(shared + ["cluster.router=prefix_aware"]))
    hit_rr, hit_pa = rr.summary["prefix_cache_hit_rate"], pa.summary["prefix_cache_hit_rate"]
    assert hit_pa > 1.5 * hit_rr, (hit_pa, hit_rr)
    assert pa.summary["ttft_s"]["mean"] < rr.summary["ttft_s"]["mean"]  # cached prefixes skip prefill
    counts = pa.requests["replica"].value_counts()
    assert len(counts) == 4 and counts.max() < 2 * counts.min()  # affinity without piling up


def test_heterogeneous_replicas_least_tokens_beats_round_robin():
    """One fast and one slow replica: least outstanding tokens routes more work to the fast one."""
    groups = 'cluster.replicas=[{count = 1, gpu = "H100-SXM"}, {count = 1, gpu = "A100-40GB"}]'
    common = [groups, "workload.rate=14", "workload.num_requests=300"]
    rr = simulate(make_config(common + ["cluster.router=round_robin"]))
    lt = simulate(make_config(common + ["cluster.router=least_tokens"]))
    steps = rr.steps
    one_token = steps[(steps.num_prefill_tokens == 0)]
    fast, slow = (one_token[one_token.replica == n]["duration"].median() for n in ("0", "1"))
    assert fast < slow  # each replica ran its own GPU's latency model
    assert (lt.requests["replica"] == "0").mean() > 0.55
    assert lt.requests["e2e_s"].mean() < rr.requests["e2e_s"].mean()


@pytest.mark.parametrize("router", ["round_robin", "least_tokens", "power_of_two", "prefix_aware"])
def test_every_request_appears_once_finished_or_rejected(router):
    cfg = make_config(["cluster.num_replicas=3", f"cluster.router={router}", "workload.too_long=keep",
                       "scheduler.max_model_len=2048", "workload.num_requests=120", "workload.rate=30"],
                      prompt=(800, 1.0, 8000))
    res = simulate(cfg)
    reqs = res.requests
    assert len(reqs) == 120 and reqs["req_id"].is_unique
    assert set(reqs["finish_reason"]) <= {"length", "stop", "rejected"}
    too_long = reqs["num_prompt_tokens"] + reqs["max_tokens"] > 2048
    assert too_long.any()
    assert (reqs.loc[too_long, "finish_reason"] == "rejected").all()
    assert np.isfinite(reqs.loc[~too_long, "e2e_s"]).all()


def test_bad_cluster_keys_name_the_field():
    from policies import ConfigError

    with pytest.raises(ConfigError, match="cluster.router"):
        make_config(["cluster.router=random"])
    with pytest.raises(ConfigError, match=r"cluster.replicas\[0\].cnt"):
        make_config(["cluster.replicas=[{cnt = 2}]"])
    with pytest.raises(ConfigError, match="cluster.num_replicas"):
        make_config(["cluster.num_replicas=0"])


def test_an_unknown_pool_key_is_named_where_it_was_written():
    from dataclasses import fields

    from policies import ConfigError
    from sim.cluster.config import PoolConfig

    allowed = ", ".join(f.name for f in fields(PoolConfig))
    for override, where in (("cluster.replicas=[{count = 1}, {count = 1, gpus = 2}]", "cluster.replicas[1]"),
                            ("disaggregation.prefill={count = 1, tp_size = 2}", "disaggregation.prefill")):
        with pytest.raises(ConfigError) as info:
            make_config([override])
        key = override.split(", ")[-1].split(" =")[0]
        assert str(info.value) == f"{where}.{key}: unknown key; allowed keys: {allowed}"

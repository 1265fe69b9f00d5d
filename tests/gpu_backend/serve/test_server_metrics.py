"""The Prometheus exposition: cumulative buckets that agree with numpy, parseable text."""
from __future__ import annotations

import numpy as np

from gpu_backend.serve.metrics import Histogram, ServerMetrics, parse_metrics


def test_histogram_buckets_are_cumulative_counts():
    rng = np.random.default_rng(0)
    values = rng.exponential(0.05, size=500)
    h = Histogram("x", "help", (0.01, 0.05, 0.1, 0.5))
    for v in values:
        h.observe(float(v))
    samples = parse_metrics("\n".join(h.render()))
    for le in (0.01, 0.05, 0.1, 0.5):
        assert samples[f'x_bucket{{le="{le}"}}'] == np.sum(values <= le)
    assert samples['x_bucket{le="+Inf"}'] == samples["x_count"] == 500
    assert abs(samples["x_sum"] - values.sum()) < 1e-9


def test_exposition_has_one_type_line_per_metric_and_every_counter():
    m = ServerMetrics()
    m.observe_first_token(0.02)
    m.observe_tokens(1, None)
    m.observe_tokens(1, 0.01)
    m.observe_finished("length", 5, 0.03)
    m.observe_refused("queue_full")
    text = m.render({"num_requests_running": 2, "kv_cache_usage_perc": 0.25, "num_preemptions_total": 3})
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))
    s = parse_metrics(text)
    assert s["servesim:num_requests_running"] == 2 and s["servesim:kv_cache_usage_perc"] == 0.25
    assert s["servesim:num_preemptions_total"] == 3
    assert s['servesim:request_success_total{finished_reason="length"}'] == 1
    assert s['servesim:request_refused_total{reason="queue_full"}'] == 1
    assert s["servesim:generation_tokens_total"] == 2 and s["servesim:prompt_tokens_total"] == 5
    assert s["servesim:time_to_first_token_seconds_count"] == 1
    assert s["servesim:inter_token_latency_seconds_count"] == 1

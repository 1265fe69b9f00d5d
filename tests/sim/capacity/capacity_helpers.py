"""Factory helpers for the capacity tests: a small config (dict) that simulates in well under a second."""
from __future__ import annotations


def small_config(num_requests: int = 80, rate: float = 8.0, **sections) -> dict:
    """Llama-3-8B on one H100, lognormal chat lengths; `sections` merge into the dict."""
    d = {
        "model": {"name": "Llama-3-8B"},
        "hardware": {"gpu": "H100-SXM", "tp": 1},
        "scheduler": {"policy": "chunked", "max_num_batched_tokens": 2048, "max_num_seqs": 128},
        "workload": {"kind": "poisson", "rate": rate, "num_requests": num_requests, "seed": 3,
                     "prompt_len": {"kind": "lognormal", "median": 600, "sigma": 0.7, "max": 4000},
                     "output_len": {"kind": "lognormal", "median": 120, "sigma": 0.6, "max": 600}},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.02},
    }
    for name, values in sections.items():
        d.setdefault(name, {}).update(values)
    return d

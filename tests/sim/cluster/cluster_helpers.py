"""Factory helpers for the cluster and capacity tests: small configs that simulate in about a second."""
from __future__ import annotations

from sim.config import load_config


def base_dict(num_requests: int = 200, rate: float = 5.0, prompt=(400, 0.6, 3000), output=(100, 0.6, 800),
              seed: int = 1, **sections) -> dict:
    """A Llama-3-8B on H100 config with lognormal lengths (median, sigma, max); `sections` merge in."""
    d = {
        "model": {"name": "Llama-3-8B"},
        "hardware": {"gpu": "H100-SXM", "tp": 1},
        "scheduler": {"policy": "chunked", "max_num_batched_tokens": 2048, "max_num_seqs": 128},
        "workload": {"kind": "poisson", "rate": rate, "num_requests": num_requests, "seed": seed,
                     "prompt_len": {"kind": "lognormal", "median": prompt[0], "sigma": prompt[1], "max": prompt[2]},
                     "output_len": {"kind": "lognormal", "median": output[0], "sigma": output[1], "max": output[2]}},
    }
    for name, values in sections.items():
        d.setdefault(name, {}).update(values)
    return d


def make_config(overrides=(), **kwargs):
    return load_config(base_dict(**kwargs), list(overrides))

"""Seeded random validation workloads: `servesim validate` configs nobody tuned anything on.

The shipped `examples/validate-*.toml` are four fixed workloads, and every change to the
calibration was judged on them; a figure on them says little about a workload they do not look
like. `draw(seed, index)` makes a fresh one, as a dict of config sections (`write` saves it as a
TOML file `servesim validate` reads), from `numpy.random.default_rng([seed, index])` alone: Poisson,
bursty or on/off arrivals; heavy-tailed prompts; chunked at a small or large budget, or continuous;
a roomy KV pool, or a small one under recompute or swap preemption (the ranges: `draw`).

The policy, the arrival process and the memory case are stratified over `index`: any six
consecutive workloads from a multiple of 3 (0-5, 3-8, ...) cover every policy and every arrival
process twice and both preemption modes, and 0-8 every pair of policy and arrival process; the rest
is drawn. Rates are drawn against a rough service rate of the validation model (`VALIDATION_MODELS`:
the tiny CPU model, or small-llama, whose weights exceed a shared last-level cache) so that the
engine is busy but not hopelessly overloaded (a queue that only grows measures the backlog, not the
model).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.cpu_cache import CpuCache
from specs.model_spec import ModelSpec

REPO = Path(__file__).resolve().parent.parent
POLICIES = ("chunked-small", "continuous", "chunked-large")
ARRIVALS = ("poisson", "gamma", "on_off")
MEMORY = ("roomy", "recompute", "roomy", "swap", "roomy", "recompute")
MODEL = "examples/tiny-llama/config.json"
PROFILE = "examples/profiles/tiny-llama-cpu.json"  # for `servesim simulate` of a written file
#: the engine's KV block size on every workload here
BLOCK_SIZE = 16
#: rough costs of the tiny CPU model, for choosing rates: seconds per prompt token, and per output token
#: of a decode batch of ~8 (a 3 ms step shared, plus 0.4 ms a sequence)
TOKEN_S, OUTPUT_S = 1.1e-4, 8e-4


@dataclass(frozen=True)
class ValidationModel:
    """A CPU validation model: its config.json, the profile `servesim simulate` of a written file
    uses (None: none shipped, the file then simulates with the roofline), and its rough costs on one
    CPU thread for choosing rates (seconds per prompt token; per output token in a decode batch of ~8)."""

    config: str
    profile: str | None
    token_s: float
    output_s: float


#: the validation models by name: the tiny one, and one whose weights exceed a shared last-level
#: cache (examples/small-llama/README.md); its costs are the tiny one's times what one engine run
#: of each measured on one thread (a 256-token prefill: 6.8x; a decode step of 8: 5.3x)
VALIDATION_MODELS = {
    "tiny-llama": ValidationModel(MODEL, PROFILE, TOKEN_S, OUTPUT_S),
    "small-llama": ValidationModel("examples/small-llama/config.json", None, TOKEN_S * 6.8, OUTPUT_S * 5.3),
}


#: the name that picks the validation model by the machine's last-level cache (`default_model`)
AUTO = "auto"


def weights_bytes(name: str) -> int:
    """Bytes of validation model `name`'s float32 weights (the CPU engine's dtype), from its config.json."""
    return ModelSpec.from_hf_config(REPO / validation_model(name).config).num_params * 4


def default_model(cache: CpuCache | None) -> tuple[str, str]:
    """(name, why) of the validation model to use on a CPU with last-level cache `cache`: the
    smallest whose weights do not fit in it, so that its steps read them from memory whatever other
    tenants of a shared cache do (`calibrate.cpu_cache`); the tiny model where Linux describes no
    cache or every model fits (the cheapest; its verdict then depends on the neighbours, and
    `validate` says so)."""
    if cache is None:
        return "tiny-llama", "no last-level cache described here"
    for num_bytes, name in sorted((weights_bytes(n), n) for n in VALIDATION_MODELS):
        if not cache.holds(num_bytes):
            return name, (f"the smallest validation model whose weights ({num_bytes / 2 ** 20:.0f} MiB) exceed "
                          f"this CPU's {cache.name}")
    return "tiny-llama", f"every validation model's weights fit this CPU's {cache.name}"


def validation_model(name: str) -> ValidationModel:
    """The `VALIDATION_MODELS` entry `name`; an unknown one is named with the choices."""
    if name not in VALIDATION_MODELS:
        raise ValueError(f"model: {name!r} is not allowed; choose one of {', '.join(VALIDATION_MODELS)}")
    return VALIDATION_MODELS[name]


def _lengths(rng: np.random.Generator, max_len: int) -> tuple[dict, list[dict]]:
    """(prompt_len, classes): one heavy-tailed prompt distribution, or a short and a long class."""
    if rng.random() < 0.35:
        short = {"kind": "lognormal", "median": int(rng.integers(12, 40)), "sigma": round(float(rng.uniform(0.4, 0.8)), 2),
                 "max": max_len // 4}
        long = {"kind": "lognormal", "median": int(rng.integers(250, 600)), "sigma": round(float(rng.uniform(0.3, 0.6)), 2),
                "max": max_len}
        frac = round(float(rng.uniform(0.6, 0.85)), 2)
        return short, [{"name": "short", "fraction": frac, "prompt_len": short},
                       {"name": "long", "fraction": round(1.0 - frac, 2), "prompt_len": long}]
    median = int(np.exp(rng.uniform(np.log(24), np.log(200))))
    return {"kind": "lognormal", "median": median, "sigma": round(float(rng.uniform(0.9, 1.6)), 2), "max": max_len}, []


def _mean_lognormal(d: dict) -> float:
    return min(d["median"] * float(np.exp(d["sigma"] ** 2 / 2)), d["max"])


def draw(seed: int, index: int, model: str = "tiny-llama") -> dict:
    """The config sections (model, hardware, scheduler, cache, workload) of random workload `index`.

    - arrivals: Poisson, bursty gamma (cv 2-4) or on/off (alternating busy and quiet stages);
    - prompts: heavy-tailed (lognormal, sigma 0.9-1.6, clipped to `max_model_len`, which is 1024 or the
      model's 2048 with a roomy pool), sometimes a mixture of a short and a long class; outputs uniform
      or lognormal;
    - scheduler: chunked with a small (24-96) or a large (384-1024) token budget, or continuous
      (whole prompts, prefill-first);
    - memory: a roomy KV pool, or a small one under recompute or swap preemption.

    `model`: a `VALIDATION_MODELS` name; the workload is the same for every model but for its rates.
    `offered_load`: the load drawn (0.35-0.8) against the model's rough costs; bursts and
    the real engine's speed put the calibrated utilization anywhere from 0.3 to 1.0 (see
    `calibrate.validate.conditioning`).
    """
    costs = validation_model(model)
    rng = np.random.default_rng([seed, index])
    policy = POLICIES[index % len(POLICIES)]
    arrival = ARRIVALS[(index + index // len(POLICIES)) % len(ARRIVALS)]
    memory = MEMORY[index % len(MEMORY)]
    num_requests = int(rng.integers(40, 71))
    if memory == "roomy":
        # now and then the model's whole length: a continuous step then prefills prompts of up to 2048
        max_len = 2048 if rng.random() < 0.3 else 1024
        num_blocks = 1024
    else:
        # a pool of 48-96 blocks (768-1536 tokens): a handful of requests fill it
        num_blocks = int(rng.integers(48, 97))
        max_len = min(512, num_blocks * BLOCK_SIZE // 2)
    prompt_len, classes = _lengths(rng, max_len)
    if rng.random() < 0.5:
        hi = int(rng.integers(24, 97))
        output_len = {"kind": "uniform", "low": int(rng.integers(2, 9)), "high": hi}
        mean_out = (output_len["low"] + hi) / 2
    else:
        output_len = {"kind": "lognormal", "median": int(rng.integers(12, 48)), "sigma": round(float(rng.uniform(0.5, 1.0)), 2),
                      "max": 160}
        mean_out = _mean_lognormal(output_len)
    if memory != "roomy":  # long outputs grow the running set past the pool: preemptions
        output_len = {"kind": "uniform", "low": 32, "high": int(rng.integers(80, 161))}
        mean_out = (32 + output_len["high"]) / 2
    mean_prompt = (sum(c["fraction"] * _mean_lognormal(c["prompt_len"]) for c in classes) if classes
                   else _mean_lognormal(prompt_len))
    # a request's share of the engine: its prompt's tokens plus its share of the decode steps
    service_s = mean_prompt * costs.token_s + mean_out * costs.output_s
    load = float(rng.uniform(0.35, 0.8))
    rate = round(load / service_s, 2)
    workload: dict = {"num_requests": num_requests, "output_len": output_len, "seed": int(rng.integers(0, 2**31 - 1)),
                      "too_long": "clip"}
    if classes:
        workload["classes"] = classes
    else:
        workload["prompt_len"] = prompt_len
    if arrival == "poisson":
        workload.update(kind="poisson", rate=rate)
    elif arrival == "gamma":
        workload.update(kind="gamma", rate=rate, cv=round(float(rng.uniform(2.0, 4.0)), 2))
    else:
        # on/off: 3-5 busy stretches at 1.5-3x the rate, each followed by a quiet one 1-3x as long at
        # a tenth of the rate (one more cycle than needed, so the requests end within the stages)
        hi, lo = round(rate * float(rng.uniform(1.5, 3.0)), 2), round(rate * 0.1, 2)
        cycles = int(rng.integers(3, 6))
        on = num_requests / (cycles * hi)
        off = on * float(rng.uniform(1.0, 3.0))
        cycles += 1
        workload.update(kind="staged", stages=[[r, round(d, 2)] for _ in range(cycles) for r, d in ((hi, on), (lo, off))])
    sched: dict = {"max_num_seqs": int(rng.choice([16, 32])), "max_model_len": max_len}
    if policy == "continuous":
        sched.update(policy="continuous", max_num_batched_tokens=max(1024, max_len))
    else:
        budget = int(rng.integers(24, 97)) if policy == "chunked-small" else int(rng.choice([384, 512, 768, 1024]))
        sched.update(policy="chunked", max_num_batched_tokens=budget)
    hardware: dict = {"latency": "profiled", "num_gpu_blocks": num_blocks}
    if memory == "swap":
        sched["preemption"] = "swap"
        hardware["swap_space_gb"] = 0.05  # >= 390 CPU blocks (1,600 of the tiny model): never the limit
    else:
        sched["preemption"] = "recompute"
    name = f"random-{seed}-{index:02d}-{policy}-{arrival}-{memory}"
    return {"name": name, "offered_load": round(load, 3), "model": {"name": costs.config, "dtype": "float32"}, "hardware": hardware,
            "scheduler": sched, "cache": {"block_size": BLOCK_SIZE}, "workload": workload}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def to_toml(workload: dict, model_path: str | Path, profile_path: str | Path | None) -> str:
    """The TOML text of `workload` (a `draw` result), its model at `model_path`; `profile_path` is the
    profile `servesim simulate` uses (validate measures its own; None: the roofline)."""
    lines = [f"# servesim validate {workload['name']}.toml --device cpu",
             "# A random validation workload (calibrate.random_workloads.draw): nothing was tuned on it.",
             f"# offered load {workload['offered_load']} of the rough service rate it was drawn against (its "
             "model's costs in VALIDATION_MODELS); validate's predicted_utilization gives it against the "
             "calibrated profile", ""]
    for section in ("model", "hardware", "scheduler", "cache", "workload"):
        body = dict(workload[section])
        if section == "model":
            body["name"] = str(model_path)
        if section == "hardware" and profile_path is not None:
            body["profile"] = str(profile_path)
        elif section == "hardware":
            body["latency"] = "roofline"
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in body.items()]
        lines.append("")
    return "\n".join(lines)


def write(seed: int, count: int, folder: str | Path, model_path: str | Path | None = None,
          model: str = "tiny-llama") -> list[Path]:
    """Write random workloads 0 .. count-1 of `seed` for validation model `model` as TOML files
    under `folder` (`model_path`: its config.json elsewhere); their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chosen = validation_model(model)
    config = Path(model_path) if model_path else REPO / chosen.config
    profile = (REPO / chosen.profile).resolve() if chosen.profile else None
    out = []
    for i in range(count):
        w = draw(seed, i, model)
        path = folder / f"{w['name']}.toml"
        path.write_text(to_toml(w, config.resolve(), profile))
        out.append(path)
    return out

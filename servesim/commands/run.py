"""`servesim run CONFIG.toml --device cpu|cuda [--set section.key=value ...] [--out DIR]`.

The same config and outputs as `servesim simulate`, served for real: the model section names a HF
config.json (e.g. examples/tiny-llama/config.json; safetensors beside it are loaded, else seeded
random weights), the workload is replayed in real time against the torch `Engine`, and the summary
table is printed; `--out DIR` writes summary.json, requests.csv, steps.csv and config.toml there.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a TOML config whose model is a HF config.json (see examples/engine.toml)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the engine runs")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (repeatable), e.g. --set scheduler.policy=continuous")
    parser.add_argument("--out", metavar="DIR", help="write summary.json, requests.csv, steps.csv, config.toml here")
    parser.add_argument("--attention-backend", choices=("auto", "torch", "flash"), default="auto",
                        help="paged attention kernel (auto: flash-attn on CUDA when installed, else torch)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="torch CPU threads (default 1: a tiny model gains nothing from more, and on a "
                             "busy machine spinning OpenMP threads slow every step)")
    parser.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")


def run(args: argparse.Namespace) -> int:
    from calibrate.engine_config import engine_config_from_sim
    from gpu_backend.engine import Engine
    from sim.config import load_config
    from records.metrics import format_summary
    from records.results import json_safe
    from sim.workload import build_workload

    import torch

    if args.threads < 1:
        raise ValueError(f"--threads: must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    config = load_config(args.config, args.overrides)
    engine_config, config_toml = engine_config_from_sim(config, args.device)
    engine_config = dataclasses.replace(engine_config, attention_backend=args.attention_backend)
    engine = Engine(engine_config, args.device)
    engine.config_toml = config_toml
    engine.warm_up()
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    result = engine.run_workload(workload, progress=not args.quiet)
    out = result.save(args.out) if args.out else None
    try:
        if args.json:
            print(json.dumps(json_safe(result.summary), indent=2))
        elif not args.quiet:
            print(format_summary(result.summary))
            print(f"engine: {args.device}, attention backend {engine.backend.name}, {engine.num_steps} steps")
            if out is not None:
                print(f"\nwrote {out}/: summary.json, requests.csv, steps.csv, config.toml")
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (keeps the interpreter's final flush quiet)
    return 0

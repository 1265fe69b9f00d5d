"""`servesim run CONFIG.toml --device cpu|cuda [--set section.key=value ...] [--out DIR]`.

The same config and outputs as `servesim simulate`, served for real: the model section names a HF
config.json (e.g. examples/tiny-llama/config.json; safetensors beside it are loaded, else seeded
random weights), the workload is replayed in real time against the torch `Engine`, and the summary
table is printed; `--out DIR` writes summary.json, requests.csv, steps.csv and config.toml there.
The notes of `sim.notes` print and are kept as in `simulate`; a `[frontend]` section (an HTTP front
end's modelled delays) is not used: the engine has none.
"""
from __future__ import annotations

import argparse
import dataclasses

from records.metrics import format_summary
from servesim.commands import options
from sim.config import config_to_toml
from sim.notes import outcome_notes, setting_notes, with_notes
from sim.workload import build_workload


def configure(parser: argparse.ArgumentParser) -> None:
    options.add_config(parser, help="a TOML config whose model is a HF config.json (see examples/engine.toml)")
    options.add_device(parser)
    options.add_set(parser)
    options.add_out(parser, "summary.json, requests.csv, steps.csv, config.toml")
    parser.add_argument("--attention-backend", choices=("auto", "torch", "flash"), default="auto",
                        help="paged attention kernel (auto: flash-attn on CUDA when installed, else torch)")
    options.add_threads(parser)
    options.add_json(parser)
    options.add_quiet(parser)


def run(args: argparse.Namespace) -> int:
    import torch  # the engine extra: loaded by this command only (`servesim run --help` stays light)

    from calibrate.engine_config import engine_config_from_sim
    from gpu_backend.engine import Engine

    torch.set_num_threads(options.check_threads(args))
    config = options.load_config_args(args)
    workload = build_workload(config.workload, config.scheduler.max_model_len)
    notes = setting_notes(config, workload)
    if config.frontend.enabled:
        notes.append("[frontend] is not used by `servesim run`: the engine has no HTTP front end "
                     "(`servesim simulate` models one with it)")
    config = with_notes(config, notes)
    options.note(args, *config.notes)
    engine_config, config_toml = engine_config_from_sim(config, args.device)
    engine_config = dataclasses.replace(engine_config, attention_backend=args.attention_backend)
    engine = Engine(engine_config, args.device)
    engine.config_toml = config_toml
    engine.warm_up()
    result = engine.run_workload(workload, progress=options.progress(args))
    after = outcome_notes(workload)
    options.note(args, *after)
    if after:
        result.config_toml = config_to_toml(with_notes(config, after))
    out = result.save(args.out) if args.out else None
    try:
        if args.json:
            options.print_json(result.summary)
        else:
            options.say(args, format_summary(result.summary, clock="measured"),
                        f"engine: {args.device}, attention backend {engine.backend.name}, {engine.num_steps} steps")
            if out is not None:
                options.say(args, f"\nwrote {out}/: {options.written(out)}")
    except BrokenPipeError:  # `| head`: the reader left; not an error
        pass
    options.flush_stdout()
    return 0

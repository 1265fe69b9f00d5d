"""`servesim SUBCOMMAND ...`: dispatches to the module that owns each subcommand.

Modules are imported lazily, so `servesim simulate` never imports torch. Each owning module
exposes `configure(parser: argparse.ArgumentParser) -> None` and `run(args) -> int`.
Configuration errors (`ValueError`, including `policies.ConfigError`) and unreadable or unwritable
paths (`OSError`) print one line and exit 2; an `--out` is checked before the command starts
(`options.check_out`).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from servesim.commands import options

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("servesim.commands.simulate", "simulate a serving configuration (TOML) and print its summary"),
    "run": ("servesim.commands.run", "run a configuration on the real torch engine (cpu or cuda)"),
    "calibrate": ("servesim.commands.calibrate", "profile the engine's ops on a device, or import/fit profiles"),
    "validate": ("servesim.commands.validate", "predict with the simulator, measure on the engine, compare"),
    "sweep": ("servesim.commands.sweep", "simulate a grid of configurations"),
    "capacity": ("servesim.commands.capacity", "find the highest rate a configuration sustains within an SLO"),
    "plan": ("servesim.commands.plan", "find the cheapest layout for a target rate and SLO"),
    "reproduce": ("servesim.commands.reproduce", "simulate real runs from their configuration and score the predictions"),
    "serve": ("servesim.commands.serve", "serve the engine behind an OpenAI-compatible HTTP endpoint"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="servesim", description="LLM serving simulator and engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name = argv[0]
    if name not in SUBCOMMANDS:
        print(f"servesim: unknown command {name!r}; choose one of {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    module_name, help_text = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(f"servesim {name}: not available ({exc}); install the extra it needs, e.g. pip install 'servesim[all]'",
              file=sys.stderr)
        return 2
    cmd_parser = argparse.ArgumentParser(prog=f"servesim {name}", description=help_text)
    module.configure(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    try:
        options.check_out(args)
        return int(module.run(args) or 0)
    except (ValueError, OSError) as exc:  # config and input errors, unreadable or unwritable paths: one line, exit 2
        print(f"servesim {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"servesim {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

"""One module per `servesim` subcommand, each exposing `configure(parser)` and `run(args) -> int`.

Every command reads configs, which may name the workload kinds and trace formats that `fidelity`
registers with `sim.workload`: importing any command registers them first.
"""
import fidelity.workloads  # noqa: F401  (registers the sources' workload kinds and trace formats)

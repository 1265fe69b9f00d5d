"""One module per `servesim` subcommand, each exposing `configure(parser)` and `run(args) -> int`."""

"""The `servesim` command: one dispatcher over the subcommands each package provides."""

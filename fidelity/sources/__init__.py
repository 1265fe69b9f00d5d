"""One module per source of real measurements: its readers, its constants and its latency model.

A source is one campaign (an engine release, a benchmark client, a hardware); nothing outside
`fidelity/` and `calibrate/importers/` knows a source by name.
"""

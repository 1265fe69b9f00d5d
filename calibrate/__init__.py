"""Per-op latency profiling of the real executor, curve fits, profile importers and `servesim validate`.

Profiles are files (see `sim.latency.profiled` for the format) that `sim` loads without torch.
Submodules that need torch (`calibrate.bench`, `calibrate.validate`) import it themselves; this
package's root imports nothing heavy.
"""

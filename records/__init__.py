"""What a run leaves behind, the same for the simulator and the engine: the per-request and per-step
records, their tables, the summary metrics (vLLM bench-serve definitions) and the result files."""

"""Fidelity: replay real serving runs, rebuild their configs, simulate them and score the predictions.

- `runs`: real runs (vLLM 0.11 server spans, LLMServingSim's vLLM 0.19 replays, DistServe's vLLM runs)
  in one common form (`RealRun`: server arguments, requests, measured TTFT/TPOT/E2E).
- `inference_perf`: inference-perf's `shared_prefix` profile as a Workload.
- `replay`: a run's recorded requests as a Workload.
- `host_overhead`: the engine's per-step host work as named terms around a GPU step-time model.
- `from_run`: `config_from_run(run_dir, overrides) -> Config` (`servesim simulate --from-run`).
- `cli_reproduce`: `servesim reproduce GROUNDTRUTH_DIR --out REPORT`.
"""

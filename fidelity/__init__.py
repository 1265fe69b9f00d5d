"""Fidelity: replay real serving runs, rebuild their configs, simulate them and score the predictions.

The only layer that knows a dataset by name.
- `runs`: real runs in one common form (`RealRun`: server arguments, requests, measured TTFT/TPOT/E2E);
  `run_folders.find_runs` reads every run of a folder with its source's loader.
- `sources/<source>`: one module per source of measurements (`vllm_server`, `llmservingsim`, `distserve`,
  `inference_perf`, `guidellm`, `guidellm_results`, `guidellm_client`, `vllm_bench`, `splitwise`, `vidur`):
  readers, constants, models; `client_report` knows a client's result JSON by its content.
- `run_config`, `replay`, `client_workload`: a run's simulator config, requests and client workload.
- `host_overhead`: the engine's per-step host work as named terms around a GPU step-time model;
  `idle_host` measures it on requests alone in real engines, `overhead_fit` fits it, and `predict`
  picks each run's GPU model and host prior.
- `reproduce`: leave-one-run-out or source-out scores (`servesim reproduce`); `ttft_parts`,
  `engine_settings` and `metric_definitions` explain them; `from_run`: `servesim simulate --from-run`.
"""

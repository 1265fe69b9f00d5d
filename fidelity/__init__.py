"""Fidelity: replay real serving runs, rebuild their configs, simulate them and score the predictions.

- `runs`: real runs in one common form (`RealRun`: server arguments, requests, measured TTFT/TPOT/E2E);
  `run_folders.find_runs` reads every run of a folder with its source's loader.
- `sources/<source>`: one module per source of measurements, its readers, constants and models
  (`vllm_server` vLLM 0.11 server runs, `llmservingsim` vLLM 0.19 replays and per-layer profiles,
  `distserve` DistServe's vLLM runs and A100 coefficients, `inference_perf`'s `shared_prefix` profile
  and `guidellm`'s sweep as Workloads with their request readers, `splitwise`, `guidellm_client`).
- `replay`: a run's recorded requests as a Workload.
- `host_overhead`: the engine's per-step host work as named terms around a GPU step-time model;
  `layer_profile` (LLMServingSim per-layer vLLM profiles) and `distserve_model` (DistServe's A100
  coefficients) are GPU step-time models from measured data; `predict` picks one per run.
- `overhead_fit`: the terms fitted to measured per-request timings; `reproduce`: leave-one-run-out,
  or source-out (`--fit source`: nothing from a run's own campaign, `predict.source_out_prior`).
- `engine_settings`: every engine setting a run records, modelled or listed as not modelled;
  `metric_definitions`: each client's TTFT/TPOT/E2E and the per-token TPOT that is scored.
- `idle_host`: the engine's host time per step and the API process's share of TTFT, measured on
  requests alone in real engines (`host/*.json`); `predict.host_prior` uses them leave-one-run-out.
- `from_run`: `config_from_run(run_dir, overrides) -> Config` (`servesim simulate --from-run`).
- `cli_reproduce`: `servesim reproduce GROUNDTRUTH_DIR --out REPORT`.
"""

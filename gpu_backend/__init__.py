"""The real torch engine, driven by the same policy objects as the simulator.

`model` (Llama-family decoder, HF weights), `kv_cache` (paged K/V indexed by the BlockManager's
block ids), `input_batch` (ragged batch from a BatchPlan), `attention` (flash-attn or pure-torch
paged attention), `sampler`, `model_runner` (the executor: plan -> StepResult with measured time),
`engine` (the one loop in wall-clock time; see its docstring for the public API), `cli`
(`servesim run`), and `serve` (the OpenAI-compatible HTTP server). Needs torch (servesim[engine]).
"""

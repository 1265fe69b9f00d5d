"""`servesim serve`: the engine behind an OpenAI-compatible streaming HTTP endpoint.

`tokenizer` (local HF tokenizer.json + chat template), `protocol` (request validation),
`detokenizer` (incremental text with stop strings), `metrics` (Prometheus text), `server` (FastAPI
routes over a running Engine), `background` (uvicorn on a thread), `cli` (`servesim serve`).
"""

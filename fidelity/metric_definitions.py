"""What each measurement file's TTFT, TPOT and E2E mean, and how servesim scores them like with like.

servesim predicts vLLM `bench serve`'s definitions (docs/metrics.md): TTFT = first token - arrival,
E2E = last token - arrival, TPOT = (E2E - TTFT) / (output tokens - 1), per token. Clients differ:
inference-perf's TPOT and ITL are per streamed chunk (a stream may carry several chunks per token,
or several tokens per chunk), guidellm's ITL is vLLM's TPOT (its TPOT is E2E / output tokens), and
vLLM's own spans are per token. So the scored TPOT is always the per-token one, derived from the
run's E2E, TTFT and output-token count wherever the client's figure is per chunk; a run measured
only in summary scores (mean E2E - mean TTFT) / (mean output tokens - 1), and its prediction is
scored the same way (`RealRun.tpot_of_means`). `DEFINITIONS[run.measured_by]` says which applies;
`reproduce` writes it beside each row (`definition`).
"""
from __future__ import annotations

PER_TOKEN = "per token: (E2E - TTFT) / (output tokens - 1)"

# measurement kind (`RealRun.measured_by`) -> {metric: definition of the run's value}
DEFINITIONS: dict[str, dict[str, str]] = {
    "vllm-spans": {
        "ttft_s": "server: first token - the request's arrival at the engine (vLLM's OTLP span)",
        "tpot_s": PER_TOKEN + " of the span", "e2e_s": "server: last token - arrival (span)"},
    "inference-perf": {
        "ttft_s": "client: first streamed chunk - request sent",
        "tpot_s": "per token: (last - first token stamp) / (output tokens - 1); with computed_metrics, whose TPOT "
                  "and ITL are per streamed chunk (not used), " + PER_TOKEN,
        "e2e_s": "client: response end - request sent"},
    "inference-perf-summary": {
        "ttft_s": "client: mean of first streamed chunk - request sent",
        "tpot_s": "per token of the means: (mean E2E - mean TTFT) / (n - 1), n the mean max_tokens under "
                  "ignore_eos (the server's count), else the mean output_len (the client's); without either not "
                  "scored (the summary's TPOT is per streamed chunk)",
        "e2e_s": "client: mean of response end - request sent"},
    "guidellm": {
        "ttft_s": "client: first streamed token - request start",
        "tpot_s": "guidellm's ITL = " + PER_TOKEN + " (its TPOT is E2E / output tokens: not used)",
        "e2e_s": "client: request end - request start"},
    "vllm-bench": {
        "ttft_s": "client: first streamed token - request sent (vllm bench serve)",
        "tpot_s": PER_TOKEN + " (vllm bench serve's own TPOT)",
        "e2e_s": "client: last token - request sent (its latencies, else TTFT + the request's ITLs)"},
    "servesim": {"ttft_s": "servesim's requests table", "tpot_s": PER_TOKEN, "e2e_s": "servesim's requests table"},
    "llmservingsim": {
        "ttft_s": "engine: first_token_ts - queued_ts", "tpot_s": PER_TOKEN + " (last - first token)",
        "e2e_s": "engine: last_token_ts - queued_ts"},
    "distserve": {
        "ttft_s": "client: first token - issue time (ms in the file)",
        "tpot_s": PER_TOKEN + " of the client's latency", "e2e_s": "client: complete - issue time"},
}


def definition(measured_by: str, metric: str) -> str:
    """The definition of `metric` for a run measured by `measured_by` ('' when unknown)."""
    return DEFINITIONS.get(measured_by, {}).get(metric, "")

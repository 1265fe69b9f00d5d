"""Factories for the fidelity tests: tiny hand-made run folders whose "measurements" are known."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

MODEL = "meta-llama/Llama-2-7b-hf"


def make_requests(n: int = 24, rate: float = 4.0, seed: int = 0, prompt=(200, 900), output=(20, 80)) -> pd.DataFrame:
    """Poisson arrivals with uniform prompt and output lengths (columns of RealRun.requests, no timings)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "req_id": [f"r{seed}-{i}" for i in range(n)],
        "arrival_time": np.cumsum(rng.exponential(1.0 / rate, n)),
        "num_prompt_tokens": rng.integers(prompt[0], prompt[1], n),
        "num_output_tokens": rng.integers(output[0], output[1], n),
    })


def write_exp_config(folder: Path, model: str = MODEL, **server) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exp = {"model": model, "tensor_parallelism": 1, "max_model_len": 4096, "max_num_batched_tokens": 2048,
           "max_num_seqs": 64, **server}
    (folder / "exp-config.yaml").write_text(yaml.safe_dump(exp))
    return folder


def write_spans(folder: Path, requests: pd.DataFrame, ttft: np.ndarray, e2e: np.ndarray) -> Path:
    """vLLM OTLP spans CSV (the vLLM 0.11 runs' format) for the given requests and latencies."""
    start_ns = (1.7e18 + requests["arrival_time"].to_numpy() * 1e9).astype("int64")
    df = pd.DataFrame({
        "service": "vllm", "scope": "vllm.llm_engine", "start_unix_ns": start_ns,
        "end_unix_ns": (start_ns + np.asarray(e2e) * 1e9).astype("int64"), "request_id": requests["req_id"],
        "prompt_tokens": requests["num_prompt_tokens"], "completion_tokens": requests["num_output_tokens"],
        "max_tokens": requests["num_output_tokens"], "ttft_s": ttft, "e2e_s": e2e,
        "time_in_queue_s": 0.0, "time_in_prefill_s": 0.0, "time_in_decode_s": 0.0, "time_in_inference_s": 0.0,
    })
    path = folder / "per_request_server_spans.csv"
    df.to_csv(path, index=False)
    return path


def roofline_truth(folder: Path, requests: pd.DataFrame, overhead=None, gpu: str = "H100",
                   async_scheduling: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, E2E) of each of `requests`, in their order: what servesim predicts for them with the
    roofline and `overhead` on the server `write_exp_config` records (a known truth to measure)."""
    from fidelity.host_overhead import HostOverhead
    from fidelity.predict import predict_run
    from fidelity.runs import RealRun, ServerArgs

    server = ServerArgs(model=MODEL, gpu=gpu, max_model_len=4096, max_num_batched_tokens=2048, max_num_seqs=64,
                        async_scheduling=async_scheduling)
    run = RealRun(name=folder.name, source="hand-made", path=folder, server=server,
                  requests=requests.assign(prefix_group=-1, num_prefix_tokens=0))
    pred = predict_run(run, overhead or HostOverhead(), gpu_model="roofline")
    p = pred.requests.set_index(pred.requests["req_id"].astype(str)).loc[requests["req_id"]]
    return p["ttft_s"].to_numpy(), p["e2e_s"].to_numpy()


def make_measured_run(folder: Path, overhead=None, n: int = 24, rate: float = 4.0, seed: int = 0,
                      gpu: str = "H100", async_scheduling: bool = False) -> Path:
    """A run folder whose measurements are what servesim predicts with `overhead` (a known truth).

    Async scheduling is recorded off by default: its host terms then add to every step, which is
    what lets a fit see them (with it on they hide behind the GPU where it is the longer part)."""
    requests = make_requests(n, rate, seed)
    write_exp_config(folder, gpu=gpu, async_scheduling=async_scheduling)
    write_spans(folder, requests, *roofline_truth(folder, requests, overhead, gpu, async_scheduling))
    return folder


ISSUE_PROFILE = {
    "data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 8, "num_users_per_system_prompt": 3, "system_prompt_len": 120,
        "question_len": 500, "output_len": 200, "enable_multi_turn_chat": True}},
    "load": {"type": "constant", "stages": [{"rate": 4, "duration": 300}, {"rate": 9, "duration": 300}]},
    "server": {"ignore_eos": True},
}

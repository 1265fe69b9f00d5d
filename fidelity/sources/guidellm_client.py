"""Drive the server with a real benchmark client (guidellm, from PyPI) and set its figures beside the
server's own records.

`run_guidellm` runs `guidellm run` at a constant rate against a URL, counting tokens with the local
tokenizer directory (offline); `client_requests` reads its JSON report into one row per request
(`req_id` is the server's response id, so rows join the engine's `requests` table); `compare` joins
the two and gives, per request, the client's TTFT and inter-token latency next to the server's.

Definitions: client TTFT = first streamed token chunk - request sent; client ITL = (last token chunk
- first token chunk) / (output tokens - 1), guidellm's per-request figure, which is the server's
TPOT (DESIGN.md). The client's TTFT exceeds the server's by the network overhead: HTTP parsing,
tokenization before the arrival stamp, and SSE delivery of the first chunk.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd


class ServeProcess:
    """`servesim serve CONFIG --port 0 --out DIR` as a child process on 127.0.0.1; `url` once it is up.

    Start-up is waited for at most `startup_timeout_s`; `stop()` sends SIGTERM (the server writes its
    records) and kills it if it has not exited in time. Use it as a context manager. A thread reads
    the child's output all along (kept in `lines`), so a chatty server never blocks on a full pipe.
    """

    def __init__(self, config: str | Path, out_dir: str | Path, *extra: str, device: str = "cpu",
                 startup_timeout_s: float = 120, cwd: str | Path | None = None) -> None:
        self.out_dir = Path(out_dir)
        cmd = self.command(config, device, extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
        self.url = None
        self.lines: list[str] = []
        up = threading.Event()  # set when the URL is printed, or the output ends (the child exited)

        def drain() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = None if self.url else re.search(r"on (http://127\.0\.0\.1:\d+)", line)
                if m:
                    self.url = m.group(1)
                    up.set()
            up.set()

        self._reader = threading.Thread(target=drain, name="serve-output", daemon=True)
        self._reader.start()
        up.wait(startup_timeout_s)
        if self.url is None:
            self.stop()
            raise RuntimeError("servesim serve did not start:\n" + "".join(self.lines))

    def command(self, config: str | Path, device: str, extra: tuple[str, ...]) -> list[str]:
        """The child's command line."""
        return [sys.executable, "-m", "servesim.cli", "serve", str(config), "--device", device, "--host", "127.0.0.1",
                "--port", "0", "--out", str(self.out_dir), *extra]

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)  # the output ends with the process
        return self.proc.returncode

    def __enter__(self) -> "ServeProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def guidellm_command(url: str, tokenizer_dir: str | Path, out_json: str | Path, rate: float, num_requests: int,
                     prompt_tokens: int, output_tokens: int, model: str = "tiny-llama",
                     request_format: str = "/v1/completions") -> list[str]:
    """The `guidellm run` command line: constant rate, synthetic prompts of fixed token counts."""
    return [
        sys.executable, "-m", "guidellm", "run",
        "--backend", f"kind=openai_http,target={url},model={model},request_format={request_format}",
        "--profile", f"kind=constant,rate={rate}",
        "--constraint", f"kind=max_requests,count={num_requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
        "--tokenizer", f"kind=hf_auto,model={Path(tokenizer_dir).resolve()}",
        "--output", f"kind=json,path={Path(out_json).resolve()}",
        "--disable-console-interactive",
    ]


def run_guidellm(url: str, tokenizer_dir: str | Path, out_json: str | Path, rate: float, num_requests: int,
                 prompt_tokens: int = 64, output_tokens: int = 32, timeout_s: float = 600, **kw) -> Path:
    """Run guidellm (offline: no hub access) and return its JSON report; raises with its log on failure."""
    out_json = Path(out_json)
    cmd = guidellm_command(url, tokenizer_dir, out_json, rate, num_requests, prompt_tokens, output_tokens, **kw)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # one worker process is plenty for a few requests per second, and spawning ten (its default)
    # re-imports torch in each: half a minute on a small machine
    env.setdefault("GUIDELLM__MAX_WORKER_PROCESSES", "1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=out_json.parent)
    if proc.returncode != 0 or not out_json.is_file():
        raise RuntimeError(f"guidellm failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return out_json


def client_requests(report: str | Path) -> pd.DataFrame:
    """One row per request guidellm sent: status, req_id, token counts, and its timings (seconds)."""
    data = json.loads(Path(report).read_text())
    rows = []
    for bench in data["benchmarks"]:
        for status in ("successful", "errored", "incomplete"):
            for r in bench["requests"][status]:
                t = r["info"]["timings"]
                n = r.get("output_tokens")
                first, last, start = t.get("first_token_iteration"), t.get("last_token_iteration"), t.get("request_start")
                rows.append({
                    "req_id": r.get("response_id"), "status": status, "error": r["info"].get("error"),
                    "num_prompt_tokens": r.get("prompt_tokens"), "num_output_tokens": n,
                    "request_start": start, "first_token": first, "last_token": last,
                    "client_ttft_s": first - start if first is not None and start is not None else np.nan,
                    "client_itl_s": (last - first) / (n - 1) if first is not None and last is not None and n and n > 1
                    else np.nan,
                    "num_chunks": t.get("token_iterations"),
                })
    return pd.DataFrame(rows)


def compare(client: pd.DataFrame, server: pd.DataFrame) -> pd.DataFrame:
    """Successful client requests joined with the server's `requests` rows on req_id."""
    ok = client[client["status"] == "successful"]
    joined = ok.merge(server, on="req_id", how="left", suffixes=("_client", ""), validate="one_to_one")
    joined["server_ttft_s"] = joined["ttft_s"]
    joined["server_tpot_s"] = joined["tpot_s"]
    joined["ttft_overhead_s"] = joined["client_ttft_s"] - joined["server_ttft_s"]
    joined["itl_diff_s"] = joined["client_itl_s"] - joined["server_tpot_s"]
    return joined


def agreement(joined: pd.DataFrame) -> dict:
    """Means and medians of the client and server figures, and of their differences (seconds)."""
    out = {"num_requests": int(len(joined))}
    for col in ("client_ttft_s", "server_ttft_s", "ttft_overhead_s", "client_itl_s", "server_tpot_s", "itl_diff_s"):
        values = joined[col].dropna()
        out[col] = {"mean": float(values.mean()), "p50": float(values.median()), "p90": float(values.quantile(0.9)),
                    "max": float(values.max())}
    return out

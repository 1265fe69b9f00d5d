"""A minimal streaming client that stamps each SSE chunk as it arrives (for front-end calibration).

    python -m gpu_backend.serve.stream_client URL     # one JSON body per stdin line -> one result line

posts each body as it comes (one request at a time, one kept-alive connection, httpx streaming as
guidellm reads) and answers each with a JSON line `[send time, response id, [chunk receive times]]`,
times from `time.perf_counter` (CLOCK_MONOTONIC on Linux: the same clock in every process, so a
server's stamps compare). Run in its own process (`StreamClient`), its work does not compete with
the server's threads for one interpreter lock, as a real client's does not.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path


def stream_completion(client, url: str, body: dict) -> tuple[float, str | None, list[float]]:
    """POST a streaming completion; (send time, response id, receive time of each chunk with text)."""
    chunks, req_id = [], None
    sent = time.perf_counter()
    with client.stream("POST", url, json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            now = time.perf_counter()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            req_id = data.get("id", req_id)
            if data.get("choices") and data["choices"][0].get("text"):
                chunks.append(now)
    return sent, req_id, chunks


def shares_clock() -> bool:
    """True when `time.perf_counter` is the system-wide monotonic clock (stamps compare across processes)."""
    return "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation


class StreamClient:
    """`send(body) -> (send time, response id, chunk times)`, from a child process (or, with
    `in_process` or a per-process clock, a thread of this one); `submit` + `receive` are its two
    halves, so that several clients stream at once. Use it as a context manager."""

    def __init__(self, url: str, in_process: bool = False) -> None:
        import httpx

        self.url = url
        self.in_process = in_process or not shares_clock()
        self._client = httpx.Client(timeout=120) if self.in_process else None
        self._proc = None if self.in_process else subprocess.Popen(
            [sys.executable, "-m", "gpu_backend.serve.stream_client", url], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).resolve().parents[2]))

    def send(self, body: dict) -> tuple[float, str | None, list[float]]:
        self.submit(body)
        return self.receive()

    def submit(self, body: dict) -> None:
        """Start sending `body` without waiting for its answer (`receive` waits): several clients can
        then stream at once. One request in flight per client."""
        if self._client is not None:  # in this process: a thread does the request
            self._pending = {}

            def go(pending=self._pending):
                try:
                    pending["result"] = stream_completion(self._client, self.url, body)
                except BaseException as exc:  # re-raised by receive()
                    pending["error"] = exc
            self._thread = threading.Thread(target=go, name="stream-client", daemon=True)
            self._thread.start()
            return
        self._proc.stdin.write(json.dumps(body) + "\n")
        self._proc.stdin.flush()

    def receive(self) -> tuple[float, str | None, list[float]]:
        """The answer to the last `submit`: (send time, response id, chunk times)."""
        if self._client is not None:
            self._thread.join()
            if "error" in self._pending:
                raise self._pending["error"]
            return self._pending["result"]
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"stream client exited (code {self._proc.wait()})")
        sent, req_id, chunks = json.loads(line)
        return sent, req_id, chunks

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait(30)

    def __enter__(self) -> "StreamClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    import httpx

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m gpu_backend.serve.stream_client URL  (JSON bodies on stdin, one a line)",
              file=sys.stderr)
        return 2
    with httpx.Client(timeout=120) as client:
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(stream_completion(client, argv[0], json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

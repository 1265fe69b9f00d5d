"""Run the app under uvicorn on a background thread: for tests, notebooks and benchmarks.

    with BackgroundServer(app) as srv:      # binds 127.0.0.1 on a free port
        httpx.get(f"{srv.url}/health")

Startup and shutdown waits are bounded; leaving the block always stops the server as a signal
stops `servesim serve` (`drain_on_shutdown`: the requests in flight end, aborted once the config's
shutdown_timeout_s has passed) and so, through the app's lifespan, the engine.
"""
from __future__ import annotations

import threading
import time


class BackgroundServer:
    """A uvicorn server on a daemon thread; `url` once started."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 60.0) -> None:
        import uvicorn

        self.config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                                     timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(self.config)
        server = getattr(getattr(app, "state", None), "server", None)
        if server is not None:  # an app of build_app: stopping it drains as `servesim serve` does
            from gpu_backend.serve.server import drain_on_shutdown

            drain_on_shutdown(self.server, server, app.state.start_engine)
        self.startup_timeout_s = startup_timeout_s
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.url = ""

    def __enter__(self) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)

    def __exit__(self, *exc) -> None:
        self.stop()

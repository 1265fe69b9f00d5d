"""`servesim serve CONFIG.toml --device cpu|cuda --host 127.0.0.1 --port N [--out DIR]`.

Builds the real `Engine` from the config (its `model.name` a HF config.json, relative to the config
file), loads the tokenizer from `[serve] tokenizer` (default: the model's folder), and serves the
OpenAI-compatible API with uvicorn until Ctrl-C / SIGTERM. On shutdown (or POST /admin/dump) the
engine's requests/steps tables go to `--out` (or `[serve] out_dir`).

`servesim serve CONFIG.toml --calibrate-frontend OUT.json` serves nothing: it times this config's
front end (HTTP, tokenizer, SSE streaming beside the real engine's steps; see
`calibrate.frontend`), writes the terms as a front-end profile and prints the
`[frontend]` section that makes `servesim simulate` charge them.
"""
from __future__ import annotations

import argparse
import dataclasses
import errno
import socket
import sys
import tomllib
from pathlib import Path
from typing import Mapping

from calibrate.frontend import calibrate_frontend
from calibrate.frontend_profile import write_profile
from calibrate.probe_engine import probe_server
from gpu_backend.serve.config import ServeConfig, build_serve_config
from gpu_backend.serve.tokenizer import Tokenizer
from policies import ConfigError
from servesim.commands import options, small
from sim.config import PATH_KEYS, apply_override, load_config
from sim.frontend import FrontendConfig
from sim.notes import scheduler_notes, with_notes

# sections of the shared config file that serving does not read: requests come from HTTP clients,
# and the front end is the real one (section -> what reads it instead)
NOT_SERVED = {"workload": "`servesim simulate`, `run` and `validate`", "frontend": "`servesim simulate`"}
CALIBRATE_REPEATS = 25  # --calibrate-frontend's requests per prompt length
# flags that only --calibrate-frontend reads (given without it they would change nothing)
CALIBRATE_FLAGS = {"--calibrate-repeats": "calibrate_repeats", "--probe-engine": "probe_engine"}


def configure(parser: argparse.ArgumentParser) -> None:
    options.add_config(parser, help="a serving config (TOML): engine sections plus an optional [serve] table")
    options.add_device(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 = any free port; the URL is printed)")
    options.add_out(parser, "requests.csv, steps.csv, summary.json and config.toml "
                    "(on shutdown and on POST /admin/dump)")
    options.add_set(parser)
    options.add_threads(parser)
    options.add_quiet(parser, progress=False)
    parser.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument("--calibrate-frontend", metavar="OUT.json",
                        help="do not serve: time the HTTP front end (ingress, tokenizer, per-token streaming) on "
                             "this machine with this config's engine and tokenizer, write a front-end profile, exit")
    parser.add_argument("--calibrate-repeats", type=int, default=None, metavar="N",
                        help=f"--calibrate-frontend: requests per prompt length (default {CALIBRATE_REPEATS})")
    parser.add_argument("--probe-engine", action="store_true",
                        help="--calibrate-frontend: a stand-in engine whose steps sleep (the front end alone, no model)")


def load_serve_setup(config_path: str | Path, overrides: list[str] = (), out_dir: str | None = None):
    """(engine Config, ServeConfig, Tokenizer) of a serving config, without building the engine."""
    data, serve_config, base = split_serve_section(config_path)
    serve_values = dataclasses.asdict(serve_config)
    engine_overrides = []
    for override in overrides:
        if override.strip().startswith("serve."):
            apply_override({"serve": serve_values}, override)
        else:
            engine_overrides.append(override)
    if out_dir is not None:
        serve_values["out_dir"] = out_dir
    serve_config = build_serve_config(serve_values)
    config = load_config(data, engine_overrides)
    unused = [f"[{k}] is not used by `servesim serve` (requests come from HTTP clients); {NOT_SERVED[k]} read it"
              for k in NOT_SERVED if k in data]
    config = with_notes(config, [*unused, *scheduler_notes(config)])
    model_dir = Path(config.model.name)
    tokenizer = Tokenizer(serve_config.tokenizer or (model_dir if model_dir.is_dir() else model_dir.parent))
    return config, serve_config, tokenizer


def build_server(config_path: str | Path, device: str = "cpu", overrides: list[str] = (), out_dir: str | None = None):
    """The engine (not started), tokenizer and `OpenAIServer` a config describes."""
    return server_of(*load_serve_setup(config_path, overrides, out_dir), device)


def server_of(config, serve_config, tokenizer, device: str = "cpu"):
    """The `OpenAIServer` (engine not started) of a loaded serving setup; the tokenizer is checked
    against the model before the model's weights load (`check_vocab`)."""
    from calibrate.engine_config import engine_config_from_sim, engine_for
    from gpu_backend.serve.server import OpenAIServer, check_vocab

    engine_config, config_toml = engine_config_from_sim(config, device)
    check_vocab(tokenizer, engine_config.model.vocab_size, config.model.name,
                random_weights=engine_config.weights is None)
    engine = engine_for(engine_config, config_toml, device)
    return OpenAIServer(engine, tokenizer, serve_config, config.scheduler.max_model_len,
                        vocab_size=engine.model_config.vocab_size)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` for uvicorn to serve on. Bound before the model loads, so a
    port in use or an address not this machine's is refused at once, naming the flag (uvicorn would
    say it after the load, and exit 3), and nothing can take the port between the check and serving."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port in TIME_WAIT is free
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--host: cannot bind {host} ({exc.strerror}); give an address of this machine "
                              "(127.0.0.1: this machine only, 0.0.0.0: every interface)") from None
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port: {port} is already in use on {host}; choose another (0: any free port)") from None
        raise ConfigError(f"--port: cannot bind {host}:{port} ({exc.strerror})") from None
    return sock


def run(args: argparse.Namespace) -> int:
    """Check the flags (the address bound before any model loads), then serve, or time the front end."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port: must be in 0..65535, got {args.port}")
    options.check_threads(args)
    if not args.calibrate_frontend:
        for flag, dest in CALIBRATE_FLAGS.items():
            if getattr(args, dest) not in (None, False):
                raise ValueError(f"{flag}: only used with --calibrate-frontend OUT.json (which times the front "
                                 "end instead of serving)")
    if args.device == "cpu" and not args.probe_engine:  # the probe engine has no model
        import torch

        torch.set_num_threads(args.threads)
    if args.calibrate_frontend:
        return calibrate(args)
    sock = bind(args.host, args.port)
    try:
        return serve(args, sock)
    finally:
        sock.close()


def serve(args: argparse.Namespace, sock: socket.socket) -> int:
    """Build the engine and serve it on the bound socket `sock` until Ctrl-C / SIGTERM."""
    import uvicorn

    from gpu_backend.serve.server import build_app, drain_on_shutdown

    config, serve_config, tokenizer = load_serve_setup(args.config, args.overrides, args.out)
    options.note(args, *config.notes)
    server = server_of(config, serve_config, tokenizer, args.device)
    options.note(args, *server.notes)
    app = build_app(server)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on",
                            timeout_graceful_shutdown=10)
    srv = uvicorn.Server(config)

    # print the bound URL once uvicorn has started (port 0 picks a free one)
    original_startup = srv.startup

    async def startup(sockets=None):
        await original_startup(sockets)
        if srv.servers:
            host, port = srv.servers[0].sockets[0].getsockname()[:2]
            options.say(args, f"servesim serve: {server.config.model_name} on http://{host}:{port} "
                        f"(device {args.device}, max_model_len {server.max_model_len})")
            sys.stdout.flush()

    srv.startup = startup
    # SIGINT/SIGTERM: the requests in flight run on for [serve] shutdown_timeout_s, then are aborted (new
    # ones answer 503), and the records are written, also on a second Ctrl-C
    drain_on_shutdown(srv, server)
    srv.run(sockets=[sock])
    return 0


def calibrate(args: argparse.Namespace) -> int:
    """`--calibrate-frontend OUT.json`: time the front end, write the profile, print the [frontend] section."""
    if args.calibrate_repeats is None:
        args.calibrate_repeats = CALIBRATE_REPEATS
    if args.calibrate_repeats < 3:
        raise ValueError(f"--calibrate-repeats: must be >= 3, got {args.calibrate_repeats}")
    if small.enabled() and args.calibrate_repeats > 3:
        options.note(args, f"{small.ENV}=1: --calibrate-repeats 3 (was {args.calibrate_repeats})")
        args.calibrate_repeats = 3
    if args.probe_engine:
        _, serve_config, tokenizer = load_serve_setup(args.config, args.overrides)
        server = probe_server(tokenizer, model_name=serve_config.model_name)
    else:
        server = build_server(args.config, args.device, args.overrides)
    profile = calibrate_frontend(server, num_repeats=args.calibrate_repeats)
    path = write_profile(profile, args.calibrate_frontend)
    m, meta = profile["measurements"], profile["metadata"]
    options.say(args, f"front end of {args.config} ({m['engine']}), load average "
                f"{meta['load_average_before'][0]:.2f} -> {meta['load_average_after'][0]:.2f}")
    for n, t in zip(m["prompt_tokens"], m["ingress_s_median"]):
        options.say(args, f"  ingress, {n:5d} prompt tokens: {t * 1e3:7.3f} ms (median)")
    options.say(args, f"  tokenizer alone: {m['tokenizer_s_per_token'] * 1e6:.2f} us/token; first chunk egress "
                f"{m['egress_first_chunk_s_median'] * 1e3:.3f} ms, last {m['egress_last_chunk_s_median'] * 1e3:.3f} ms; "
                f"token interval streamed {m['token_interval_s_median_streamed'] * 1e3:.3f} ms, bare "
                f"{m['token_interval_s_median_bare'] * 1e3:.3f} ms (callback "
                f"{m['engine_callback_s_per_output'] * 1e6:.1f} us)")
    options.say(args, f"wrote {path}; to simulate with it:\n")
    options.say(args, FrontendConfig(**profile["frontend"]).to_toml().rstrip("\n"))
    return 0


def split_serve_section(path: str | Path) -> tuple[dict, ServeConfig, Path]:
    """Read a serve TOML: (the engine config as a dict with file paths made absolute, ServeConfig, folder)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config: file not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config: {path} is not valid TOML ({exc})") from None
    base = path.resolve().parent
    serve = build_serve_config(data.pop("serve", {}), base)
    # the engine reads model.name as a HF config.json path: make it relative to the file too
    for section, key in set(PATH_KEYS) | {("model", "name")}:
        value = data.get(section, {}).get(key) if isinstance(data.get(section), Mapping) else None
        if isinstance(value, str) and value and not Path(value).is_absolute() and (base / value).exists():
            data[section][key] = str(base / value)
    return data, serve, base

"""Benchmark `servesim serve` with a real client (guidellm) and check the server's own records.

    python benchmarks/serve_client.py --rate 4 --duration 60 --out runs/serve-client
    python benchmarks/serve_client.py ... --profile PROFILE.json     # + what `servesim simulate` predicts
    python benchmarks/serve_client.py ... --profile PROFILE.json --frontend FRONTEND.json   # + with the front end

Starts `servesim serve CONFIG --device cpu` (or uses --url), drives it with guidellm at a constant
rate (synthetic prompts of --prompt-tokens, --output-tokens each, counted with the local tokenizer),
joins the server's requests/steps tables per request with the client's report, and prints client vs
server TTFT and inter-token latency (their differences: the network overhead); writes
comparison.csv, agreement.json and client_vs_server.png into --out. With --profile, also simulates
the same load (same scheduler and cache, the profiled model) and prints the predicted mean TTFT and
TPOT against the client's; with --frontend (from `servesim serve CONFIG --calibrate-frontend`), once
without and once with the front end's delays (`[frontend]`, sim.frontend) and the engine thread's
share it charges at the run's mean outputs per step (engine_s_per_step + engine_s_per_output x outputs).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fidelity.sources.guidellm_client import (  # noqa: E402
    ServeProcess, agreement, client_requests, compare, run_guidellm,
)


def plot(joined: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (c, s, name) in zip((a, b), (("client_ttft_s", "server_ttft_s", "TTFT"),
                                          ("client_itl_s", "server_tpot_s", "inter-token latency"))):
        x, y = joined[s] * 1e3, joined[c] * 1e3
        ax.scatter(x, y, s=10, alpha=0.6)
        hi = max(x.max(), y.max()) * 1.05
        ax.plot([0, hi], [0, hi], "k--", lw=1, label="client = server")
        ax.set_xlabel(f"server {name} (ms, engine records)")
        ax.set_ylabel(f"client {name} (ms, guidellm)")
        ax.set_title(name)
        ax.legend()
    fig.suptitle(f"servesim serve: guidellm vs the server's records ({len(joined)} requests)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def simulate_same_load(serve_config: Path, profile: Path, rate: float, num_requests: int, prompt_tokens: int,
                       output_tokens: int, frontend: Path | None = None) -> dict:
    """`servesim simulate` of the load guidellm sent: constant rate, fixed lengths, profiled latency
    (+ the front-end terms of a front-end profile, when given)."""
    from servesim.commands.serve import split_serve_section
    from sim.config import load_config
    from sim.runner import simulate

    data, _, _ = split_serve_section(serve_config)
    data.setdefault("hardware", {}).update({"latency": "profiled", "profile": str(profile.resolve())})
    data["workload"] = {"kind": "constant", "rate": rate, "num_requests": num_requests,
                        "prompt_len": {"kind": "constant", "value": prompt_tokens},
                        "output_len": {"kind": "constant", "value": output_tokens}}
    if frontend is not None:
        from dataclasses import asdict

        from sim.frontend import FrontendConfig

        data["frontend"] = asdict(FrontendConfig.from_profile(frontend))
    return simulate(load_config(data)).summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=REPO / "examples" / "serve-tiny.toml")
    p.add_argument("--url", help="benchmark a server that is already running (else one is started)")
    p.add_argument("--tokenizer", type=Path, default=REPO / "examples" / "tiny-llama")
    p.add_argument("--rate", type=float, default=4.0, help="requests per second (constant)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (rate x duration requests)")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--profile", type=Path, help="a calibrated profile: also simulate the same load with it")
    p.add_argument("--frontend", type=Path, help="a front-end profile (servesim serve --calibrate-frontend): "
                                                 "also simulate with its terms")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "serve-client")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    num_requests = max(1, round(args.rate * args.duration))

    server = None if args.url else ServeProcess(args.config, args.out / "server-shutdown", cwd=REPO)
    url = args.url or server.url
    try:
        print(f"guidellm: {num_requests} requests at {args.rate}/s against {url} ...", flush=True)
        report = run_guidellm(url, args.tokenizer, args.out / "guidellm.json", args.rate, num_requests,
                              args.prompt_tokens, args.output_tokens, timeout_s=args.duration * 5 + 300)
        import httpx

        httpx.post(f"{url}/admin/dump", params={"out_dir": str((args.out / "server").resolve())},
                   timeout=120).raise_for_status()
    finally:
        if server is not None:
            server.stop()
    client = client_requests(report)
    server_requests = pd.read_csv(args.out / "server" / "requests.csv")
    joined = compare(client, server_requests)
    stats = agreement(joined)
    stats["client_status"] = client["status"].value_counts().to_dict()
    joined.to_csv(args.out / "comparison.csv", index=False)
    plot(joined, args.out / "client_vs_server.png")

    print(f"\nrequests: {stats['client_status']}")
    print(f"{'figure (ms)':28s} {'mean':>8s} {'p50':>8s} {'p90':>8s} {'max':>8s}")
    for key in ("client_ttft_s", "server_ttft_s", "ttft_overhead_s", "client_itl_s", "server_tpot_s", "itl_diff_s"):
        v = stats[key]
        print(f"{key[:-2]:28s} {v['mean']*1e3:8.2f} {v['p50']*1e3:8.2f} {v['p90']*1e3:8.2f} {v['max']*1e3:8.2f}")
    if args.profile:
        prompt_tokens = int(round(joined["num_prompt_tokens"].mean()))  # as the server counted them (with BOS)
        variants = {"simulate": None, **({"simulate_frontend": args.frontend} if args.frontend else {})}
        print(f"\n{'prediction vs client':32s} {'predicted':>10s} {'client':>10s} {'error':>8s}")
        for name, frontend in variants.items():
            summary = simulate_same_load(args.config, args.profile, args.rate, num_requests, prompt_tokens,
                                         args.output_tokens, frontend)
            stats[name] = {}
            label = "+ front end" if frontend else "engine only"
            for stat in ("mean", "p50"):
                pred = {"ttft_s": summary["ttft_s"][stat], "tpot_s": summary["tpot_s"][stat]}
                meas = {"ttft_s": stats["client_ttft_s"][stat], "tpot_s": stats["client_itl_s"][stat]}
                for k in pred:
                    v = {"predicted": pred[k], "client": meas[k], "error": pred[k] / meas[k] - 1}
                    stats[name][f"{k}_{stat}"] = v
                    print(f"{label + ' ' + k[:-2] + ' ' + stat:32s} {v['predicted']*1e3:8.2f}ms {v['client']*1e3:8.2f}ms "
                          f"{v['error']:+8.1%}")
        if args.frontend:
            stats["frontend_profile"] = str(args.frontend)
            # engine-free check of the front end: the client's TTFT exceeds the server's records by
            # the ingress before the server's arrival stamp plus the first chunk's egress
            fe = json.loads(args.frontend.read_text())
            before = fe["measurements"].get("ingress_before_server_stamp_s_median")
            if before is not None:
                expected = before + fe["frontend"]["stream_overhead_s"]
                measured = stats["ttft_overhead_s"]
                stats["frontend_check"] = {"expected_ttft_overhead_s": expected, "measured_p50": measured["p50"],
                                           "measured_mean": measured["mean"]}
                print(f"client - server TTFT: profile {expected*1e3:.2f} ms (ingress before the server's stamp "
                      f"+ egress), measured p50 {measured['p50']*1e3:.2f} ms, mean {measured['mean']*1e3:.2f} ms")
            # the engine thread's share at this load: the server's steps, each streaming one output per
            # sequence (every prompt here fits one step, so each scheduled sequence samples)
            steps = pd.read_csv(args.out / "server" / "steps.csv")
            outputs = steps.loc[steps["num_seqs"] > 0, "num_seqs"]
            terms = fe["frontend"]
            per_step, per_output = terms.get("engine_s_per_step", 0.0), terms.get("engine_s_per_output", 0.0)
            stats["engine_share"] = {"mean_outputs_per_step": float(outputs.mean()),
                                     "charged_s_per_step_mean": per_step + per_output * float(outputs.mean())}
            print(f"engine thread's share: {outputs.mean():.2f} outputs per step (server's steps), charged "
                  f"{per_step*1e3:.3f} + {per_output*1e3:.3f} x outputs = "
                  f"{stats['engine_share']['charged_s_per_step_mean']*1e3:.3f} ms per step on average")
    (args.out / "agreement.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"\nwrote {args.out}/comparison.csv, agreement.json, client_vs_server.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

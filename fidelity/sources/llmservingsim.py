"""GPU step time from LLMServingSim's per-layer profiles of vLLM (measured on the serving GPU).

A profile folder `.../<GPU>/<org>/<model>/bf16/tp<N>/` holds, in microseconds, what one decoder
layer's pieces took when vLLM ran them (a 1-layer dummy-weight model, per-rank shapes for tp N):
dense ops, attention, the LM head and sampler, MoE experts (`LayerProfileLatencyModel` lists the
files). A step is built from them as vLLM runs it: the layer's pieces times the number of layers,
plus the collectives between GPUs (from the run's own hardware description when it has one) and
the once-per-step ops, so that a step of any batch is timed from the data of the serving GPU.

Also here: LLMServingSim's vLLM 0.19 bench runs (`load_llmservingsim_run`).
"""
from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

import numpy as np
import pandas as pd

from policies import BatchPlan, ConfigError
from policies.config import check_int
from fidelity.runs import (RealRun, ServerArgs, canonical_gpu, measured_table, recorded_bool, recorded_gib,
                          recorded_release)
from records.files import read_json_lines, read_json_object

#: the source (campaign) of every replay here: LLMServingSim's vLLM 0.19 runs on its GPUs
LLMSERVINGSIM_SOURCE = "llmservingsim-vllm-0.19"

PER_LAYER_OPS = ("layernorm", "qkv_proj", "rotary_emb", "o_proj", "qk_norm", "gate_up_proj", "act_fn", "down_proj")
PER_STEP_OPS = ("embedding", "final_layernorm")
ALLREDUCE_LATENCY_S = 10e-6  # one NCCL all-reduce launch + sync across GPUs (order of magnitude, measured typical)


def _interp1(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    """Linear interpolation through sorted knots, extended linearly beyond both ends."""
    if len(xs) == 1:
        return float(ys[0])
    i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return float(max(y, 0.0))


class Curve1D:
    """time(x) from (x, time) points (the median of repeats), linear between, extended linearly."""

    def __init__(self, x, y) -> None:
        df = pd.DataFrame({"x": np.asarray(x, float), "y": np.asarray(y, float)}).groupby("x")["y"].median()
        self.x = df.index.to_numpy()
        self.y = df.to_numpy()

    def __call__(self, x: float) -> float:
        return _interp1(self.x, self.y, x) if x > 0 else 0.0


class Grid:
    """Interpolation over points {(x1, ..., xn): value} on a (possibly ragged) grid.

    Hierarchical: along the last axis among the points that share the leading coordinates, then
    along the axis before, and so on; each step linear between the bracketing knots and extended
    linearly beyond the ends. Profiles whose grids differ per slice (more KV points for long
    chunks, say) interpolate as well as full rectangular ones.
    """

    def __init__(self, axes: list[np.ndarray], values: dict[tuple, float]) -> None:
        self.ndim = len(axes)
        self.tree: dict = {}
        for key, v in values.items():
            node = self.tree
            for x in key[:-1]:
                node = node.setdefault(float(x), {})
            node[float(key[-1])] = float(v)
        self._freeze(self.tree)

    def _freeze(self, node: dict) -> None:
        node["_knots"] = np.asarray(sorted(k for k in node if k != "_knots"), float)
        for k, child in node.items():
            if k != "_knots" and isinstance(child, dict):
                self._freeze(child)

    def _eval(self, node: dict, x: tuple[float, ...]) -> float:
        knots = node["_knots"]
        v = x[0]
        if len(knots) == 1:
            pair = ((knots[0], 1.0),)
        else:
            i = min(max(bisect_right(knots, v) - 1, 0), len(knots) - 2)
            w = (v - knots[i]) / (knots[i + 1] - knots[i])
            pair = ((knots[i], 1.0 - w), (knots[i + 1], w))
        total = 0.0
        for k, w in pair:
            child = node[k]
            total += w * (child if len(x) == 1 else self._eval(child, x[1:]))
        return total

    def __call__(self, *x: float) -> float:
        return max(self._eval(self.tree, tuple(float(v) for v in x)), 0.0)


class AttentionTable:
    """One layer's attention time for (prefill chunk, its prior context, decodes, their context)."""

    def __init__(self, df: pd.DataFrame) -> None:
        df = df.groupby(["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"], as_index=False)["time_us"].median()
        t = {tuple(map(float, k)): v * 1e-6 for k, v in
             zip(df[["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"]].itertuples(index=False), df["time_us"])}
        dec = df[(df.prefill_chunk == 0) & (df.n_decode > 0)]
        self.decode = Grid([dec.n_decode.to_numpy(), dec.kv_decode.to_numpy()],
                           {(k[2], k[3]): v for k, v in t.items() if k[0] == 0 and k[2] > 0})
        pre = df[(df.prefill_chunk > 0) & (df.n_decode == 0)]
        self.prefill = Grid([pre.prefill_chunk.to_numpy(), pre.kv_prefill.to_numpy()],
                            {(k[0], k[1]): v for k, v in t.items() if k[0] > 0 and k[2] == 0})
        mixed = df[(df.prefill_chunk > 0) & (df.n_decode > 0)]
        self.mixed = None
        if len(mixed):
            self.mixed = Grid([mixed.prefill_chunk.to_numpy(), mixed.kv_prefill.to_numpy(), mixed.n_decode.to_numpy(),
                               mixed.kv_decode.to_numpy()],
                              {k: v for k, v in t.items() if k[0] > 0 and k[2] > 0})
            self.mixed_max_n = float(mixed.n_decode.max())

    def __call__(self, chunks: list[tuple[int, int]], num_decode: int, decode_kv: float) -> float:
        """Seconds for the prefill chunks [(tokens, prior context)] and `num_decode` decodes of mean context."""
        if not chunks:
            return self.decode(num_decode, decode_kv) if num_decode else 0.0
        (c0, k0), rest = chunks[0], chunks[1:]
        if num_decode and self.mixed is not None:
            n = min(num_decode, self.mixed_max_n)
            t = self.mixed(c0, k0, n, decode_kv)
            if num_decode > n:  # decodes past the mixed grid: add what the extra decodes cost alone
                t += self.decode(num_decode, decode_kv) - self.decode(n, decode_kv)
        else:
            t = self.prefill(c0, k0) + (self.decode(num_decode, decode_kv) if num_decode else 0.0)
        return t + sum(self.prefill(c, k) for c, k in rest)


class LayerProfileLatencyModel:
    """`step_time(plan)`: GPU seconds of one step from a per-layer profile folder.

    - `dense.csv` (layer, tokens, time_us): per-layer ops (layernorm twice, qkv_proj, rotary_emb,
      o_proj, qk_norm, gate_up_proj, act_fn, down_proj) and once-per-step ops (embedding,
      final_layernorm) over the step's tokens;
    - `attention.csv` (prefill_chunk, kv_prefill, n_decode, kv_decode, time_us): one layer's
      attention for a batch of one prefill chunk (with `kv_prefill` earlier context) and
      `n_decode` decodes of `kv_decode` context each;
    - `per_sequence.csv` (layer, sequences, time_us): lm_head and sampler over the sampled sequences;
    - `moe.csv` (tokens, activated_experts, time_us): a MoE layer's expert computation.

    Step time = num_layers x (per-layer ops + attention + MoE + 2 all-reduces when tp > 1 + the
    MoE all-to-all under expert parallelism) + once-per-step ops + LM head and sampler. The
    all-reduce is a ring over the GPUs' link, the all-to-all sends each token's hidden state to
    its remote experts and back; the link's bandwidth and latency (`fidelity.predict` passes them)
    come from the run's own hardware description when it has one (LLMServingSim's `config.json`:
    `link_bw` GB/s, `link_latency` ns), else from the GPU catalog (NVLink, else PCIe) with a
    typical launch latency (`ALLREDUCE_LATENCY_S`). Between grid points values are linearly
    interpolated; beyond the grid, the last segment's slope extends them.
    """

    def __init__(self, folder: str | Path, num_layers: int, hidden_size: int, tp: int = 1,
                 num_experts: int = 0, num_experts_per_tok: int = 0, link_bandwidth: float = 0.0,
                 dtype_bytes: int = 2, ep_size: int = 1, link_latency: float = ALLREDUCE_LATENCY_S) -> None:
        folder = Path(folder)
        for name in ("dense.csv", "attention.csv", "per_sequence.csv"):
            if not (folder / name).is_file():
                raise ConfigError(f"hardware.profile: {folder} has no {name} (an LLMServingSim per-layer profile)")
        dense = pd.read_csv(folder / "dense.csv")
        self.ops = {op: Curve1D(g["tokens"], g["time_us"] * 1e-6) for op, g in dense.groupby("layer")}
        per_seq = pd.read_csv(folder / "per_sequence.csv")
        self.seq_ops = {op: Curve1D(g["sequences"], g["time_us"] * 1e-6) for op, g in per_seq.groupby("layer")}
        self.attention = AttentionTable(pd.read_csv(folder / "attention.csv"))
        self.moe = None
        if (folder / "moe.csv").is_file() and num_experts:
            moe = pd.read_csv(folder / "moe.csv").groupby(["tokens", "activated_experts"], as_index=False)["time_us"].median()
            self.moe = Grid([moe.tokens.to_numpy(), moe.activated_experts.to_numpy()],
                            {(float(a), float(b)): v * 1e-6 for a, b, v in moe.itertuples(index=False)})
        self.num_layers = num_layers
        self.hidden_bytes = hidden_size * dtype_bytes
        self.tp = tp
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.ep_size = max(1, int(ep_size))
        if tp > 1 and link_bandwidth <= 0:
            raise ConfigError("hardware.gpu: tensor parallelism needs the GPUs' link bandwidth (> 0)")
        self.link_bandwidth = link_bandwidth
        self.link_latency = link_latency
        if self.ep_size > 1 and link_bandwidth <= 0:
            raise ConfigError("hardware.gpu: expert parallelism needs the GPUs' link bandwidth (> 0)")

    def activated_experts(self, num_tokens: int) -> float:
        """Expected distinct experts of this GPU that the step's tokens route to (uniform routing).

        With expert parallelism over `ep_size` data-parallel engines, a GPU holds E/ep experts and
        serves the tokens of every engine (about `ep_size` x its own); its token-expert work stays
        that of `num_tokens` tokens, spread over fewer, busier experts.
        """
        e, k, ep = self.num_experts, self.num_experts_per_tok, self.ep_size
        return e / ep * (1.0 - (1.0 - k / e) ** (num_tokens * ep))

    def all_reduce(self, num_tokens: int) -> float:
        """One ring all-reduce of the step's hidden states across `tp` GPUs."""
        if self.tp <= 1 or not num_tokens:
            return 0.0
        nbytes = num_tokens * self.hidden_bytes
        return self.link_latency + 2 * (self.tp - 1) / self.tp * nbytes / self.link_bandwidth

    def all_to_all(self, num_tokens: int) -> float:
        """A MoE layer's token exchange under expert parallelism: each token's hidden state goes once
        to every other GPU holding one of its experts, and comes back (dispatch + combine)."""
        if self.ep_size <= 1 or not num_tokens or not self.num_experts:
            return 0.0
        ep, k = self.ep_size, self.num_experts_per_tok
        # expected remote GPUs a token needs: each of the ep-1 others holds one of its k experts
        # with probability 1 - (1 - 1/ep)^k (uniform routing)
        remote = num_tokens * (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** k)
        return 2 * (self.link_latency + remote * self.hidden_bytes / self.link_bandwidth)

    def breakdown(self, plan: BatchPlan) -> dict[str, float]:
        t = plan.num_tokens
        chunks, num_decode, decode_kv = [], 0, 0
        for s in plan.seqs:
            if s.is_decode:
                num_decode += 1
                decode_kv += s.context_len
            else:
                chunks.append((s.num_tokens, s.num_computed_tokens))
        chunks.sort(reverse=True)
        sampled = sum(1 for s in plan.seqs if s.samples or s.is_padding)
        layer_ops = sum(self.ops[op](t) * (2 if op == "layernorm" else 1) for op in PER_LAYER_OPS if op in self.ops)
        attn = self.attention(chunks, num_decode, decode_kv / num_decode if num_decode else 0.0)
        moe = self.moe(t, self.activated_experts(t)) if self.moe is not None and t else 0.0
        L = self.num_layers
        return {
            "dense": L * layer_ops,
            "attention": L * attn,
            "moe": L * moe,
            "all_reduce": L * 2 * self.all_reduce(t),
            "all_to_all": L * self.all_to_all(t),
            "per_step": sum(self.ops[op](t) for op in PER_STEP_OPS if op in self.ops),
            "lm_head": sum(c(sampled) for c in self.seq_ops.values()),
        }

    def step_time(self, plan: BatchPlan) -> float:
        return float(sum(self.breakdown(plan).values()))


# --- LLMServingSim's vLLM 0.19 runs ---------------------------------------------------------------
REQUEST_KEYS = ("request_id", "input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")


def _column(file: Path, recs: list[dict], key: str, number: bool = True) -> list | np.ndarray:
    """`key` of every record of a requests.jsonl (as numbers where `number`); a record without it,
    or with something else than a number there, is refused naming the file and the record."""
    for i, r in enumerate(recs, 1):
        if key not in r:
            raise ConfigError(f"{file}: record {i} has no {key}; each record has {', '.join(REQUEST_KEYS)}")
        if number and (isinstance(r[key], bool) or not isinstance(r[key], (int, float))):
            raise ConfigError(f"{file}: record {i}: {key}: expected a number, got {r[key]!r}")
    return np.array([r[key] for r in recs], dtype=float) if number else [r[key] for r in recs]


def _count(meta_file: Path, kw: dict, key: str) -> int:
    """engine_kwargs[`key`], a parallel size: absent or null is 1, else an integer >= 1."""
    value = kw.get(key)
    if value is None:
        return 1
    check_int(f"{meta_file}: engine_kwargs.{key}", value, minimum=1)
    return value


def check_devices(meta_file: Path, meta: dict, server: ServerArgs) -> None:
    """Refuse a meta.json whose engine asks for more GPUs (tensor x data parallel) than its
    `hardware.device_count` records: vLLM cannot have run that way, so the record is damaged, and
    simulating the engine arguments would answer for a machine the run did not have."""
    count = (meta.get("hardware") or {}).get("device_count")
    if count is None:
        return
    check_int(f"{meta_file}: hardware.device_count", count, minimum=1)
    need = server.tensor_parallel_size * server.data_parallel_size
    if need > count:
        raise ConfigError(f"{meta_file}: engine_kwargs.tensor_parallel_size {server.tensor_parallel_size} x "
                          f"data_parallel_size {server.data_parallel_size} needs {need} GPUs, but "
                          f"hardware.device_count records {count}")


def load_llmservingsim_run(path: Path) -> RealRun:
    """An LLMServingSim bench example: vLLM 0.19 offline engine, engine-side timestamps per request."""
    path = Path(path)
    meta_file, requests_file = path / "vllm" / "meta.json", path / "vllm" / "requests.jsonl"
    meta = read_json_object(meta_file, "LLMServingSim meta.json")
    kw = meta.get("engine_kwargs", {})
    kv = meta.get("kv_cache") or {}
    device = (meta.get("hardware") or {}).get("device_name")
    gpu = canonical_gpu(device) if device else canonical_gpu(path.parent.name)
    resolved_cache = (meta.get("resolved_config") or {}).get("cache_config") or {}
    offload_size = kw.get("kv_offloading_size", resolved_cache.get("kv_offloading_size"))
    # X.Y: the preset's; a meta.json without it is these examples' vLLM 0.19
    version = recorded_release(f"{meta_file}: vllm_version", meta["vllm_version"]) \
        if meta.get("vllm_version") is not None else "0.19"
    server = ServerArgs(
        model=str(kw.get("model", meta.get("model"))), gpu=gpu,
        tensor_parallel_size=_count(meta_file, kw, "tensor_parallel_size"),
        data_parallel_size=_count(meta_file, kw, "data_parallel_size"),
        enable_expert_parallel=recorded_bool(f"{meta_file}: engine_kwargs.enable_expert_parallel",
                                             kw.get("enable_expert_parallel", False)),
        max_model_len=kw.get("max_model_len"), max_num_batched_tokens=kw.get("max_num_batched_tokens"),
        max_num_seqs=kw.get("max_num_seqs"),
        enable_prefix_caching=recorded_bool(f"{meta_file}: kv_cache.enable_prefix_caching",
                                            kv.get("enable_prefix_caching", True)),
        block_size=int(kv.get("block_size") or 16), num_gpu_blocks=kv.get("num_gpu_blocks"),
        engine_version=".".join(version.split(".")[:2]),
        kv_offloading_size=recorded_gib(f"{meta_file}: kv_offloading_size", offload_size),
        kv_offloading_backend=kw.get("kv_offloading_backend", resolved_cache.get("kv_offloading_backend")),
    )
    check_devices(meta_file, meta, server)
    recs = read_json_lines(requests_file, "LLMServingSim requests")
    if not recs:
        raise ConfigError(f"{requests_file}: no request records; expected one JSON object per line with "
                          f"{', '.join(REQUEST_KEYS)}")
    queued, first, last = (_column(requests_file, recs, k) for k in ("queued_ts", "first_token_ts", "last_token_ts"))
    # the README's definitions (they reproduce LLMServingSim's summary.txt): times from queued_ts
    requests = measured_table({
        "req_id": [str(v) for v in _column(requests_file, recs, "request_id", number=False)], "arrival_time": queued,
        "num_prompt_tokens": _column(requests_file, recs, "input_toks"),
        "num_output_tokens": _column(requests_file, recs, "output_toks"),
        "ttft_s": first - queued, "e2e_s": last - queued,
    }, requests_file)
    name = f"{path.parent.name}/{path.name}"
    recorded = {"vllm_version": (meta.get("vllm_version"), "meta.json")} if meta.get("vllm_version") else {}
    resolved = meta.get("resolved_config") or {}
    for where, section in (("meta.json engine_kwargs", kw), ("meta.json kv_cache", kv),
                           ("meta.json resolved_config.scheduler_config", resolved.get("scheduler_config") or {}),
                           ("meta.json resolved_config.cache_config", resolved_cache)):
        for key, value in section.items():
            recorded.setdefault(key, (value, where))
    return RealRun(name=name, source=LLMSERVINGSIM_SOURCE, path=path, server=server, requests=requests,
                   recorded_args=recorded, measured_by="llmservingsim")

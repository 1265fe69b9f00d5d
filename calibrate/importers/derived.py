"""Memory-bound ops that published per-op databases do not time (norms, rotary, activation, ...).

Their time is derived, not measured: bytes moved / (memory bandwidth x an efficiency) plus a
constant launch latency per kernel, the same rule aiconfigurator itself applies to such ops. Each
derived op says so in its `source` field, so a reader of the profile knows which curves are data.
"""
from __future__ import annotations

from calibrate.fit import fit_op
from calibrate.model_dims import per_rank_shapes
from policies import ConfigError
from sim.latency.profile import DTYPE_BYTES, OpProfile, layer_kind
from sim.latency.roofline import RooflineConstants

TOKEN_GRID = (1, 16, 256, 4096, 65536)


def elementwise_bytes_per_token(dims: dict) -> dict[str, float]:
    """Bytes read + written per token by each elementwise op on one rank."""
    b = DTYPE_BYTES[dims["dtype"]]
    tp = dims["tensor_parallel_size"]
    h, hd = dims["hidden_size"], dims["head_dim"]
    q = dims["num_attention_heads"] // tp
    kv = max(dims["num_key_value_heads"] // tp, 1)
    inter = dims["intermediate_size"] // tp
    vocab = per_rank_shapes(dims)["lm_head"][1]
    plain = layer_kind(dims, "mlp_kind") == "plain"
    learned = layer_kind(dims, "position_embedding") == "learned"
    out = {
        "input_norm": 3 * h * b,  # read x and residual, write normed (vLLM fuses the residual add here)
        # read gate and up, write silu(gate) * up; a plain MLP's ReLU / GELU reads and writes fc1's output
        "act": (2 if plain else 3) * inter * b,
        "rotary": 2 * (q + kv) * hd * b,  # read and write q and k
        "kv_write": 2 * 2 * kv * hd * b,  # read k, v; scatter them into the paged cache
        "embed": (3 if learned else 1) * h * b,  # learned positions: read both rows, write their sum
        "sampler": 2 * vocab * 4,  # fp32 logits read twice (softmax, sample)
    }
    if learned:  # positions are added at the embedding; no rotary kernel in the layers
        del out["rotary"]
    return out


def derived_ops(dims: dict, mem_bw: float, efficiency: float, launch_s: float, why: str) -> dict[str, OpProfile]:
    """Curves for the elementwise ops from bandwidth: t = launch_s + bytes / (mem_bw * efficiency)."""
    out = {}
    for name, per_token in elementwise_bytes_per_token(dims).items():
        points = [[n, launch_s + n * per_token / (mem_bw * efficiency)] for n in TOKEN_GRID]
        out[name] = fit_op(name, points, source=f"derived: bytes / ({mem_bw:.3g} B/s x {efficiency}) + "
                                               f"{launch_s * 1e6:.1f} us ({why})")
    return out


HOSTS = ("graphs", "eager", "none")


def host_overhead_op(dims: dict, host: str) -> OpProfile | None:
    """The engine's per-step host time, which kernel databases do not contain, from the project's
    documented constants (`sim.latency.roofline.RooflineConstants`, not fitted here):

    - ``graphs``: a CUDA-graph engine (vLLM's default): step_overhead_s + per_seq_overhead_s x seqs;
    - ``eager``: no CUDA graphs (vLLM `enforce_eager`, or vLLM before 0.3): additionally
      layer_overhead_s x layers (~12 kernel launches a layer at ~8 us of Python + launch each);
    - ``none``: kernel time only.
    """
    if host not in HOSTS:
        raise ConfigError(f"host: {host!r} is not allowed; choose one of {', '.join(HOSTS)}")
    if host == "none":
        return None
    c = RooflineConstants.eager() if host == "eager" else RooflineConstants()
    per_step = c.step_overhead_s + dims["num_hidden_layers"] * c.layer_overhead_s
    points = [[n, per_step + n * c.per_seq_overhead_s] for n in (1, 16, 256, 4096)]
    return fit_op("step_overhead", points, source=(
        f"derived: {host} engine host time {c.step_overhead_s * 1e3:.2f} ms/step + {c.per_seq_overhead_s * 1e6:.0f} us/seq"
        + (f" + {c.layer_overhead_s * 1e6:.0f} us/layer" if c.layer_overhead_s else "")
        + " (sim.latency.RooflineConstants)"))

"""A Llama-family decoder in plain torch over a paged KV cache.

RMSNorm, rotary embeddings with the HF convention (`rope_theta`, `rotate_half`), grouped-query
attention and a SwiGLU MLP, with dimensions from a `ModelConfig` (a HF `config.json`). Weights are
seeded random or loaded from a local safetensors checkpoint with HF parameter names, so the same
weights can be loaded into `transformers.LlamaForCausalLM` (see `hf_state_dict` / `load_hf_state_dict`).

The model runs on one ragged batch of `T` tokens from many sequences (no padding, no batch axis):
attention reads and writes the paged cache through the `AttentionMetadata` of `input_batch`.

Every op is a separately callable module or function so that `calibrate` can micro-benchmark the
exact kernels the engine runs: `op_registry(model)` names them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gpu_backend.attention import select_backend
from gpu_backend.model_config import ModelConfig
from gpu_backend.sampler import Sampler


class RMSNorm(nn.Module):
    """Root-mean-square layer norm, computed in float32 like HF's LlamaRMSNorm."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [T, hidden]
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)  # [T, hidden]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's rotation: (x1, x2) -> (-x2, x1) over the two halves of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (HF convention), with cos/sin precomputed for every position."""

    def __init__(self, head_dim: int, max_position: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))  # [D/2]
        freqs = torch.arange(max_position, dtype=torch.float)[:, None] * inv_freq[None, :]  # [P, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
        self.register_buffer("cos_cache", emb.cos(), persistent=False)
        self.register_buffer("sin_cache", emb.sin(), persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # positions: [T]; q: [T, Hq, D]; k: [T, Hkv, D]
        cos = self.cos_cache[positions].to(q.dtype)[:, None, :]  # [T, 1, D]
        sin = self.sin_cache[positions].to(q.dtype)[:, None, :]  # [T, 1, D]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation on the fused gate/up projection: [T, 2I] -> [T, I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class LlamaAttention(nn.Module):
    """Fused QKV projection, rotary, paged attention (a pluggable backend), output projection."""

    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_size, self.kv_size = config.q_size, config.kv_size
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=False)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=False)
        self.rotary = rotary
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def forward(self, positions, x, meta, k_cache, v_cache, backend) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv_proj(x)  # [T, (Hq + 2 Hkv) D]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)  # [T, Hq, D]
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        q, k = self.rotary(positions, q, k)
        o = backend.forward(q, k, v, k_cache, v_cache, meta, self.scale)  # [T, Hq, D]
        return self.o_proj(o.reshape(num_tokens, self.q_size))  # [T, hidden]


class LlamaMLP(nn.Module):
    """SwiGLU MLP with the gate and up projections fused into one matmul."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        return self.down_proj(silu_and_mul(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, rotary)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, positions, x, meta, k_cache, v_cache, backend) -> torch.Tensor:
        x = x + self.self_attn(positions, self.input_layernorm(x), meta, k_cache, v_cache, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """The whole decoder: embeddings, layers, final norm, LM head.

    `forward(input_ids [T], positions [T], meta, kv_cache, backend) -> hidden [T, hidden]`;
    `compute_logits(hidden [S, hidden]) -> [S, vocab]` float32, for the sampled rows only.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary = RotaryEmbedding(config.head_dim, config.max_position_embeddings, config.rope_theta)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, self.rotary) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @torch.inference_mode()
    def forward(self, input_ids, positions, meta, kv_cache, backend) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [T, hidden]
        for i, layer in enumerate(self.layers):
            x = layer(positions, x, meta, kv_cache.k[i], kv_cache.v[i], backend)
        return self.norm(x)  # [T, hidden]

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()  # [S, vocab]

    # --- weights ----------------------------------------------------------------------------------
    @torch.no_grad()
    def init_random(self, seed: int = 0) -> "LlamaModel":
        """Seeded random weights, scaled 1/sqrt(fan_in) so activations and logits stay O(1).

        (HF's std=0.02 init makes logits nearly flat, so greedy argmax would sit on near-ties.)
        """
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 2 and "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
        return self

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights under HF `LlamaForCausalLM` names (fused projections split back)."""
        c = self.config
        sd: dict[str, torch.Tensor] = {"model.embed_tokens.weight": self.embed_tokens.weight,
                                        "model.norm.weight": self.norm.weight}
        if not c.tie_word_embeddings:
            sd["lm_head.weight"] = self.lm_head.weight
        for i, layer in enumerate(self.layers):
            pre = f"model.layers.{i}."
            q, k, v = layer.self_attn.qkv_proj.weight.split([c.q_size, c.kv_size, c.kv_size], dim=0)
            gate, up = layer.mlp.gate_up_proj.weight.chunk(2, dim=0)
            sd.update({
                pre + "self_attn.q_proj.weight": q, pre + "self_attn.k_proj.weight": k,
                pre + "self_attn.v_proj.weight": v, pre + "self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
                pre + "mlp.gate_proj.weight": gate, pre + "mlp.up_proj.weight": up,
                pre + "mlp.down_proj.weight": layer.mlp.down_proj.weight,
                pre + "input_layernorm.weight": layer.input_layernorm.weight,
                pre + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
            })
        return {k: v.detach().contiguous() for k, v in sd.items()}

    @torch.no_grad()
    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> "LlamaModel":
        """Load weights with HF names; raises KeyError naming the first missing tensor."""
        c = self.config

        def get(name: str) -> torch.Tensor:
            if name not in sd:
                raise KeyError(f"weights: checkpoint has no tensor {name!r}")
            return sd[name]

        self.embed_tokens.weight.copy_(get("model.embed_tokens.weight"))
        self.norm.weight.copy_(get("model.norm.weight"))
        if not c.tie_word_embeddings:
            self.lm_head.weight.copy_(get("lm_head.weight"))
        for i, layer in enumerate(self.layers):
            pre = f"model.layers.{i}."
            layer.self_attn.qkv_proj.weight.copy_(torch.cat(
                [get(pre + f"self_attn.{p}_proj.weight") for p in "qkv"], dim=0))
            layer.self_attn.o_proj.weight.copy_(get(pre + "self_attn.o_proj.weight"))
            layer.mlp.gate_up_proj.weight.copy_(torch.cat(
                [get(pre + "mlp.gate_proj.weight"), get(pre + "mlp.up_proj.weight")], dim=0))
            layer.mlp.down_proj.weight.copy_(get(pre + "mlp.down_proj.weight"))
            layer.input_layernorm.weight.copy_(get(pre + "input_layernorm.weight"))
            layer.post_attention_layernorm.weight.copy_(get(pre + "post_attention_layernorm.weight"))
        return self

    def save_safetensors(self, path: str | Path) -> Path:
        """Write the weights with HF names to `path` (a .safetensors file)."""
        from safetensors.torch import save_file

        path = Path(path)
        save_file({k: v.cpu() for k, v in self.hf_state_dict().items()}, str(path))
        return path

    def load_safetensors(self, path: str | Path) -> "LlamaModel":
        """Load a .safetensors file, or every *.safetensors shard in a folder."""
        from safetensors.torch import load_file

        path = Path(path)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise FileNotFoundError(f"model.weights: no safetensors checkpoint at {path}")
        sd: dict[str, torch.Tensor] = {}
        for f in files:
            sd.update(load_file(str(f)))
        return self.load_hf_state_dict(sd)


def build_model(config: ModelConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                weights: str | Path | None = None, seed: int = 0) -> LlamaModel:
    """A model on `device` in `dtype`, with weights from `weights` (safetensors) or seeded random."""
    model = LlamaModel(config)
    if weights is not None:
        model.load_safetensors(weights)
    else:
        model.init_random(seed)
    return model.to(device=device, dtype=dtype).eval()


def op_registry(model: LlamaModel, backend=None, layer: int = 0) -> dict[str, Callable]:
    """The engine's ops by name, for per-op micro-benchmarks (`calibrate`).

    Signatures (T tokens, S sampled rows):
      embed(input_ids [T]) -> [T, hidden];  norm(x [T, hidden]) -> [T, hidden]
      qkv_proj(x [T, hidden]) -> [T, (Hq+2Hkv) D];  rotary(positions [T], q [T,Hq,D], k [T,Hkv,D]) -> (q, k)
      attention(q, k, v, k_cache, v_cache, meta, scale) -> [T, Hq, D]   (`backend`, default: the device's)
      o_proj(x [T, Hq D]) -> [T, hidden];  gate_up(x [T, hidden]) -> [T, 2I];  act(gate_up [T, 2I]) -> [T, I]
      down(x [T, I]) -> [T, hidden];  lm_head(x [S, hidden]) -> [S, vocab]
      sampling(logits [S, vocab], params list, steps list) -> [S] token ids (gpu_backend.sampler.Sampler)
    """
    if backend is None:  # what the engine would pick on the model's device
        backend = select_backend(next(model.parameters()).device)
    block = model.layers[layer]
    return {
        "embed": model.embed_tokens,
        "norm": block.input_layernorm,
        "qkv_proj": block.self_attn.qkv_proj,
        "rotary": model.rotary,
        "attention": backend.forward,
        "o_proj": block.self_attn.o_proj,
        "gate_up": block.mlp.gate_up_proj,
        "act": silu_and_mul,
        "down": block.mlp.down_proj,
        "lm_head": model.lm_head,
        "sampling": Sampler(),
    }

"""`RooflineLatencyModel`: step time from FLOPs and bytes per op against datasheet peaks.

Every op's time is `max(flops / (peak x flops_eff), bytes / (bandwidth x bw_eff))`; a step is the
sum over the ops of all layers, plus TP all-reduces, the LM head, swap copies and a fixed overhead:

* per layer, for the T tokens of the step (padding included: a padded slot costs like a live one):
  - dense linears (QKV, O, MLP gate/up/down or fc1/fc2), sharded 1/tp: 2 FLOPs per weight per token;
    bytes = the weights once + activations in and out;
  - MoE: each token runs `num_experts_per_tok` experts; the weights read are those of the experts
    touched at least once, expected E x (1 - (1 - k/E)^T) of E;
  - prefill attention (sequences computing more than one token, or a first token): causal, a chunk
    of n new tokens after c cached ones does n x c + n (n + 1) / 2 query-key pairs at
    4 x heads/tp x head_dim FLOPs each; bytes = its K/V context read once;
  - decode attention: one query over the context: memory bound on reading K and V;
  - elementwise work (norms, rotary, activation, residual, KV writes): bytes only;
  - 2 all-reduces of T x hidden activations when tp > 1 (ring bandwidth term: 2 (tp - 1)/tp of the
    data per GPU over NVLink, or PCIe without it; plus a fixed latency per all-reduce);
* a host launch overhead per layer (0 with CUDA graphs, see `RooflineConstants.eager()`);
* once: the LM head over the sampled sequences only; KV blocks swapped out/in over PCIe (each GPU
  copies its shard over its own link); the per-step host overhead.

All efficiency factors and overheads live in `RooflineConstants`. It is a first-principles model:
the calibration package fits measured curves (`sim.latency.profiled`).
"""
from __future__ import annotations

from dataclasses import dataclass

from policies import BatchPlan
from policies.config import check_number
from specs.gpu_spec import GPUSpec
from specs.hardware import check_parallelism
from specs.memory import bytes_per_block, kv_heads_per_gpu
from specs.model_spec import ModelSpec


def plan_totals(plan: BatchPlan) -> tuple[int, int, int, int, int, int, int]:
    """The sums the roofline reads from a plan, in one pass: (tokens, sequences, sampled sequences,
    prefill query-key pairs, prefill context tokens, prefill tokens, decode context tokens)."""
    num_tokens = num_seqs = num_sampled = 0
    pf_pairs = pf_ctx = pf_tokens = dec_ctx = 0
    for _, n, c0, samples, padding in plan.seqs:  # (request, num_tokens, num_computed, samples, is_padding)
        num_tokens += n
        num_seqs += 1
        if samples or padding:
            num_sampled += 1
        if n == 1 and c0 > 0:  # decode: one query over the context
            dec_ctx += c0 + 1
        else:
            pf_pairs += n * c0 + n * (n + 1) // 2
            pf_ctx += c0 + n
            pf_tokens += n
    if plan.decodes:  # grouped one-token decodes that sample (see BatchPlan)
        m = len(plan.decodes)
        num_tokens += m
        num_seqs += m
        num_sampled += m
        dec_ctx += plan.decode_context_sum
    return num_tokens, num_seqs, num_sampled, pf_pairs, pf_ctx, pf_tokens, dec_ctx


@dataclass(frozen=True)
class RooflineConstants:
    """Achievable fractions of the datasheet peaks, and fixed overheads (seconds)."""

    # large bf16 GEMMs reach ~60-70% of dense peak (cuBLAS on H100/A100); 0.6 also absorbs the gaps
    # between kernels in a prefill forward
    gemm_flops_eff: float = 0.6
    # flash attention forward (FA2 on A100, FA3 on H100) reaches ~40-60% of peak on long causal chunks
    attn_flops_eff: float = 0.45
    # streaming weights: ~85% of HBM peak (matches the ~26 ms/token of CodeLlama-34B at batch 1 on an
    # 80 GB H100 in ../shared vLLM 0.11 logs)
    hbm_eff: float = 0.85
    # paged decode attention reads scattered 16-token blocks: lower achieved bandwidth
    attn_hbm_eff: float = 0.7
    # NVLink/PCIe: achieved fraction of per-direction link bandwidth in ring all-reduce / bulk copies
    link_eff: float = 0.7
    pcie_eff: float = 0.8
    # fixed cost of one all-reduce of a small message: vLLM's one-shot custom all-reduce over NVLink
    # takes ~5-10 us whatever the TP degree; without NVLink it falls back to NCCL over PCIe (~20-30 us)
    allreduce_latency_s: float = 8e-6
    pcie_allreduce_latency_s: float = 25e-6
    # host launch cost per layer per step: 0 with CUDA graphs (vLLM's default); an eager engine
    # launches ~12 kernels a layer at ~8 us each from Python: see `RooflineConstants.eager()`
    layer_overhead_s: float = 0.0
    # hidden-size activation passes per layer for norms, residual adds, rotary (reads + writes)
    elementwise_passes: int = 10
    # host work per step: scheduling, input preparation, launch / graph replay, sampling, detokenize
    step_overhead_s: float = 1.5e-3
    # extra host work per sequence in the batch (block tables, sampling metadata)
    per_seq_overhead_s: float = 5e-6

    def __post_init__(self) -> None:
        for f in ("gemm_flops_eff", "attn_flops_eff", "hbm_eff", "attn_hbm_eff", "link_eff", "pcie_eff"):
            check_number(f"latency.{f}", getattr(self, f), 0.0, 1.0, strict_min=True)
        for f in ("allreduce_latency_s", "pcie_allreduce_latency_s", "layer_overhead_s", "step_overhead_s",
                  "per_seq_overhead_s"):
            check_number(f"latency.{f}", getattr(self, f), 0.0)

    @classmethod
    def eager(cls, **overrides) -> "RooflineConstants":
        """An engine without CUDA graphs or custom all-reduce (vLLM `enforce_eager`, or vLLM before
        0.3): ~12 kernel launches per layer at ~8 us of Python + launch each, and NCCL all-reduces."""
        return cls(**{"layer_overhead_s": 12 * 8e-6, "allreduce_latency_s": 25e-6, **overrides})


class RooflineLatencyModel:
    """Analytic step time of a `BatchPlan` for `model` on `tp` x `gpu` (see the module docstring)."""

    grouped_decodes = True  # step_time reads BatchPlan.decodes (the simulator's grouped plans)
    pure_step_time = True  # step_time depends on the plan alone (see sim.latency.base.LatencyModel)

    def __init__(self, model: ModelSpec, gpu: GPUSpec, tp: int = 1, block_size: int = 16,
                 constants: RooflineConstants | None = None, pcie_bandwidth: float | None = None) -> None:
        check_parallelism(model, tp)
        self.model, self.gpu, self.tp, self.block_size = model, gpu, tp, block_size
        c = self.constants = constants or RooflineConstants()
        m, L, dt = model, model.num_layers, model.dtype_bytes
        h = m.hidden_size
        peak = gpu.peak_flops(dt)
        # all per GPU; times below are per op summed over layers, as "seconds per unit"
        self._gemm_flop_s = 1.0 / (peak * c.gemm_flops_eff)
        self._attn_flop_s = 1.0 / (peak * c.attn_flops_eff)
        self._hbm_byte_s = 1.0 / (gpu.hbm_bandwidth * c.hbm_eff)
        self._attn_byte_s = 1.0 / (gpu.hbm_bandwidth * c.attn_hbm_eff)
        q_cols, kv_cols = m.q_size // tp, kv_heads_per_gpu(m, tp) * m.head_dim
        attn_w = h * (q_cols + 2 * kv_cols) + q_cols * h  # QKV + O weights on this GPU
        inter = m.intermediate_size // tp
        dense_mlp_w = 0 if m.is_moe else m.num_mlp_matrices * h * inter
        lin_w = attn_w + dense_mlp_w
        self._lin_weight_bytes = L * lin_w * dt
        self._lin_flops_per_token = L * 2 * lin_w
        # activations in/out of the linears per token: QKV in h, out q+2kv; O in q, out h; MLP in h,
        # out (1 or 2) x inter, then inter in, h out
        mlp_io = 0 if m.is_moe else h + (m.num_mlp_matrices - 1) * inter + inter + h
        self._lin_act_bytes_per_token = L * (h + q_cols + 2 * kv_cols + q_cols + h + mlp_io) * dt
        # MoE experts (sharded 1/tp each)
        self._expert_bytes = L * m.num_mlp_matrices * h * inter * dt if m.is_moe else 0
        self._expert_flops_per_token = L * 2 * m.num_experts_per_tok * m.num_mlp_matrices * h * inter
        self._expert_act_bytes_per_token = L * m.num_experts_per_tok * (2 * h + m.num_mlp_matrices * inter) * dt
        # attention: FLOPs per (query, key) pair over all layers; K+V bytes per context token over all layers
        self._attn_flops_per_pair = L * 4 * q_cols
        self._kv_bytes_per_token = L * 2 * kv_cols * m.kv_dtype_bytes
        self._q_bytes_per_token = L * 2 * q_cols * dt  # Q read + output written
        # elementwise passes + KV cache write per token
        mlp_width = inter * max(1, m.num_experts_per_tok)  # activation passes over the MLP's hidden width
        self._elem_bytes_per_token = L * (c.elementwise_passes * h + 3 * mlp_width) * dt + self._kv_bytes_per_token
        # all-reduce: 2 per layer
        if tp > 1:
            link = gpu.interconnect_bandwidth * c.link_eff
            latency = c.allreduce_latency_s if gpu.nvlink_bandwidth else c.pcie_allreduce_latency_s
            self._ar_fixed = 2 * L * latency
            self._ar_s_per_token = 2 * L * (2 * (tp - 1) / tp) * h * dt / link
        else:
            self._ar_fixed = self._ar_s_per_token = 0.0
        # LM head on sampled tokens (vocab sharded over tp): weights once, 2 V h FLOPs per sampled token,
        # float32 logits written
        vocab = m.vocab_size // tp
        self._head_weight_bytes = vocab * h * dt
        self._head_flops_per_token = 2 * vocab * h
        self._head_bytes_per_token = vocab * 4
        # swap: each GPU moves its KV shard of a block over its own host link
        pcie = pcie_bandwidth or gpu.pcie_bandwidth
        self.block_bytes = bytes_per_block(m, tp, block_size)
        self._swap_s_per_block = self.block_bytes / (pcie * c.pcie_eff)
        self._copy_s_per_block = 2 * self.block_bytes * self._hbm_byte_s  # on-GPU copy: read + write

    def breakdown(self, plan: BatchPlan) -> dict[str, float]:
        """Seconds per component of the step (their sum is `step_time(plan)`)."""
        num_tokens, num_seqs, num_sampled, pf_pairs, pf_ctx, pf_tokens, dec_ctx = plan_totals(plan)
        out = dict.fromkeys(("linear", "moe", "attn_prefill", "attn_decode", "elementwise", "all_reduce",
                             "lm_head", "swap", "overhead"), 0.0)
        if num_tokens:
            out["linear"] = max(num_tokens * self._lin_flops_per_token * self._gemm_flop_s,
                                (self._lin_weight_bytes + num_tokens * self._lin_act_bytes_per_token)
                                * self._hbm_byte_s)
            if self._expert_bytes:
                e, k = self.model.num_experts, self.model.num_experts_per_tok
                touched = e * (1.0 - (1.0 - k / e) ** num_tokens)
                out["moe"] = max(num_tokens * self._expert_flops_per_token * self._gemm_flop_s,
                                 (touched * self._expert_bytes + num_tokens * self._expert_act_bytes_per_token)
                                 * self._hbm_byte_s)
            if pf_tokens:
                out["attn_prefill"] = max(pf_pairs * self._attn_flops_per_pair * self._attn_flop_s,
                                          (pf_ctx * self._kv_bytes_per_token + pf_tokens * self._q_bytes_per_token)
                                          * self._hbm_byte_s)
            if dec_ctx:
                out["attn_decode"] = max(dec_ctx * self._attn_flops_per_pair * self._attn_flop_s,
                                         dec_ctx * self._kv_bytes_per_token * self._attn_byte_s)
            out["elementwise"] = num_tokens * self._elem_bytes_per_token * self._hbm_byte_s
            if self.tp > 1:
                out["all_reduce"] = self._ar_fixed + num_tokens * self._ar_s_per_token
            if num_sampled:
                out["lm_head"] = max(num_sampled * self._head_flops_per_token * self._gemm_flop_s,
                                     (self._head_weight_bytes + num_sampled * self._head_bytes_per_token)
                                     * self._hbm_byte_s)
            c = self.constants
            out["overhead"] = (c.step_overhead_s + num_seqs * c.per_seq_overhead_s
                               + self.model.num_layers * c.layer_overhead_s)
        num_swapped = len(plan.swap_out_blocks) + len(plan.swap_in_blocks)
        if num_swapped:
            out["swap"] = num_swapped * self._swap_s_per_block
        if plan.blocks_to_copy:
            out["swap"] += len(plan.blocks_to_copy) * self._copy_s_per_block
        return out

    def step_time(self, plan: BatchPlan) -> float:
        """`sum(breakdown(plan).values())`, bit for bit (the same terms added in the same order;
        zero terms left out, which adding 0.0 would not change), without building the dict."""
        num_tokens, num_seqs, num_sampled, pf_pairs, pf_ctx, pf_tokens, dec_ctx = plan_totals(plan)
        t = 0.0
        if num_tokens:
            t = max(num_tokens * self._lin_flops_per_token * self._gemm_flop_s,
                    (self._lin_weight_bytes + num_tokens * self._lin_act_bytes_per_token) * self._hbm_byte_s)
            if self._expert_bytes:
                e, k = self.model.num_experts, self.model.num_experts_per_tok
                touched = e * (1.0 - (1.0 - k / e) ** num_tokens)
                t += max(num_tokens * self._expert_flops_per_token * self._gemm_flop_s,
                         (touched * self._expert_bytes + num_tokens * self._expert_act_bytes_per_token)
                         * self._hbm_byte_s)
            if pf_tokens:
                t += max(pf_pairs * self._attn_flops_per_pair * self._attn_flop_s,
                         (pf_ctx * self._kv_bytes_per_token + pf_tokens * self._q_bytes_per_token) * self._hbm_byte_s)
            if dec_ctx:
                t += max(dec_ctx * self._attn_flops_per_pair * self._attn_flop_s,
                         dec_ctx * self._kv_bytes_per_token * self._attn_byte_s)
            t += num_tokens * self._elem_bytes_per_token * self._hbm_byte_s
            if self.tp > 1:
                t += self._ar_fixed + num_tokens * self._ar_s_per_token
            if num_sampled:
                t += max(num_sampled * self._head_flops_per_token * self._gemm_flop_s,
                         (self._head_weight_bytes + num_sampled * self._head_bytes_per_token) * self._hbm_byte_s)
        num_swapped = len(plan.swap_out_blocks) + len(plan.swap_in_blocks)
        if num_swapped or plan.blocks_to_copy:
            swap = num_swapped * self._swap_s_per_block if num_swapped else 0.0
            if plan.blocks_to_copy:
                swap += len(plan.blocks_to_copy) * self._copy_s_per_block
            t += swap
        if num_tokens:
            c = self.constants
            t += c.step_overhead_s + num_seqs * c.per_seq_overhead_s + self.model.num_layers * c.layer_overhead_s
        return t

    def decode_step_time(self, num_seqs: int, context_sum: int) -> float:
        """`step_time` of a step in which `num_seqs` sequences each decode one token, their contexts
        (including the new token) summing to `context_sum` (see `decode_step_times`)."""
        return self.decode_step_times(num_seqs, context_sum, 1)[0]

    def decode_step_times(self, num_seqs: int, context_sum: int, num_steps: int) -> list[float]:
        """`step_time` of `num_steps` consecutive all-decode steps of `num_seqs` sequences, the
        first with contexts (new token included) summing to `context_sum`, each next one with
        `num_seqs` more: the simulator's decode runs (`sim.replica`). Bit-identical to `step_time`
        of those plans: the same terms summed in the same order as `breakdown`'s keys (its zero
        terms left out, which adding 0.0 would not change); the terms that do not depend on the
        context are computed once.
        """
        n = num_seqs
        base = max(n * self._lin_flops_per_token * self._gemm_flop_s,
                   (self._lin_weight_bytes + n * self._lin_act_bytes_per_token) * self._hbm_byte_s)
        if self._expert_bytes:
            e, k = self.model.num_experts, self.model.num_experts_per_tok
            touched = e * (1.0 - (1.0 - k / e) ** n)
            base += max(n * self._expert_flops_per_token * self._gemm_flop_s,
                        (touched * self._expert_bytes + n * self._expert_act_bytes_per_token) * self._hbm_byte_s)
        elementwise = n * self._elem_bytes_per_token * self._hbm_byte_s
        all_reduce = self._ar_fixed + n * self._ar_s_per_token if self.tp > 1 else None
        lm_head = max(n * self._head_flops_per_token * self._gemm_flop_s,
                      (self._head_weight_bytes + n * self._head_bytes_per_token) * self._hbm_byte_s)
        c = self.constants
        overhead = c.step_overhead_s + n * c.per_seq_overhead_s + self.model.num_layers * c.layer_overhead_s
        fpp, afs, kvb, abs_ = self._attn_flops_per_pair, self._attn_flop_s, self._kv_bytes_per_token, self._attn_byte_s
        times = []
        ctx = context_sum
        for _ in range(num_steps):
            a = ctx * fpp * afs
            b = ctx * kvb * abs_
            t = base + (a if a >= b else b)
            t += elementwise
            if all_reduce is not None:
                t += all_reduce
            t += lm_head
            times.append(t + overhead)
            ctx += n
        return times

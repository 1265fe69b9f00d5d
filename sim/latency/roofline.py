"""`RooflineLatencyModel`: step time from FLOPs and bytes per op against datasheet peaks.

Every op's time is `max(flops / (peak x flops_eff), bytes / (bandwidth x bw_eff))`; a step is the
sum over the ops of all layers (dense linears, MoE experts, prefill and decode attention, MLA,
elementwise work, TP all-reduces or the expert-parallel all-to-all), plus the LM head over the
sampled sequences, swap copies over PCIe and the per-step host overhead. The per-op terms are
listed on `RooflineLatencyModel`. All efficiency factors and overheads live in `RooflineConstants`.
It is a first-principles model: the calibration package fits measured curves (`sim.latency.profiled`).
"""
from __future__ import annotations

from dataclasses import dataclass

from policies import BatchPlan
from policies.batch_plan import PlanTotals
from policies.config import check_number
from sim.latency.base import LatencyModel
from specs.gpu_spec import GPUSpec
from specs.hardware import check_parallelism
from specs.memory import bytes_per_block, kv_heads_per_gpu
from specs.model_spec import ModelSpec

# per-GPU bandwidth of an expert-parallel all-to-all that leaves the node (more than 8 GPUs), when
# `hardware.ep_link_bandwidth_gbps` does not say: InfiniBand NDR 400 Gb/s, one NIC per GPU
EP_INTERNODE_BANDWIDTH = 50e9


def plan_totals(plan: BatchPlan) -> tuple[int, int, int, int, int, int, int]:
    """The sums the roofline reads from a plan (`BatchPlan.totals`): (tokens, sequences, sequences
    charged an LM head row: the sampling ones, the padding slots and every draft a verify scores,
    prefill query-key pairs, prefill context tokens, prefill tokens, decode context tokens), padding
    computed like live work."""
    return totals_sums(plan.totals)


def totals_sums(t: PlanTotals) -> tuple[int, int, int, int, int, int, int]:
    """`plan_totals` of a plan whose `BatchPlan.totals` are `t`."""
    return (t.num_tokens, t.num_seqs, t.num_outputs + t.num_padding_seqs + t.num_spec_tokens, t.prefill_pairs,
            t.prefill_context, t.prefill_tokens, t.decode_context)


@dataclass(frozen=True)
class RooflineConstants:
    """Achievable fractions of the datasheet peaks, and fixed overheads (seconds)."""

    # large bf16 GEMMs reach ~60-70% of dense peak (cuBLAS on H100/A100); 0.6 also absorbs the gaps
    # between kernels in a prefill forward
    gemm_flops_eff: float = 0.6
    # flash attention forward (FA2 on A100, FA3 on H100) reaches ~40-60% of peak on long causal chunks
    attn_flops_eff: float = 0.45
    # streaming weights: ~85% of HBM peak (matches the ~26 ms/token of CodeLlama-34B at batch 1 on an
    # 80 GB H100 in measured vLLM 0.11 server logs)
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


class RooflineLatencyModel(LatencyModel):
    """Analytic step time of a `BatchPlan` for `model` on `tp` x `gpu`, experts over `ep` groups;
    `ep_link_bandwidth` (bytes/s per GPU per direction) carries the all-to-all: None = the GPUs'
    NVLink (PCIe without it) within a node, InfiniBand beyond 8 GPUs.

    * per layer, for the T tokens of the step (padding included: a padded slot costs like a live one):
      - dense linears (QKV, O, MLP gate/up/down or fc1/fc2), sharded 1/tp: 2 FLOPs per weight per token;
        bytes = the weights once + activations in and out;
      - MoE: each token runs `num_experts_per_tok` routed experts (+ the shared ones, as dense
        linears); the weights read are those of the experts touched at least once, expected
        E x (1 - (1 - k/E)^T) of E; the first `first_k_dense_replace` layers are dense;
      - prefill attention (sequences computing more than one token, or a first token): causal, a chunk
        of n new tokens after c cached ones does n x c + n (n + 1) / 2 query-key pairs at
        2 x heads/tp x (q/k width + v width) FLOPs each; bytes = its KV context read once;
      - decode attention: one query over the context: memory bound on reading the KV cache;
      - multi-head latent attention (MLA): the cache is one latent per token (kv_lora_rank + rope,
        whole on every rank); prefill expands the cached latent to per-head K/V (a GEMM of
        2 x kv_lora_rank x heads/tp x (nope + v) FLOPs per cached token) and attends at q/k width
        nope + rope; decode absorbs the expansion into query and output and attends over the latent
        (2 x heads/tp x (2 kv_lora_rank + rope) FLOPs per pair);
      - elementwise work (norms, rotary, activation, residual, KV writes): bytes only;
      - 2 all-reduces of T x hidden activations when tp > 1 (ring bandwidth term: 2 (tp - 1)/tp of the
        data per GPU over NVLink, or PCIe without it; plus a fixed latency per all-reduce);
      - expert parallelism (`ep` > 1, see `specs.hardware.HardwareConfig`): a MoE layer's routed output
        comes back by a dispatch + combine all-to-all instead of the all-reduce: each GPU sends its 1/tp
        share of the tokens to each other expert group holding one of a token's k experts; with ep > tp
        the GPU's E/ep experts also serve the other ep/tp - 1 engines' tokens (a symmetric load);
    * precision: GEMMs at the weights' datasheet peak (FP8 weights: FP8 tensor cores), attention and
      elementwise work on 16-bit activations; the KV cache's dtype sets only the cache's bytes;
    * a host launch overhead per layer (0 with CUDA graphs, see `RooflineConstants.eager()`);
    * once: the LM head over the sampled sequences only; KV blocks swapped out/in over PCIe (each GPU
      copies its shard over its own link); the per-step host overhead.
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, tp: int = 1, block_size: int = 16,
                 constants: RooflineConstants | None = None, pcie_bandwidth: float | None = None,
                 ep: int = 1, ep_link_bandwidth: float | None = None) -> None:
        check_parallelism(model, tp, ep)
        self.model, self.gpu, self.tp, self.ep, self.block_size = model, gpu, tp, ep, block_size
        c = self.constants = constants or RooflineConstants()
        m, L = model, model.num_layers
        dt, act = m.dtype_bytes, m.act_dtype_bytes  # weights' and activations' element sizes
        h = m.hidden_size
        # GEMMs run at the weights' precision (FP8 weights: FP8 tensor cores, W8A8; integer weights
        # are dequantized to 16 bits inside the GEMM, `dtype_bytes` 2); attention at the
        # activations' (16-bit, also over an FP8 KV cache, which only halves its bytes)
        self._gemm_flop_s = 1.0 / (gpu.peak_flops(dt) * c.gemm_flops_eff)
        self._attn_flop_s = 1.0 / (gpu.peak_flops(act) * c.attn_flops_eff)
        self._hbm_byte_s = 1.0 / (gpu.hbm_bandwidth * c.hbm_eff)
        self._attn_byte_s = 1.0 / (gpu.hbm_bandwidth * c.attn_hbm_eff)
        heads = m.num_attention_heads // tp
        # all per GPU; times below are per op summed over layers, as "seconds per unit"
        if m.is_mla:
            # q (through the q_lora_rank bottleneck when set), kv_a (latent + rotary key), kv_b (latent
            # up to per-head K_nope and V), o; the two down-projections are replicated on every rank
            ql, kvl, rope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
            q_w = h * ql + ql * heads * m.q_head_dim if ql else h * heads * m.q_head_dim
            kv_w = h * (kvl + rope) + kvl * heads * (m.qk_nope_head_dim + m.v_head_dim)
            attn_w = q_w + kv_w + heads * m.v_head_dim * h
            attn_io = ((h + ql + ql + heads * m.q_head_dim) if ql else (h + heads * m.q_head_dim)) \
                + h + (kvl + rope) + kvl + heads * (m.qk_nope_head_dim + m.v_head_dim) + heads * m.v_head_dim + h
            kv_width = kvl + rope  # the cached latent, whole on every rank
        else:
            q_cols, kv_cols = m.q_size // tp, kv_heads_per_gpu(m, tp) * m.head_dim
            attn_w = h * (q_cols + 2 * kv_cols) + q_cols * h  # QKV + O weights on this GPU
            attn_io = h + q_cols + 2 * kv_cols + q_cols + h  # QKV in h, out q+2kv; O in q, out h
            kv_width = 2 * kv_cols
        inter = m.intermediate_size // tp
        mats = m.num_mlp_matrices
        L_dense, L_moe = m.num_dense_layers, m.num_moe_layers
        dense_mlp_w = mats * h * inter
        dense_io = h + (mats - 1) * inter + inter + h  # in h, out (1 or 2) x inter, then inter in, h out
        # MoE layers: shared experts run every token (dense, sharded 1/tp); routed experts below
        shared = m.num_shared_experts * (m.moe_intermediate_size // tp)
        shared_w = mats * h * shared
        shared_io = (h + (mats - 1) * shared + shared + h) if shared else 0
        lin_w = L * attn_w + L_dense * dense_mlp_w + L_moe * shared_w
        self._lin_weight_bytes = lin_w * m.weight_element_bytes  # integer weights: bits + group scales
        self._lin_flops_per_token = 2 * lin_w
        self._lin_act_bytes_per_token = (L * attn_io + L_dense * dense_io + L_moe * shared_io) * act
        # routed experts: ep groups of E/ep experts, each sharded over g = tp/ep GPUs (ep <= tp), or
        # whole on each of ep GPUs spanning ep/tp engines (ep > tp) whose tokens all reach them
        # (symmetric load: each of the other engines runs a step like this one)
        g = max(1, tp // ep)
        self._moe_token_scale = max(1, ep // tp)  # engines whose tokens this GPU's experts serve
        self._local_experts = m.num_experts // ep if m.is_moe else 0
        moe_inter = m.moe_intermediate_size // g
        k = m.num_experts_per_tok
        per_expert = L_moe * mats * h * moe_inter  # one local expert's weights on this GPU, all MoE layers
        self._expert_bytes = per_expert * m.weight_element_bytes if m.is_moe else 0
        if ep == 1:  # every expert sharded over tp: k assignments per token
            self._expert_flops_per_token = L_moe * 2 * k * mats * h * moe_inter
            self._expert_act_bytes_per_token = L_moe * k * (2 * h + mats * moe_inter) * act
        else:  # expert assignments this GPU computes per own token: k x (engines served) / ep
            share = k * self._moe_token_scale / ep
            self._expert_flops_per_token = 2 * per_expert * share
            self._expert_act_bytes_per_token = L_moe * (2 * h + mats * moe_inter) * act * share
        # attention: FLOPs per (query, key) pair over all layers; cache bytes per context token over all layers
        if m.is_mla:
            # prefill: the latent is expanded to per-head K/V (kv_b over the cached context, a GEMM),
            # then attention of q/k width nope + rope and v width; decode absorbs kv_b into the query and
            # output (MQA over the latent: scores over kvl + rope, values over kvl)
            self._pf_flops_per_pair = L * 2 * heads * (m.q_head_dim + m.v_head_dim)
            self._dec_flops_per_pair = L * 2 * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
            self._pf_ctx_flops_per_token = L * 2 * m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            self._q_bytes_per_token = L * heads * (m.q_head_dim + m.v_head_dim) * act
        else:
            self._pf_flops_per_pair = self._dec_flops_per_pair = L * 4 * q_cols
            self._pf_ctx_flops_per_token = 0
            self._q_bytes_per_token = L * 2 * q_cols * act  # Q read + output written
        self._kv_bytes_per_token = L * kv_width * m.kv_dtype_bytes
        # elementwise passes + KV cache write per token: norms, rotary, residuals over the hidden size;
        # activation passes over each MLP's hidden width (dense MLP, or routed assignments + shared experts)
        if ep == 1:
            moe_width = moe_inter * max(1, k) + shared
        else:
            moe_width = moe_inter * k * self._moe_token_scale / ep + shared
        mlp_passes = L_dense * 3 * inter + L_moe * 3 * moe_width
        self._elem_bytes_per_token = (L * c.elementwise_passes * h + mlp_passes) * act + self._kv_bytes_per_token
        # all-reduce: 2 per layer (attention output, MLP output); under expert parallelism a MoE layer's
        # routed output comes back by the all-to-all instead (+ an all-reduce inside each expert group of
        # g GPUs, and over tp for the shared experts)
        link = gpu.interconnect_bandwidth * c.link_eff
        latency = c.allreduce_latency_s if gpu.nvlink_bandwidth else c.pcie_allreduce_latency_s
        if tp > 1:
            n_ar = 2 * L if ep == 1 or not m.is_moe else 2 * L_dense + L_moe * (1 + (1 if shared else 0))
            ring = 2 * (tp - 1) / tp
            self._ar_fixed = n_ar * latency
            self._ar_s_per_token = n_ar * ring * h * act / link
            if ep > 1 and g > 1 and m.is_moe:
                self._ar_fixed += L_moe * latency
                self._ar_s_per_token += L_moe * 2 * (g - 1) / g * h * act / link
        else:
            self._ar_fixed = self._ar_s_per_token = 0.0
        # all-to-all (dispatch + combine) of each MoE layer under ep > 1: each GPU sends its 1/tp share of
        # the engine's tokens once to every other expert group holding one of the token's k experts
        # (expected (ep - 1)(1 - (1 - 1/ep)^k) groups, uniform routing), and receives them back
        if ep > 1 and m.is_moe:
            if ep_link_bandwidth is None:
                ep_link_bandwidth = gpu.interconnect_bandwidth if max(tp, ep) <= 8 else EP_INTERNODE_BANDWIDTH
            remote = (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** k)
            self._a2a_fixed = 2 * L_moe * latency
            self._a2a_s_per_token = 2 * L_moe * remote * h * act / tp / (ep_link_bandwidth * c.link_eff)
        else:
            self._a2a_fixed = self._a2a_s_per_token = 0.0
        # LM head on sampled tokens (vocab sharded over tp): weights once, 2 V h FLOPs per sampled token,
        # float32 logits written; at the activations' precision (vLLM leaves it unquantized under FP8)
        vocab = m.vocab_size // tp
        self._head_weight_bytes = vocab * h * act
        self._head_flops_per_token = 2 * vocab * h
        self._head_flop_s = 1.0 / (gpu.peak_flops(act) * c.gemm_flops_eff)
        self._head_bytes_per_token = vocab * 4
        # swap: each GPU moves its KV shard of a block over its own host link
        pcie = pcie_bandwidth or gpu.pcie_bandwidth
        self.block_bytes = bytes_per_block(m, tp, block_size)
        self._swap_s_per_block = self.block_bytes / (pcie * c.pcie_eff)
        self._copy_s_per_block = 2 * self.block_bytes * self._hbm_byte_s  # on-GPU copy: read + write

    def _touched_experts(self, num_tokens: int) -> float:
        """Expected distinct local experts (of this GPU's E/ep) that a step's tokens route to, uniform
        routing; under ep > tp the other engines' tokens reach them too."""
        e, k = self.model.num_experts, self.model.num_experts_per_tok
        return self._local_experts * (1.0 - (1.0 - k / e) ** (num_tokens * self._moe_token_scale))

    def _prefill_attention(self, pairs: int, context: int, tokens: int) -> float:
        """Seconds of prefill attention: FLOPs of the query-key pairs (plus MLA's expansion of the
        cached latent, a GEMM over the context already cached) against reading the context's cache
        and the queries."""
        flops_s = pairs * self._pf_flops_per_pair * self._attn_flop_s
        if self._pf_ctx_flops_per_token:
            flops_s += (context - tokens) * self._pf_ctx_flops_per_token * self._gemm_flop_s
        return max(flops_s, (context * self._kv_bytes_per_token + tokens * self._q_bytes_per_token) * self._hbm_byte_s)

    def breakdown(self, plan: BatchPlan) -> dict[str, float]:
        """Seconds per component of the step (their sum is `step_time(plan)`)."""
        num_tokens, num_seqs, num_sampled, pf_pairs, pf_ctx, pf_tokens, dec_ctx = plan_totals(plan)
        out = dict.fromkeys(("linear", "moe", "attn_prefill", "attn_decode", "elementwise", "all_reduce",
                             "all_to_all", "lm_head", "swap", "overhead"), 0.0)
        if num_tokens:
            out["linear"] = max(num_tokens * self._lin_flops_per_token * self._gemm_flop_s,
                                (self._lin_weight_bytes + num_tokens * self._lin_act_bytes_per_token)
                                * self._hbm_byte_s)
            if self._expert_bytes:
                out["moe"] = max(num_tokens * self._expert_flops_per_token * self._gemm_flop_s,
                                 (self._touched_experts(num_tokens) * self._expert_bytes
                                  + num_tokens * self._expert_act_bytes_per_token) * self._hbm_byte_s)
            if pf_tokens:
                out["attn_prefill"] = self._prefill_attention(pf_pairs, pf_ctx, pf_tokens)
            if dec_ctx:
                out["attn_decode"] = max(dec_ctx * self._dec_flops_per_pair * self._attn_flop_s,
                                         dec_ctx * self._kv_bytes_per_token * self._attn_byte_s)
            out["elementwise"] = num_tokens * self._elem_bytes_per_token * self._hbm_byte_s
            if self.tp > 1:
                out["all_reduce"] = self._ar_fixed + num_tokens * self._ar_s_per_token
            if self._a2a_fixed:
                out["all_to_all"] = self._a2a_fixed + num_tokens * self._a2a_s_per_token
            if num_sampled:
                out["lm_head"] = max(num_sampled * self._head_flops_per_token * self._head_flop_s,
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
        num_swapped = len(plan.swap_out_blocks) + len(plan.swap_in_blocks)
        swap = None
        if num_swapped or plan.blocks_to_copy:
            swap = num_swapped * self._swap_s_per_block if num_swapped else 0.0
            if plan.blocks_to_copy:
                swap += len(plan.blocks_to_copy) * self._copy_s_per_block
        return self._time(plan_totals(plan), swap)

    def totals_step_time(self, totals: PlanTotals) -> float:
        """`step_time` of a plan with these `totals` and no block moves (see `LatencyModel`)."""
        return self._time(totals_sums(totals), None)

    def totals_time_closure(self):
        """`totals_step_time` as one function with this model's constants bound (the simulator's mixed
        stretches call it once per step): the same terms in the same order, so bit for bit the same.
        Built from the model as it is now (its constants are not meant to change after __init__)."""
        lin_f, gemm, lin_w, lin_a, hbm = (self._lin_flops_per_token, self._gemm_flop_s, self._lin_weight_bytes,
                                          self._lin_act_bytes_per_token, self._hbm_byte_s)
        experts, prefill_attention, touched = self._expert_bytes, self._prefill_attention, self._touched_experts
        exp_f, exp_a = self._expert_flops_per_token, self._expert_act_bytes_per_token
        dec_f, attn_f, kv_b, attn_b = self._dec_flops_per_pair, self._attn_flop_s, self._kv_bytes_per_token, self._attn_byte_s
        elem = self._elem_bytes_per_token
        ar = self.tp > 1
        ar_fixed, ar_tok, a2a_fixed, a2a_tok = self._ar_fixed, self._ar_s_per_token, self._a2a_fixed, self._a2a_s_per_token
        head_s = self._head_flops_per_token * self._head_flop_s  # compute-bound seconds per sampled token
        head_w, head_b = self._head_weight_bytes, self._head_bytes_per_token
        c = self.constants
        step_o, seq_o, layers_o = c.step_overhead_s, c.per_seq_overhead_s, self.model.num_layers * c.layer_overhead_s

        def time_of(totals: PlanTotals) -> float:
            (num_tokens, num_seqs, _, _, _, padding_seqs, outputs, dec_ctx, pf_tokens, pf_pairs, pf_ctx,
             spec) = totals
            if not num_tokens:
                return 0.0
            t = max(num_tokens * lin_f * gemm, (lin_w + num_tokens * lin_a) * hbm)
            if experts:
                t += max(num_tokens * exp_f * gemm, (touched(num_tokens) * experts + num_tokens * exp_a) * hbm)
            if pf_tokens:
                t += prefill_attention(pf_pairs, pf_ctx, pf_tokens)
            if dec_ctx:
                t += max(dec_ctx * dec_f * attn_f, dec_ctx * kv_b * attn_b)
            t += num_tokens * elem * hbm
            if ar:
                t += ar_fixed + num_tokens * ar_tok
            if a2a_fixed:
                t += a2a_fixed + num_tokens * a2a_tok
            num_sampled = outputs + padding_seqs + spec
            if num_sampled:
                t += max(num_sampled * head_s, (head_w + num_sampled * head_b) * hbm)
            t += step_o + num_seqs * seq_o + layers_o
            return t
        return time_of

    def _time(self, sums: tuple, swap: float | None) -> float:
        """The step's seconds from `plan_totals`' sums and the swap copies' seconds (None: none)."""
        num_tokens, num_seqs, num_sampled, pf_pairs, pf_ctx, pf_tokens, dec_ctx = sums
        t = 0.0
        if num_tokens:
            t = max(num_tokens * self._lin_flops_per_token * self._gemm_flop_s,
                    (self._lin_weight_bytes + num_tokens * self._lin_act_bytes_per_token) * self._hbm_byte_s)
            if self._expert_bytes:
                t += max(num_tokens * self._expert_flops_per_token * self._gemm_flop_s,
                         (self._touched_experts(num_tokens) * self._expert_bytes
                          + num_tokens * self._expert_act_bytes_per_token) * self._hbm_byte_s)
            if pf_tokens:
                t += self._prefill_attention(pf_pairs, pf_ctx, pf_tokens)
            if dec_ctx:
                t += max(dec_ctx * self._dec_flops_per_pair * self._attn_flop_s,
                         dec_ctx * self._kv_bytes_per_token * self._attn_byte_s)
            t += num_tokens * self._elem_bytes_per_token * self._hbm_byte_s
            if self.tp > 1:
                t += self._ar_fixed + num_tokens * self._ar_s_per_token
            if self._a2a_fixed:
                t += self._a2a_fixed + num_tokens * self._a2a_s_per_token
            if num_sampled:
                t += max(num_sampled * self._head_flops_per_token * self._head_flop_s,
                         (self._head_weight_bytes + num_sampled * self._head_bytes_per_token) * self._hbm_byte_s)
        if swap is not None:
            t += swap
        if num_tokens:
            c = self.constants
            t += c.step_overhead_s + num_seqs * c.per_seq_overhead_s + self.model.num_layers * c.layer_overhead_s
        return t

    def is_pure(self) -> bool:
        return True  # step_time depends on the plan alone (see sim.latency.base.LatencyModel)

    def decode_step_time(self, num_seqs: int, context_sum: int) -> float:
        """`step_time` of a step in which `num_seqs` sequences each decode one token, their contexts
        (including the new token) summing to `context_sum` (see `decode_step_times`)."""
        return self.decode_step_times(num_seqs, context_sum, 1)[0]

    def decode_step_times(self, num_seqs: int, context_sum: int, num_steps: int) -> list[float]:
        """`step_time` of `num_steps` consecutive all-decode steps of `num_seqs` sequences, the
        first with contexts (new token included) summing to `context_sum`, each next one with
        `num_seqs` more: the simulator's decode stretches (`sim.decode_replay`). Bit-identical to `step_time`
        of those plans: the same terms summed in the same order as `breakdown`'s keys (its zero
        terms left out, which adding 0.0 would not change); the terms that do not depend on the
        context are computed once.
        """
        n = num_seqs
        base = max(n * self._lin_flops_per_token * self._gemm_flop_s,
                   (self._lin_weight_bytes + n * self._lin_act_bytes_per_token) * self._hbm_byte_s)
        if self._expert_bytes:
            base += max(n * self._expert_flops_per_token * self._gemm_flop_s,
                        (self._touched_experts(n) * self._expert_bytes + n * self._expert_act_bytes_per_token)
                        * self._hbm_byte_s)
        elementwise = n * self._elem_bytes_per_token * self._hbm_byte_s
        all_reduce = self._ar_fixed + n * self._ar_s_per_token if self.tp > 1 else None
        all_to_all = self._a2a_fixed + n * self._a2a_s_per_token if self._a2a_fixed else None
        lm_head = max(n * self._head_flops_per_token * self._head_flop_s,
                      (self._head_weight_bytes + n * self._head_bytes_per_token) * self._hbm_byte_s)
        c = self.constants
        overhead = c.step_overhead_s + n * c.per_seq_overhead_s + self.model.num_layers * c.layer_overhead_s
        fpp, afs, kvb, abs_ = self._dec_flops_per_pair, self._attn_flop_s, self._kv_bytes_per_token, self._attn_byte_s
        times = []
        ctx = context_sum
        for _ in range(num_steps):
            a = ctx * fpp * afs
            b = ctx * kvb * abs_
            t = base + (a if a >= b else b)
            t += elementwise
            if all_reduce is not None:
                t += all_reduce
            if all_to_all is not None:
                t += all_to_all
            t += lm_head
            times.append(t + overhead)
            ctx += n
        return times

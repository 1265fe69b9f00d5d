"""`ModelRunner`: the engine's executor. Turns a `BatchPlan` into a real forward pass and a `StepResult`.

Per step, in order: the plan's swap-in copies (CPU -> GPU), swap-out copies (GPU -> CPU), block
copies and loads from the KV offload tier, batch assembly (`input_batch`), the forward pass over the
paged cache, the LM head on the sampling rows only, sampling, and the stores of the blocks the step
filled to the offload tier (vLLM's worker: start_load_kv before the forward, the save after it).
Speculative decoding: a verify sequence's rows are all scored and accepted greedily (a draft stands
while it equals the target's argmax at its position; then the target's own token follows, the
correction or the bonus one); `StepResult.num_accepted` says how many. `StepResult.duration` is the measured wall time of all of it
(after a CUDA synchronize). Recompute preemption needs nothing here: the scheduler freed the blocks
and reset `num_computed_tokens`, so the request's next chunks re-prefill prompt + generated tokens.
"""
from __future__ import annotations

import time

import torch

from gpu_backend.input_batch import InputBatch, build_input_batch
from gpu_backend.kv_cache import KVCache
from gpu_backend.model import LlamaModel
from gpu_backend.sampler import Sampler
from gpu_backend.sampling_params import GREEDY, request_seed
from policies import BatchPlan, StepResult


class ModelRunner:
    """Executes plans on one model and one paged KV cache (see module docstring).

    `last_timings` holds the latest step's breakdown in seconds: swap, prepare (batch assembly on the
    host), forward (model + LM head + sampling, synchronized), and offload: the KV offload tier's
    copies, measured (loads in swap, stores in forward too), the time the simulator's link models.
    """

    def __init__(self, model: LlamaModel, kv_cache: KVCache, backend, base_seed: int = 0, clock=time.perf_counter) -> None:
        self.model, self.kv_cache, self.backend = model, kv_cache, backend
        self.clock = clock  # the engine's (gpu_backend.clock)
        self.device = kv_cache.device
        self.sampler = Sampler()
        self.base_seed = base_seed
        self.eos_token_ids = model.config.eos_token_ids
        self.last_timings: dict[str, float] = {}
        self.last_batch: InputBatch | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def execute(self, plan: BatchPlan) -> StepResult:
        t0 = self.clock()
        # swap-in first (BatchPlan's contract, vLLM v0's order): a swap-out later in the same step may
        # take the CPU blocks that swap-in freed
        self.kv_cache.swap_in(plan.swap_in_blocks)
        self.kv_cache.swap_out(plan.swap_out_blocks)
        self.kv_cache.copy_blocks(plan.blocks_to_copy)
        copy_time = 0.0  # the offload tier's copies alone (on CUDA each waits for what came before it)
        if plan.offload_load_blocks:
            self._sync()
            t_load = self.clock()
            self.kv_cache.offload_load(plan.offload_load_blocks)
            self._sync()  # a CUDA load is issued without waiting
            copy_time += self.clock() - t_load
        t1 = self.clock()
        batch = build_input_batch(plan, self.kv_cache.block_size, self.device)
        self.last_batch = batch
        t2 = self.clock()
        sampled: dict = {}
        stopped: set = set()
        accepted: dict = {}
        if batch is not None:
            hidden = self.model(batch.input_ids, batch.positions, batch.meta, self.kv_cache, self.backend)
            if batch.sample_seqs:
                logits = self.model.compute_logits(hidden[batch.sample_indices])  # [R, vocab]
                if batch.sample_last is not None:  # a verify step: every draft's row is scored too
                    scored, logits = logits, logits[batch.sample_last]  # [R, vocab], [S, vocab]
                requests = [s.request for s in batch.sample_seqs]
                params = [r.sampling or GREEDY for r in requests]
                seeds = [p.seed if p.seed is not None else request_seed(r.req_id, self.base_seed)
                         for p, r in zip(params, requests)]
                tokens = self.sampler(logits, params, seeds, [r.num_output_tokens for r in requests])
                if batch.sample_last is not None:
                    tokens = self._verify(plan, batch, scored, requests, params, tokens, accepted)
                for r, p, tok in zip(requests, params, tokens):
                    sampled[r.req_id] = tok
                    if tok in p.stop_token_ids or (tok in self.eos_token_ids and not r.ignore_eos):
                        stopped.add(r.req_id)
        if plan.offload_store_blocks:  # after the forward: this step's blocks
            self._sync()  # the forward's end, so that the store's own time is told apart from it
            t_store = self.clock()
            self.kv_cache.offload_store(plan.offload_store_blocks)
            copy_time += self.clock() - t_store
        self._sync()
        t3 = self.clock()
        self.last_timings = {"swap": t1 - t0, "prepare": t2 - t1, "forward": t3 - t2, "offload": copy_time}
        return StepResult(duration=t3 - t0, sampled_token_ids=sampled, stopped=frozenset(stopped),
                          num_accepted=accepted if plan.spec_token_ids else None)

    def _verify(self, plan: BatchPlan, batch: InputBatch, scored: torch.Tensor, requests, params, tokens,
                accepted: dict) -> list[int]:
        """Greedy acceptance of each verify sequence's drafts (into `accepted`); returns the tokens
        sampled, a verify sequence's replaced by the target's token after its accepted drafts (a stop
        token among those drafts ends them there and is the sampled token)."""
        argmax = scored.argmax(-1).tolist()  # [R]: the target's greedy token at every scored row
        out = list(tokens)
        for i, (r, p) in enumerate(zip(requests, params)):
            drafts = plan.spec_token_ids.get(r.req_id)
            if not drafts:
                continue
            target = argmax[batch.sample_first[i]:batch.sample_first[i] + len(drafts) + 1]
            a = 0
            while a < len(drafts) and target[a] == drafts[a]:
                a += 1
            tok = target[a]
            for j in range(a):
                d = drafts[j]
                if d in p.stop_token_ids or (d in self.eos_token_ids and not r.ignore_eos):
                    a, tok = j, d
                    break
            accepted[r.req_id] = a
            out[i] = tok
        return out

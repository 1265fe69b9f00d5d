"""The decoder against transformers' LlamaForCausalLM with the same weights; weights round-trip; op registry."""
import torch

from engine_factories import make_plan, make_prompt, make_request
from gpu_backend.attention import select_backend
from gpu_backend.kv_cache import KVCache
from gpu_backend.model import build_model, op_registry
from gpu_backend.model_runner import ModelRunner
from gpu_backend.input_batch import build_input_batch


def prefill_logits(model, prompts: list[list[int]], block_size: int = 16) -> list[torch.Tensor]:
    """All-position logits of several prompts packed into one ragged batch."""
    kv = KVCache(model.config, 64, block_size)
    kv.fill_(float("nan"))
    reqs, next_block = [], 0
    for i, p in enumerate(prompts):
        n = (len(p) + block_size - 1) // block_size
        reqs.append(make_request(i, p, block_table=range(next_block, next_block + n)))
        next_block += n
    batch = build_input_batch(make_plan(*[(r, len(p), 0, True) for r, p in zip(reqs, prompts)]), block_size)
    hidden = model(batch.input_ids, batch.positions, batch.meta, kv, select_backend("cpu"))
    logits = model.compute_logits(hidden)
    bounds = batch.meta.cu_seqlens_q_np
    return [logits[bounds[i]:bounds[i + 1]] for i in range(len(prompts))]


def test_logits_match_transformers_for_a_packed_batch(tiny_model, hf_model):
    prompts = [make_prompt(n, seed=n) for n in (5, 33, 17)]
    ours = prefill_logits(tiny_model, prompts)
    for p, lg in zip(prompts, ours):
        with torch.no_grad():
            ref = hf_model(torch.tensor([p]), use_cache=False).logits[0]
        torch.testing.assert_close(lg, ref, rtol=1e-4, atol=1e-4)


def test_safetensors_round_trip_gives_the_same_model(tiny_model, tmp_path):
    path = tiny_model.save_safetensors(tmp_path / "w.safetensors")
    loaded = build_model(tiny_model.config, weights=path)
    other = build_model(tiny_model.config, seed=1)
    p = [make_prompt(20, seed=3)]
    a, b, c = (prefill_logits(m, p)[0] for m in (tiny_model, loaded, other))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_chunked_prefill_and_decode_reproduce_transformers_greedy(tiny_model, hf_ref):
    prompt = make_prompt(37, seed=11)
    kv = KVCache(tiny_model.config, 16, 16)
    kv.fill_(float("nan"))
    runner = ModelRunner(tiny_model, kv, select_backend("cpu"))
    r = make_request(0, prompt, block_table=[5, 9, 3, 7])
    runner.execute(make_plan((r, 20, 0, False)))
    out = []
    for step, (n, c) in enumerate([(17, 20)] + [(1, 37 + i) for i in range(9)]):
        res = runner.execute(make_plan((r, n, c, True), step_id=step + 1))
        r.record_token(res.sampled_token_ids[0], 0.0)
        out.append(res.sampled_token_ids[0])
    hf_ref.assert_same_greedy(prompt, out)


def test_op_registry_names_callable_ops(tiny_model):
    ops = op_registry(tiny_model)
    for name in ("embed", "norm", "qkv_proj", "rotary", "attention", "o_proj", "gate_up", "act", "down",
                 "lm_head", "sampling"):
        assert callable(ops[name]), name
    x = torch.randn(7, tiny_model.config.hidden_size)
    gate_up = ops["gate_up"](ops["norm"](x))
    assert ops["down"](ops["act"](gate_up)).shape == x.shape

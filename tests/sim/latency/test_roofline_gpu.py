"""Roofline components against real kernels on the GPU this runs on (marked `gpu`: needs CUDA).

For Llama-2-7B's shapes with random bf16 weights, times (CUDA events, medians) the linears of all 32
layers, causal prefill attention and decode attention (torch SDPA), and compares each with the
roofline's component for the same plan. The roofline is a datasheet model: the bound is loose
(within 2x); the printed achieved fractions are what `RooflineConstants` should be compared with.
"""
from __future__ import annotations

import statistics

import pytest

from policies import BatchPlan, Request, ScheduledSeq
from sim.latency import RooflineLatencyModel
from specs import GPUS, get_model

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def gpu_name() -> str:
    """Catalog entry for the local GPU, from its device name."""
    name = torch.cuda.get_device_name().upper()
    for key, entry in (("H200", "H200"), ("H100", "H100-SXM"), ("H800", "H800"), ("A100", "A100-80G"),
                       ("L40S", "L40S"), ("4090", "RTX-4090")):
        if key in name:
            return entry
    pytest.skip(f"no catalog entry for {name}")


def cuda_time(fn, repeats: int = 7) -> float:
    """Median seconds of `fn()` over `repeats` timed runs after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def make_plan(*seqs):
    return BatchPlan(0, tuple(ScheduledSeq(Request(0, 0.0, max(c + n, 1), 8), n, c, True) for n, c in seqs))


@pytest.fixture(scope="module")
def setup():
    spec = get_model("Llama-2-7B")
    gpu = GPUS[gpu_name()]
    return spec, gpu, RooflineLatencyModel(spec, gpu, 1)


def test_memory_total_matches_catalog(setup):
    _, gpu, _ = setup
    total = torch.cuda.mem_get_info()[1]
    print(f"\n{gpu.name}: torch total {total / 2**30:.2f} GiB, catalog {gpu.memory_bytes / 2**30:.2f} GiB")
    assert total == pytest.approx(gpu.memory_bytes, rel=0.02)


@pytest.mark.parametrize("num_tokens", [1, 64, 512, 4096])
def test_linears_of_all_layers(setup, num_tokens):
    spec, gpu, model = setup
    h, i, L = spec.hidden_size, spec.intermediate_size, spec.num_layers
    dev, dt = "cuda", torch.bfloat16
    # one weight set per layer so that each layer streams its weights from HBM, not L2
    layers = [(torch.randn(3 * h, h, device=dev, dtype=dt), torch.randn(h, h, device=dev, dtype=dt),
               torch.randn(2 * i, h, device=dev, dtype=dt), torch.randn(h, i, device=dev, dtype=dt)) for _ in range(L)]
    x = torch.randn(num_tokens, h, device=dev, dtype=dt)
    y = torch.randn(num_tokens, i, device=dev, dtype=dt)

    def forward():
        for qkv, o, gate_up, down in layers:
            torch.matmul(x, qkv.T)
            torch.matmul(x, o.T)
            torch.matmul(x, gate_up.T)
            torch.matmul(y, down.T)

    measured = cuda_time(forward)
    predicted = model.breakdown(make_plan((num_tokens, 0)))["linear"]
    flops = 2 * num_tokens * L * (4 * h * h + 3 * h * i)
    weight_bytes = L * (4 * h * h + 3 * h * i) * 2
    print(f"\nlinears T={num_tokens}: measured {measured * 1e3:.2f} ms, roofline {predicted * 1e3:.2f} ms; "
          f"achieved {flops / measured / gpu.flops_bf16:.2f} of peak FLOP/s, "
          f"{weight_bytes / measured / gpu.hbm_bandwidth:.2f} of peak HBM")
    del layers
    torch.cuda.empty_cache()
    assert 0.5 < predicted / measured < 2.0


def test_prefill_attention(setup):
    spec, gpu, model = setup
    n, heads, d = 4096, spec.num_attention_heads, spec.head_dim
    q, k, v = (torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def forward():
        for _ in range(spec.num_layers):
            sdpa(q, k, v, is_causal=True)

    measured = cuda_time(forward)
    predicted = model.breakdown(make_plan((n, 0)))["attn_prefill"]
    flops = spec.num_layers * 4 * heads * d * n * (n + 1) / 2
    print(f"\nprefill attention 4096 causal x {spec.num_layers} layers: measured {measured * 1e3:.2f} ms, "
          f"roofline {predicted * 1e3:.2f} ms; achieved {flops / measured / gpu.flops_bf16:.2f} of peak")
    assert 0.5 < predicted / measured < 2.0


def test_decode_attention(setup):
    spec, gpu, model = setup
    batch, ctx, heads, d = 60, 2048, spec.num_attention_heads, spec.head_dim
    q = torch.randn(batch, heads, 1, d, device="cuda", dtype=torch.bfloat16)
    kv = [(torch.randn(batch, heads, ctx, d, device="cuda", dtype=torch.bfloat16),
           torch.randn(batch, heads, ctx, d, device="cuda", dtype=torch.bfloat16)) for _ in range(spec.num_layers)]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def forward():
        for k, v in kv:
            sdpa(q, k, v)

    measured = cuda_time(forward)
    predicted = model.breakdown(make_plan(*[(1, ctx - 1)] * batch))["attn_decode"]
    kv_bytes = spec.num_layers * batch * ctx * 2 * heads * d * 2
    print(f"\ndecode attention 60 x 2048 ctx x {spec.num_layers} layers: measured {measured * 1e3:.2f} ms, "
          f"roofline {predicted * 1e3:.2f} ms; achieved {kv_bytes / measured / gpu.hbm_bandwidth:.2f} of peak HBM")
    del kv
    torch.cuda.empty_cache()
    assert 0.5 < predicted / measured < 2.0

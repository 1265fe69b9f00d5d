"""ProfiledLatencyModel: step composition from a profile's curves, its meta terms, the model's dims."""
from __future__ import annotations

import subprocess
import sys

import pytest
from profile_factories import DIMS, make_profile, plan, seq

from policies import BatchPlan, ConfigError, Request, ScheduledSeq
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel


# --- step composition -------------------------------------------------------------------------------
def reference_step_time(p: Profile, pl: BatchPlan, block_size: int = 16) -> float:
    """Independent re-statement of the composition rule of the module docstring."""
    o = {k: v.curve for k, v in p.ops.items()}
    m = p.model
    T = sum(s.num_tokens for s in pl.seqs)
    S = sum(1 for s in pl.seqs if s.samples)
    decodes = [s for s in pl.seqs if s.num_tokens == 1 and s.num_computed_tokens > 0]
    prefills = [s for s in pl.seqs if s not in decodes]
    layer = sum(o[n](T) for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act", "rotary", "kv_write"))
    layer += 2 * o["input_norm"](T) + 2 * o["residual_add"](T)
    layer += sum(o["attn_prefill"](s.num_tokens, s.num_computed_tokens + s.num_tokens) for s in prefills)
    if decodes:
        mean_kv = sum(s.num_computed_tokens + 1 for s in decodes) / len(decodes)
        layer += o["attn_decode"](len(decodes), mean_kv)
    if m["tensor_parallel_size"] > 1:
        layer += 2 * o["all_reduce"](T * m["hidden_size"] * 4)
    kv_per_block = 2 * m["num_hidden_layers"] * max(m["num_key_value_heads"] // m["tensor_parallel_size"], 1) \
        * m["head_dim"] * 4 * block_size
    return (m["num_hidden_layers"] * layer + o["embed"](T) + o["input_norm"](T) + o["lm_head"](S) + o["sampler"](S)
            + o["swap_out"](len(pl.swap_out_blocks) * kv_per_block)
            + o["swap_in"](len(pl.swap_in_blocks) * kv_per_block) + o["step_overhead"](len(pl.seqs))
            + o["prefill_overhead"](len(prefills)))


@pytest.mark.parametrize("tp", [1, 2])
def test_step_time_matches_the_composition_rule(tp):
    p = make_profile(tensor_parallel_size=tp)
    lm = ProfiledLatencyModel(p)
    mixed = plan(seq("a", 1, 100), seq("b", 1, 40), seq("c", 64, 0), seq("d", 32, 200, samples=False),
                 swap_out_blocks=((1, 2), (3, 4)), swap_in_blocks=((5, 6),))
    assert lm.step_time(mixed) == pytest.approx(reference_step_time(p, mixed), rel=1e-12)
    assert sum(lm.breakdown(mixed).values()) == pytest.approx(lm.step_time(mixed))


@pytest.mark.parametrize("decode_kv, skips_padding", [("mean", False), ("max", False), ("mean", True)])
def test_a_plan_of_compact_decodes_costs_what_its_entries_cost(decode_kv, skips_padding):
    """The scheduler's leading decodes (`ScheduledSeqs`: requests and contexts, no entries) are read
    without building entries; the step must cost, op by op, what the same entries as a tuple do."""
    import random

    from policies.batch_plan import ScheduledSeqs

    lm = ProfiledLatencyModel(make_profile())
    lm.decode_kv, lm.skips_padding = decode_kv, skips_padding
    rnd = random.Random(5)
    for _ in range(200):
        n = rnd.randint(0, 20)
        decodes = [Request(f"d{i}", 0.0, 8, 4) for i in range(n)]
        contexts = [rnd.randint(1, 3000) for _ in range(n)]
        rest = tuple(ScheduledSeq(Request(f"r{i}", 0.0, 8, 4), rnd.randint(1, 400), rnd.choice([0, rnd.randint(1, 2000)]),
                                  rnd.random() < 0.5, rnd.random() < 0.2) for i in range(rnd.randint(0 if n else 1, 4)))
        compact = BatchPlan(0, ScheduledSeqs(decodes, contexts, rest))
        entries = BatchPlan(0, tuple(compact.seqs))
        assert lm.breakdown(compact) == lm.breakdown(entries)


def test_more_work_never_takes_less_time():
    lm = ProfiledLatencyModel(make_profile())
    base = [seq(i, 1, 50 + i) for i in range(4)]
    t0 = lm.step_time(plan(*base))
    assert lm.step_time(plan(*base, seq("x", 1, 10))) > t0  # one more decode
    assert lm.step_time(plan(*base, seq("y", 128, 0))) > t0  # a prefill added
    assert lm.step_time(plan(*[seq(i, 1, 500) for i in range(4)])) > t0  # longer contexts


def test_per_layer_work_scales_with_layers():
    one = ProfiledLatencyModel(make_profile(num_hidden_layers=1)).breakdown(plan(seq("a", 16, 0)))
    eight = ProfiledLatencyModel(make_profile(num_hidden_layers=8)).breakdown(plan(seq("a", 16, 0)))
    for part in ("linear", "elementwise", "attn_prefill"):
        assert eight[part] == pytest.approx(8 * one[part])
    assert eight["lm_head"] == pytest.approx(one["lm_head"])


def test_decode_attention_reads_max_kv_for_padded_backends():
    p = make_profile()
    p.meta["attn_decode_kv"] = "max"
    lm_max, lm_mean = ProfiledLatencyModel(p), ProfiledLatencyModel(make_profile())
    pl = plan(seq("a", 1, 10), seq("b", 1, 1000))
    assert lm_max.breakdown(pl)["attn_decode"] > lm_mean.breakdown(pl)["attn_decode"]


def test_the_padding_discount_charges_a_ragged_decode_batch_less_than_its_longest_context():
    """With `attn_decode_padding_discount`, a padded decode batch pays uniform(batch, longest) less the
    table's share of its padding; a uniform batch (no padding) and profiles without it pay the same."""
    p = make_profile()
    p.meta["attn_decode_kv"] = "max"
    base = ProfiledLatencyModel(p)
    p.meta["attn_decode_padding_discount"] = {"batch": [2, 8], "max_kv": [256, 1024],
                                              "discount": [[0.0, 0.0], [0.0, 0.4]]}
    lm = ProfiledLatencyModel(p)
    ragged = plan(*[seq(str(i), 1, 99) for i in range(7)], seq("long", 1, 1023))  # 8 decodes, longest 1,024
    pad = 1 - (7 * 100 + 1024) / (8 * 1024)
    assert lm.breakdown(ragged)["attn_decode"] == pytest.approx(base.breakdown(ragged)["attn_decode"] * (1 - 0.4 * pad))
    uniform = plan(*[seq(str(i), 1, 1023) for i in range(8)])
    assert lm.breakdown(uniform)["attn_decode"] == pytest.approx(base.breakdown(uniform)["attn_decode"])
    small = plan(seq("a", 1, 99), seq("b", 1, 255))  # 2 decodes at 256: the table says 0 there
    assert lm.breakdown(small)["attn_decode"] == pytest.approx(base.breakdown(small)["attn_decode"])
    p.meta["attn_decode_padding_discount"] = {"batch": [4], "max_kv": [256], "discount": [[0.4]]}  # one knot
    assert ProfiledLatencyModel(p).breakdown(ragged)["attn_decode"] == pytest.approx(
        base.breakdown(ragged)["attn_decode"] * (1 - 0.4 * pad))  # flat beyond it on both axes
    p.meta["attn_decode_padding_discount"] = {"batch": [2, 8], "max_kv": [256, 1024], "discount": [[0.0, 0.0], [0.0, 0.4]]}
    mean_profile = make_profile()  # a backend that reads the mean KV length has no padding to discount
    mean_profile.meta["attn_decode_padding_discount"] = p.meta["attn_decode_padding_discount"]
    assert ProfiledLatencyModel(mean_profile).breakdown(ragged)["attn_decode"] == pytest.approx(
        ProfiledLatencyModel(make_profile()).breakdown(ragged)["attn_decode"])


@pytest.mark.parametrize("bad", [0.2, {"batch": [2], "max_kv": [256]}, {"batch": [8, 2], "max_kv": [256], "discount": [[0], [0]]},
                                 {"batch": [2], "max_kv": [256], "discount": [[1.5]]}])
def test_a_bad_padding_discount_is_named(bad):
    p = make_profile()
    p.meta["attn_decode_padding_discount"] = bad
    with pytest.raises(ConfigError, match="profile.meta.attn_decode_padding_discount"):
        ProfiledLatencyModel(p)


def static_plan(padding: bool) -> BatchPlan:
    """A static batch's prefill of prompts 300 and 40 (padded to 300), then a decode with one finished slot."""
    a, b = seq("a", 300, 0), seq("b", 40, 0)
    pads = (ScheduledSeq(b.request, 260, 40, False, is_padding=True),) if padding else ()
    return plan(a, b, *pads)


def test_an_engine_that_skips_padding_is_charged_for_live_work_only():
    charged, skipping = make_profile(), make_profile()
    skipping.meta["executor_skips_padding"] = True
    padded, live = static_plan(True), static_plan(False)
    # a padded engine computes the padding: more tokens, another prefill sequence
    assert ProfiledLatencyModel(charged).step_time(padded) > ProfiledLatencyModel(charged).step_time(live)
    assert ProfiledLatencyModel(skipping).breakdown(padded) == ProfiledLatencyModel(skipping).breakdown(live)
    finished_slot = ScheduledSeq(Request("c", 0.0, 10, 4), 1, 300, False, is_padding=True)
    dec, dec_padded = plan(seq("a", 1, 300)), plan(seq("a", 1, 300), finished_slot)
    assert ProfiledLatencyModel(skipping).step_time(dec_padded) == ProfiledLatencyModel(skipping).step_time(dec)
    assert ProfiledLatencyModel(charged).step_time(dec_padded) > ProfiledLatencyModel(charged).step_time(dec)


def test_a_padded_engine_charges_live_decodes_their_padded_context():
    # a static batch's short member decodes over the padded row: 100 own keys + 200 pads read as 300
    charged, skipping = make_profile(), make_profile()
    skipping.meta["executor_skips_padding"] = True
    own, padded, as_long = plan(seq("a", 1, 100)), plan(seq("a", 1, 100), padding_context=200), plan(seq("a", 1, 300))
    assert ProfiledLatencyModel(charged).breakdown(padded) == ProfiledLatencyModel(charged).breakdown(as_long)
    assert ProfiledLatencyModel(skipping).breakdown(padded) == ProfiledLatencyModel(skipping).breakdown(own)


def test_executor_skips_padding_must_be_a_boolean():
    p = make_profile()
    p.meta["executor_skips_padding"] = "yes"
    with pytest.raises(ConfigError, match="^profile.meta.executor_skips_padding"):
        ProfiledLatencyModel(p)


# --- the model's dims ------------------------------------------------------------------------------
def test_a_profile_for_other_model_dims_is_refused():
    p = make_profile()
    with pytest.raises(ConfigError, match="^profile.model.hidden_size: .*4096"):
        ProfiledLatencyModel(p, model={**DIMS, "hidden_size": 4096})
    ProfiledLatencyModel(p, model=DIMS)  # same dims: fine

    class Spec:  # an object with HF attribute names works as well
        num_hidden_layers = 8
    with pytest.raises(ConfigError, match="^profile.model.num_hidden_layers"):
        ProfiledLatencyModel(p, model=Spec())


def test_a_profile_for_another_layer_kind_is_refused():
    # same dims, another layer: an OPT layer's fc1 is half a gated MLP's gate_up GEMM
    with pytest.raises(ConfigError, match="^profile.model.mlp_kind: .*gated but the model has plain"):
        ProfiledLatencyModel(make_profile(), model={**DIMS, "mlp_kind": "plain"})
    opt = make_profile(mlp_kind="plain", position_embedding="learned")
    with pytest.raises(ConfigError, match="^profile.model.mlp_kind: .*plain but the model has gated"):
        ProfiledLatencyModel(opt, model=DIMS)  # a dict without the keys is a Llama layer
    ProfiledLatencyModel(opt, model={**DIMS, "mlp_kind": "plain", "position_embedding": "learned"})


def test_profiles_load_without_torch(tmp_path):
    path = make_profile().save(tmp_path / "p.json")
    code = ("import sys; sys.modules['torch'] = None; sys.modules['scipy'] = None\n"
            "from sim.latency.profiled import ProfiledLatencyModel\n"
            f"m = ProfiledLatencyModel.from_file({str(path)!r})\n"
            "assert 'torch' not in [k for k, v in sys.modules.items() if v is not None]\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_profile_for_another_tensor_parallel_degree_is_refused():
    from pathlib import Path

    from sim.latency import build_latency_model
    from specs import HardwareConfig, ModelConfig

    examples = Path(__file__).resolve().parents[3] / "examples"
    model = ModelConfig(name=str(examples / "tiny-llama" / "config.json"), dtype="float32")
    profile = str(examples / "profiles" / "tiny-llama-cpu.json")  # measured at tp=1
    assert build_latency_model(model, HardwareConfig(latency="profiled", profile=profile, tp=1), 16).tp == 1
    with pytest.raises(ConfigError, match="^hardware.tp: .*tensor parallel 1"):
        build_latency_model(model, HardwareConfig(latency="profiled", profile=profile, tp=2), 16)


def test_after_prefill_factors_come_from_the_profile_and_a_bad_list_is_named():
    p = make_profile()
    assert ProfiledLatencyModel(p).after_prefill_factor(1) == 1.0  # absent: no factor
    p.meta["after_prefill_excess"] = [0.2, 0.05]
    lm = ProfiledLatencyModel(p)
    assert [lm.after_prefill_factor(k) for k in (0, 1, 2, 3)] == [1.0, 1.2, 1.05, 1.0]
    for bad in ([-0.1], "0.2", [float("nan")], [True]):
        p.meta["after_prefill_excess"] = bad
        with pytest.raises(ConfigError, match="^profile.meta.after_prefill_excess: expected a list of fractions >= 0"):
            ProfiledLatencyModel(p)


def test_the_after_prefill_curve_adds_seconds_by_step_and_prefill_size_and_a_bad_one_is_named():
    """`meta.after_prefill_curve`: seconds on the k-th decode step after a prefill of P tokens, linear
    in log P between knots, flat above the last, in proportion below the first, 0 past its steps."""
    p = make_profile()
    lm = ProfiledLatencyModel(p)
    assert not lm.has_after_prefill and lm.after_prefill_cost(1, 512, 0.01) == 0.01  # absent: the plan's time
    p.meta["after_prefill_curve"] = {"prefill_tokens": [16, 256], "excess_s": [[1e-4, 5e-5], [9e-4, 3e-4]]}
    lm = ProfiledLatencyModel(p)
    assert lm.has_after_prefill
    cost = lm.after_prefill_cost
    assert cost(1, 16, 0.01) == pytest.approx(0.01 + 1e-4)
    assert cost(1, 64, 0.01) == pytest.approx(0.01 + 1e-4 + 8e-4 / 2)  # 64 lies halfway in log between 16 and 256
    assert cost(2, 4096, 0.01) == pytest.approx(0.01 + 3e-4)  # flat above the last knot
    assert cost(1, 4, 0.01) == pytest.approx(0.01 + 1e-4 / 4)  # a quarter of the first knot's tokens
    assert cost(3, 256, 0.01) == cost(0, 256, 0.01) == 0.01  # past its steps; a prefill step itself
    p.meta["after_prefill_excess"] = [0.5]  # old profiles' factors still apply, before the seconds
    assert ProfiledLatencyModel(p).after_prefill_cost(1, 16, 0.01) == pytest.approx(0.015 + 1e-4)
    for bad in ({"prefill_tokens": [256, 16], "excess_s": [[0.0], [0.0]]},
                {"prefill_tokens": [16], "excess_s": [[-1e-4]]},
                {"prefill_tokens": [16, 64], "excess_s": [[1e-4], [1e-4, 0.0]]},
                {"prefill_tokens": [16]}, [1e-4]):
        p.meta["after_prefill_curve"] = bad
        with pytest.raises(ConfigError, match="^profile.meta.after_prefill_curve: expected"):
            ProfiledLatencyModel(p)

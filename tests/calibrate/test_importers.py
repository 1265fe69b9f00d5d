"""Importers of published per-op data: units, interpolation, shapes per TP rank, errors."""
from __future__ import annotations

import csv

import pytest

from calibrate.importers import import_profile
from calibrate.model_dims import per_rank_shapes, resolve_model
from policies import ConfigError
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel

H100_BF16_FLOPS = 989e12  # dense tensor-core peak (datasheet)
H100_BW = 3.35e12


@pytest.fixture(scope="module")
def aic_h100():
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    return import_profile("aiconfigurator", "H100", "llama-2-70b", 8)


def test_model_dims_split_per_rank():
    dims = resolve_model("meta-llama/Llama-2-70b-hf", tp=8)
    shapes = per_rank_shapes(dims)
    assert shapes["qkv_proj"] == (8192, (8 + 2 * 1) * 128)  # 64/8 query heads, 8/8 KV heads
    assert shapes["gate_up_proj"] == (8192, 2 * 28672 // 8)
    with pytest.raises(ConfigError, match="^tp: 3 does not divide"):
        resolve_model("llama-2-70b", tp=3)
    with pytest.raises(ConfigError, match="^model: 'gpt-9'"):
        resolve_model("gpt-9")


def opt_config(tmp_path, drop: tuple = (), **kw) -> str:
    """An OPT config.json (HF names: ffn_dim, no intermediate_size), less the keys in `drop`."""
    import json

    cfg = {"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
           "ffn_dim": 4096, "vocab_size": 50272, "max_position_embeddings": 2048, **kw}
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k not in drop}))
    return str(tmp_path / "config.json")


def test_an_opt_layer_keeps_its_plain_mlp_and_learned_positions(tmp_path):
    from calibrate.importers.derived import elementwise_bytes_per_token

    dims = resolve_model(opt_config(tmp_path), tp=2)
    assert (dims["mlp_kind"], dims["position_embedding"]) == ("plain", "learned")
    shapes = per_rank_shapes(dims)
    assert shapes["gate_up_proj"] == (1024, 4096 // 2)  # fc1 alone, not a gate and an up
    assert shapes["down_proj"] == (4096 // 2, 1024)  # fc2
    llama = per_rank_shapes({**dims, "mlp_kind": "gated"})
    assert llama["gate_up_proj"] == (1024, 4096)
    ew, ew_llama = elementwise_bytes_per_token(dims), elementwise_bytes_per_token(
        {**dims, "mlp_kind": "gated", "position_embedding": "rope"})
    assert "rotary" not in ew and "rotary" in ew_llama  # positions are added once, at the embedding
    assert ew["act"] == 2 / 3 * ew_llama["act"] and ew["embed"] == 3 * ew_llama["embed"]
    with pytest.raises(ConfigError, match="^model.name: .* lacks 'ffn_dim'"):
        resolve_model(opt_config(tmp_path, drop=("ffn_dim",)))


def test_an_eager_opt_layer_issues_one_call_fewer_than_a_llama_layer(tmp_path):
    """Learned positions are added once at the embedding: no rotary call a layer (11 at TP 1, 13 at
    TP 2), said in the launch path's source; a count given is kept."""
    from calibrate.importers.eager_launch import add_eager_launch
    from sim.latency.profile import Profile

    for tp, want in ((1, 11), (2, 13)):
        dims = resolve_model(opt_config(tmp_path), tp=tp)
        opt = add_eager_launch(Profile(meta={}, model={**dims, "tensor_parallel_size": tp}, ops={}), call_s=2e-5)
        llama = add_eager_launch(Profile(meta={}, model={**dims, "tensor_parallel_size": tp,
                                                         "position_embedding": "rope"}, ops={}), call_s=2e-5)
        assert opt["calls_per_layer"] == want == llama["calls_per_layer"] - 1
        assert "OPT layer: no rotary" in opt["source"] and "Llama layer" in llama["source"]
        given = add_eager_launch(Profile(meta={}, model={**dims, "tensor_parallel_size": tp}, ops={}), call_s=2e-5,
                                 calls_per_layer=20)
        assert given["calls_per_layer"] == 20 and "(given)" in given["source"]


def test_a_model_the_dims_cannot_describe_is_refused_with_the_reason():
    from dataclasses import replace

    from calibrate.model_dims import dims_of_spec
    from specs import get_model

    with pytest.raises(ConfigError, match="^model: DeepSeek-V3 uses multi-head latent attention"):
        dims_of_spec(get_model("DeepSeek-V3"), 8)
    fine = replace(get_model("Mixtral-8x7B"), num_shared_experts=1)
    with pytest.raises(ConfigError, match="^model: .* is a fine-grained MoE"):
        dims_of_spec(fine, 2)
    assert dims_of_spec(get_model("Mixtral-8x7B"), 2)["num_experts"] == 8  # a Mixtral-style MoE is fine
    assert dims_of_spec(get_model("Llama-3-70B").with_dtype("fp8"), 4)["quantization"] == "fp8"  # for the importer
    assert "quantization" not in dims_of_spec(get_model("Llama-3-70B"), 4)


def mixtral_config(tmp_path, **kw) -> str:
    """Mixtral-8x7B's config.json (HF names), with `kw` on top."""
    import json

    cfg = {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8,
           "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 32768,
           "torch_dtype": "bfloat16", **kw}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path / "config.json")


def test_a_moe_config_keeps_its_experts_or_is_refused(tmp_path):
    from calibrate.model_dims import dims_of_spec
    from specs import get_model

    dims = resolve_model(mixtral_config(tmp_path), tp=2)
    assert (dims["num_experts"], dims["num_experts_per_tok"]) == (8, 2)  # not the dense layer of one expert
    catalog = dims_of_spec(get_model("Mixtral-8x7B"), 2)
    assert {k: v for k, v in dims.items() if k != "name"} == {k: v for k, v in catalog.items() if k != "name"}
    assert resolve_model("mistralai/Mixtral-8x7B-Instruct-v0.1", tp=2)["num_experts"] == 8
    # a type the spec does not read stays a Llama layer, unless it has experts a dense reading would drop
    with pytest.raises(ConfigError, match="^model: .* model_type 'dbrx' has experts"):
        resolve_model(mixtral_config(tmp_path, model_type="dbrx"))
    with pytest.raises(ConfigError, match="^model.name: .*quantization_config .*'bitsandbytes'"):
        resolve_model(mixtral_config(tmp_path, quantization_config={"quant_method": "bitsandbytes"}))
    awq = resolve_model(mixtral_config(tmp_path, quantization_config={"quant_method": "awq", "bits": 4}))
    assert (awq["quantization"], awq["num_experts"]) == ("w4a16", 8)  # the form reaches the importer
    llama = mixtral_config(tmp_path, model_type="llama", num_local_experts=0,
                           quantization_config={"quant_method": "gptq", "bits": 4})
    assert resolve_model(llama)["quantization"] == "w4a16"  # a Llama layer of 4-bit weights
    fp8 = mixtral_config(tmp_path, model_type="qwen3", num_local_experts=0,
                         quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert resolve_model(fp8)["quantization"] == "fp8_block"  # Llama-shaped, read through spec_of_config


def llama_config(folder, **kw) -> str:
    """A Llama-3-70B-shaped config.json in `folder` (Mixtral's file less its experts), `kw` on top."""
    folder.mkdir(exist_ok=True)
    return mixtral_config(folder, model_type="llama", num_local_experts=0, num_experts_per_tok=0, num_hidden_layers=80,
                          hidden_size=8192, num_attention_heads=64, intermediate_size=28672, vocab_size=128256, **kw)


H100_FP8_FLOPS = 1979e12  # dense FP8 tensor-core peak (datasheet)


def test_fp8_weights_are_timed_by_fp8_gemms_and_checked_against_the_model(tmp_path):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    from specs.model_spec import ModelSpec

    bf16_cfg = llama_config(tmp_path / "bf16")
    fp8_cfg = llama_config(tmp_path / "fp8", quantization_config={"quant_method": "fp8"})
    bf16 = import_profile("aiconfigurator", "H100", bf16_cfg, 4, host="none")
    fp8 = import_profile("aiconfigurator", "H100", fp8_cfg, 4, host="none")
    assert fp8.model["quantization"] == "fp8" and "fp8" in fp8.ops["qkv_proj"].source
    for op, (k, n) in per_rank_shapes(fp8.model).items():
        if op == "lm_head":  # vLLM leaves the LM head unquantized
            assert [fp8.ops[op].curve(m) for m in (1, 4096)] == [bf16.ops[op].curve(m) for m in (1, 4096)]
            continue
        # one token: memory-bound, one byte a weight (above that floor, below the 16-bit GEMM's time)
        assert k * n / H100_BW <= fp8.ops[op].curve(1) < bf16.ops[op].curve(1), op
        # 8192 tokens: compute-bound, no faster than FP8's tensor-core peak and faster than 16-bit
        assert 2 * k * n * 8192 / H100_FP8_FLOPS <= fp8.ops[op].curve(8192) < bf16.ops[op].curve(8192), op
    fp8.check_model(ModelSpec.from_hf_config(fp8_cfg))
    with pytest.raises(ConfigError, match="^profile.model.quantization: profile was made for quantization=fp8 but "
                                          "the model has none"):
        fp8.check_model(ModelSpec.from_hf_config(bf16_cfg))
    with pytest.raises(ConfigError, match="^profile.model.quantization: .*=none but the model has fp8"):
        bf16.check_model(fp8.model)


def test_an_fp8_kv_cache_is_timed_by_attention_over_fp8_and_checked_against_the_model():
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    from calibrate.model_dims import dims_of_spec
    from specs import get_model

    spec = get_model("Llama-3-70B")
    fp8_kv = spec.with_dtype("auto", kv_cache_dtype="fp8")
    bf16 = import_profile("aiconfigurator", "H100", dims_of_spec(spec, 4), 4, host="none")
    fp8 = import_profile("aiconfigurator", "H100", dims_of_spec(fp8_kv, 4), 4, host="none")
    assert fp8.model["kv_cache_dtype"] == "fp8" and "fp8 KV cache" in fp8.ops["attn_decode"].source
    assert fp8.kv_bytes_per_token == fp8_kv.kv_bytes_per_token // 4 == bf16.kv_bytes_per_token // 2  # one rank of 4
    # long contexts: the decode reads half the bytes (at least an fp8 cache's over HBM, below the 16-bit time)
    batch, kv = 64, 16384
    bytes_read = batch * kv * fp8.kv_bytes_per_token / 80  # one layer's share
    assert bytes_read / H100_BW <= fp8.ops["attn_decode"].curve(batch, kv) < 0.9 * bf16.ops["attn_decode"].curve(batch, kv)
    assert fp8.ops["qkv_proj"].curve(128) == bf16.ops["qkv_proj"].curve(128)  # the weights are not the cache
    with pytest.raises(ConfigError, match="^model: aiconfigurator .* attention over a 16-bit KV cache only on A100"):
        import_profile("aiconfigurator", "A100", dims_of_spec(fp8_kv, 4), 4, host="none")
    fp8.check_model(fp8_kv)
    with pytest.raises(ConfigError, match="^profile.model.kv_cache_dtype: profile was made for kv_cache_dtype=fp8 "
                                          "but the model has auto"):
        fp8.check_model(spec)


def test_fp8_forms_without_trustworthy_kernels_are_refused_with_the_reason(tmp_path):
    from calibrate.importers.h100_microbench import import_h100_microbench

    fp8 = resolve_model(llama_config(tmp_path / "fp8", quantization_config={"quant_method": "fp8"}), tp=4)
    with pytest.raises(ConfigError, match="^model: h100-microbench times FP8 GEMMs of an unstated kernel and scaling, "
                       "not vLLM's kernels for the fp8 weights"):
        import_h100_microbench("H100", fp8, 4, data_dir=tmp_path)  # refused before any data is read
    fp8_kv = {**resolve_model("llama-3-70b", 4), "kv_cache_dtype": "fp8"}
    with pytest.raises(ConfigError, match="^model: h100-microbench times attention over a 16-bit KV cache"):
        import_h100_microbench("H100", fp8_kv, 4, data_dir=tmp_path)
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    with pytest.raises(ConfigError, match="^kernels: vidur-per-op times 16-bit GEMMs, not the fp8 weights"):
        import_profile("aiconfigurator", "H100", fp8, 4, host="none", kernels="vidur")
    block = llama_config(tmp_path / "block", quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    with pytest.raises(ConfigError, match="^model: .* has block-scaled FP8 weights"):
        import_profile("aiconfigurator", "H100", block, 4, host="none")
    experts = mixtral_config(tmp_path, quantization_config={"quant_method": "fp8"})
    with pytest.raises(ConfigError, match="^model: .* has FP8 experts"):
        import_profile("aiconfigurator", "H100", experts, 2, host="none")
    awq = llama_config(tmp_path / "awq", quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    with pytest.raises(ConfigError, match="^model: .* has w4a16 weights; aiconfigurator has no GEMMs of integer"):
        import_profile("aiconfigurator", "H100", awq, 4, host="none")


def test_importers_without_moe_kernels_refuse_a_moe(tmp_path):
    from calibrate.importers.h100_microbench import import_h100_microbench

    dims = resolve_model(mixtral_config(tmp_path), tp=2)
    with pytest.raises(ConfigError, match="^model: h100-microbench has no MoE kernels"):
        import_h100_microbench("H100", dims, 2, data_dir=tmp_path)  # refused before any data is read


def test_a_moe_profile_is_timed_by_the_fused_moe_kernel_and_checked_against_the_model(tmp_path):
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    moe = import_profile("aiconfigurator", "H100", mixtral_config(tmp_path), 2, host="none")
    assert "fused MoE" in moe.ops["gate_up_proj"].source
    # the block reads its routed experts' weights (gate, up, down; sharded over 2 GPUs): top-2 for one
    # token, all 8 for a few hundred. One expert's dense MLP, the old reading, is 4-8x too cheap.
    expert_bytes = 3 * 4096 * 14336 * 2 / 2
    assert moe.ops["gate_up_proj"].curve(1) >= 2 * expert_bytes / H100_BW
    assert moe.ops["gate_up_proj"].curve(512) >= 8 * expert_bytes / H100_BW
    with pytest.raises(ConfigError, match="^kernels: vidur-per-op times dense MLPs only"):
        import_profile("aiconfigurator", "H100", mixtral_config(tmp_path), 2, host="none", kernels="vidur")
    dense = {k: v for k, v in moe.model.items() if k not in ("num_experts", "num_experts_per_tok")}
    with pytest.raises(ConfigError, match="^profile.model.num_experts: profile was made for num_experts=8"):
        moe.check_model(dense)
    moe.check_model(resolve_model(mixtral_config(tmp_path), tp=2))


def test_aiconfigurator_gemms_sit_between_the_roofline_bounds(aic_h100):
    # a real GEMM can beat neither the FLOP peak nor the weight-read time, and on a big m it is
    # within 3x of the FLOP bound: catches ms/us/s unit slips and wrong per-rank shapes
    for op, (k, n) in per_rank_shapes(aic_h100.model).items():
        for m in (1, 64, 4096):
            t = aic_h100.ops[op].curve(m)
            bound = max(2 * m * k * n / H100_BF16_FLOPS, k * n * 2 / H100_BW)
            assert t >= bound * 0.95, (op, m)
        assert aic_h100.ops[op].curve(8192) < 3 * 2 * 8192 * k * n / H100_BF16_FLOPS
    assert aic_h100.meta["source"].startswith("aiconfigurator-core")
    assert aic_h100.model["tensor_parallel_size"] == 8


def test_aiconfigurator_gemm_interpolation_hits_grid_points_exactly():
    pytest.importorskip("aiconfigurator_core")
    import pandas as pd

    from calibrate.importers.aiconfigurator import _interp_gemm

    df = pd.DataFrame([{"m": m, "n": n, "k": k, "latency": float(m * n * k) * 1e-9}
                       for m in (1, 16) for n in (1024, 2048) for k in (4096, 8192)])
    at_grid = dict((m, t) for m, t in _interp_gemm(df, 4096, 1024))
    assert at_grid[16] == pytest.approx(16 * 1024 * 4096 * 1e-9 * 1e-3)
    between = dict((m, t) for m, t in _interp_gemm(df, 6144, 1536))  # bilinear of a bilinear function: exact
    assert between[16] == pytest.approx(16 * 1536 * 6144 * 1e-9 * 1e-3)


def test_aiconfigurator_profile_predicts_a_plausible_decode_step(aic_h100, tmp_path):
    from fidelity.sources.splitwise import decode_plan

    lm = ProfiledLatencyModel(Profile.load(aic_h100.save(tmp_path / "h100.json")), model=resolve_model("llama-2-70b", 8))
    weights_per_rank = 2 * 69e9 / 8
    t = lm.step_time(decode_plan(1, 512))
    assert weights_per_rank / H100_BW < t < 4 * weights_per_rank / H100_BW
    assert lm.step_time(decode_plan(64, 512)) > t
    with pytest.raises(ConfigError, match="^profile.model.num_hidden_layers"):
        ProfiledLatencyModel(aic_h100, model=resolve_model("llama-2-7b", 8))


@pytest.mark.parametrize("gpu", ["H200", "A100"])
def test_aiconfigurator_other_gpus(gpu):
    pytest.importorskip("aiconfigurator_core")
    p = import_profile("aiconfigurator", gpu, "llama-3-8b", 1)
    assert "all_reduce" not in p.ops  # tp=1
    assert p.meta["gpu"] == gpu


def test_import_errors_name_the_field():
    with pytest.raises(ConfigError, match="^source: 'vidur'"):
        import_profile("vidur", "H100", "llama-2-70b")
    pytest.importorskip("aiconfigurator_core")
    with pytest.raises(ConfigError, match="^gpu: 'TPU'"):
        import_profile("aiconfigurator", "TPU", "llama-2-70b")


def test_h100_microbench_reproduces_a_measured_gemm(shared_data, tmp_path):
    import json

    root = shared_data / "profiles" / "h100-kernel-microbench"
    # a model whose gate_up GEMM is exactly a measured shape: k = hidden = 4096, n = 2 x 5504 = 11008
    cfg = {"num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
           "intermediate_size": 5504, "vocab_size": 32000}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = import_profile("h100-microbench", "H100", str(tmp_path / "config.json"), 1, data_dir=root)
    rows = list(csv.DictReader((root / "gemm" / "h100" / "data.csv").open()))
    measured = {int(r["m"]): float(r["latency_us"]) * 1e-6 for r in rows if (r["k"], r["n"]) == ("4096", "11008")}
    for m in (64, 1024, 4096):
        assert p.ops["gate_up_proj"].curve(m) == pytest.approx(measured[m], rel=1e-9)
    assert p.ops["attn_decode"].source.startswith("h100-microbench mha decode 32-32-128-tp1")
    # the 70B shape at TP8 borrows the TP4 decode file with half the heads per rank
    p8 = import_profile("h100-microbench", "H100", "llama-2-70b", 8, data_dir=root)
    assert "64-8-128-tp4 x 0.5" in p8.ops["attn_decode"].source


def test_h100_microbench_says_its_gemms_outrun_the_16_bit_peak(shared_data, tmp_path):
    """The table's GEMMs run at ~1,290 TFLOP/s, above the H100's 989 TFLOP/s 16-bit peak (FP8 GEMMs):
    a 16-bit model's GEMMs were taken from them without a word. Times 1000x too fast (milliseconds
    in the microseconds column) outrun even the FP8 peak and are refused."""
    root = shared_data / "profiles" / "h100-kernel-microbench"
    p = import_profile("h100-microbench", "H100", "llama-2-70b", 4, data_dir=root)
    assert len(p.meta["warnings"]) == 1 and "above the H100's 989 TFLOP/s 16-bit peak: they are FP8 GEMMs" \
        in p.meta["warnings"][0], p.meta.get("warnings")
    rel = "gemm/h100/data.csv"
    i = 3  # latency_us

    def scaled(f):
        return lambda rows: [rows[0]] + [r[:i] + [str(float(r[i]) * f)] + r[i + 1:] for r in rows[1:]]

    _damaged_copy(root, tmp_path / "ms", rel, scaled(1e-3))
    with pytest.raises(ConfigError, match=r"^--data-dir: .*data.csv: latency_us: the GEMM of m, k, n = 8192, 8192, "
                                          r"6144 in 0.641031 us runs at 1,286,418 TFLOP/s, above the H100's 1,979 "
                                          "TFLOP/s FP8 peak; expected microseconds"):
        import_profile("h100-microbench", "H100", "llama-2-70b", 4, data_dir=tmp_path / "ms")
    _damaged_copy(root, tmp_path / "bf16", rel, scaled(2.0))  # within the 16-bit peak: nothing to say
    assert "warnings" not in import_profile("h100-microbench", "H100", "llama-2-70b", 4, data_dir=tmp_path / "bf16").meta


def _damaged_copy(src, dst, rel: str, edit, parts=(".",)) -> None:
    """Copy the folders `parts` of the data folder `src` to `dst`, the table at `rel` rewritten by
    `edit(rows) -> rows`."""
    import shutil

    for part in parts:
        shutil.copytree(src / part, dst / part)
    path = dst / rel
    path.chmod(0o644)
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(edit(rows))


@pytest.mark.parametrize("rel, edit, match", [
    ("mha/prefill/h100/64-8-128.csv", lambda rows: rows[:2] + [rows[2][:2] + ["-5.0"] + rows[2][3:]] + rows[3:],
     r"64-8-128.csv line 3: latency_us = '-5.0'; expected a number > 0"),
    ("mha/decode/h100/64-8-128-tp4.csv", lambda rows: [rows[0]] + [r[:4] + ["0"] + r[5:] for r in rows[1:]],
     r"64-8-128-tp4.csv line 2: latency_us = '0'"),
    ("gemm/h100/data.csv", lambda rows: [r[:3] + r[4:] for r in rows], r"data.csv: no column latency_us"),
    ("gemm/h100/data.csv", lambda rows: rows[:1], r"data.csv: no rows below the header"),
])
def test_a_damaged_microbench_table_is_refused_naming_its_file(shared_data, tmp_path, rel, edit, match):
    """A negative or zero time was fitted silently (a bent prefill fit, free decode attention); a
    lost column or an empty table failed with a traceback or a bare `min() arg is an empty sequence`."""
    _damaged_copy(shared_data / "profiles" / "h100-kernel-microbench", tmp_path / "mb", rel, edit)
    with pytest.raises(ConfigError, match=f"^--data-dir: .*{match}"):
        import_profile("h100-microbench", "H100", "llama-2-70b", 4, data_dir=tmp_path / "mb")


@pytest.mark.parametrize("rel, column, value, match", [
    ("network/h100_dgx/all_reduce.csv", "time_stats.all_reduce.median", "0", "all_reduce.csv line 2"),
    ("compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv", "time_stats.mlp_up_proj.median", "-5.7",
     r"mlp.csv line 2: time_stats.mlp_up_proj.median = '-5.7'; expected a number > 0 or a blank cell"),
    ("compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv", "num_tensor_parallel_workers", None,
     "mlp.csv: no column num_tensor_parallel_workers"),
])
def test_a_damaged_vidur_table_is_refused_naming_its_file(shared_data, aic_h100, tmp_path, rel, column, value,
                                                           match):
    """Zero or negative times made the all-reduce or a GEMM free; a lost column raised a KeyError."""
    from calibrate.importers.vidur import vidur_overlay

    def edit(rows):
        i = rows[0].index(column)
        if value is None:
            return [r[:i] + r[i + 1:] for r in rows]
        return [rows[0]] + [r[:i] + [value] + r[i + 1:] for r in rows[1:]]

    _damaged_copy(shared_data / "profiles" / "vidur-per-op", tmp_path / "vidur", rel, edit,
                  parts=("compute/h100/meta-llama/Llama-2-70b-hf", "network/h100_dgx"))
    base = Profile.from_dict(aic_h100.to_dict())
    base.meta["gpu"] = "H100"
    with pytest.raises(ConfigError, match=f"^data_dir: .*{match}"):
        vidur_overlay(base, data_dir=tmp_path / "vidur")


def test_host_time_options():
    from calibrate.importers.derived import host_overhead_op

    dims = resolve_model("llama-2-70b", 8)
    eager, graphs = host_overhead_op(dims, "eager"), host_overhead_op(dims, "graphs")
    assert host_overhead_op(dims, "none") is None
    # eager = graphs + 80 layers of launch overhead, at any batch
    from sim.latency.roofline import RooflineConstants

    per_layer = RooflineConstants.eager().layer_overhead_s
    for n in (1, 64):
        assert eager.curve(n) - graphs.curve(n) == pytest.approx(80 * per_layer)
    with pytest.raises(ConfigError, match="^host: 'turbo'"):
        import_profile("aiconfigurator", "H100", "llama-2-70b", 8, host="turbo")


def test_vidur_overlay_takes_eager_kernels_and_collectives(shared_data, aic_h100):
    root = shared_data / "profiles" / "vidur-per-op"
    p = import_profile("aiconfigurator", "H100", "llama-2-70b", 8, host="eager", kernels="vidur")
    assert p.meta["kernels"] == "vidur"
    assert "Llama-2-70b-hf" in p.ops["qkv_proj"].source and "attn_pre_proj" in p.ops["qkv_proj"].source
    assert p.ops["attn_decode"].source == aic_h100.ops["attn_decode"].source  # attention stays from the base
    # the curve passes through Vidur's own per-x median (read here from the raw file) at a grid point
    rows = [r for r in csv.DictReader((root / "compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv").open())
            if r["num_tensor_parallel_workers"] == "8" and r["num_tokens"] == "512"]
    med = sorted(float(r["time_stats.mlp_up_proj.median"]) for r in rows)[len(rows) // 2] * 1e-3
    # (within 10%: the isotonic fit pools neighbouring medians that step down)
    assert p.ops["gate_up_proj"].curve(512) == pytest.approx(med, rel=0.10)
    # an all-reduce called from Python pays a launch + protocol floor that the NCCL kernel table lacks
    assert p.ops["all_reduce"].curve(16384) > 1.2 * aic_h100.ops["all_reduce"].curve(16384)
    assert p.ops["all_reduce"].curve(16384) > 10e-6


def test_vidur_overlay_errors_name_the_field(shared_data):
    pytest.importorskip("aiconfigurator_core")
    with pytest.raises(ConfigError, match="^kernels: 'cutlass'"):
        import_profile("aiconfigurator", "H100", "llama-2-70b", 8, kernels="cutlass")
    with pytest.raises(ConfigError, match="^model: vidur-per-op has no h100"):
        import_profile("aiconfigurator", "H100", "llama-3-8b", 1, kernels="vidur")  # Vidur: A100 only


def test_an_opt_model_from_aiconfigurator_matches_an_independent_a100_profile(shared_data):
    """OPT-13B on an A100 from aiconfigurator's per-op kernels against DistServe's profiled vLLM
    iterations of the same model and GPU (its alignment factors divided out): two measurements by
    different people. Decode reads the weights once a step, so the plain MLP's shapes decide it: a
    gated shape (fc1 twice as wide) would read ~20% more."""
    pytest.importorskip("aiconfigurator_core")
    from fidelity.sources.distserve import DistServeLatencyModel
    from fidelity.sources.splitwise import decode_plan
    from specs import get_model

    from calibrate.model_dims import dims_of_spec

    spec = get_model("OPT-13B")
    ours = ProfiledLatencyModel(import_profile("aiconfigurator", "A100", dims_of_spec(spec, 1), 1, host="none"),
                                model=spec)
    path = shared_data / "groundtruth" / "distserve-a100-opt13b" / "profile_data" / "profiler-a100-80g.vllm.json"
    theirs = DistServeLatencyModel(path, "facebook/opt-13b", 1, own_prefill=True, pre_alignment=True)
    for batch in (1, 8, 32, 64):
        plan = decode_plan(batch, 600)
        assert ours.step_time(plan) == pytest.approx(theirs.step_time(plan), rel=0.10), batch
    with pytest.raises(ConfigError, match="^kernels: vidur-per-op times gated"):
        import_profile("aiconfigurator", "A100", dims_of_spec(spec, 1), 1, kernels="vidur")


def test_vidur_all_reduce_stays_inside_one_node(shared_data):
    pytest.importorskip("aiconfigurator_core")
    # Vidur's A100 table also has 2 workers on 2 nodes (over the network); a TP group is one node:
    # NVLink moves a 64 MiB all-reduce at well over 50 GB/s
    p = import_profile("aiconfigurator", "A100", "llama-2-70b", 2, host="eager", kernels="vidur")
    assert p.ops["all_reduce"].curve(64 << 20) < (64 << 20) / 50e9


def vidur_last_point(root, tp: int, vop: str) -> tuple[float, float]:
    """(tokens, seconds): Vidur's largest measured token count for Llama-2-70B at `tp` and the median
    of its per-row medians there, read straight from the CSV."""
    path = root / "compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv"
    rows = [r for r in csv.DictReader(path.open()) if int(float(r["num_tensor_parallel_workers"])) == tp]
    x_last = max(float(r["num_tokens"]) for r in rows)
    ys = sorted(float(r[f"time_stats.{vop}.median"]) * 1e-3 for r in rows if float(r["num_tokens"]) == x_last)
    return x_last, ys[len(ys) // 2]


@pytest.mark.parametrize("tp", [2, 8])
def test_vidur_gemms_continue_in_proportion_beyond_their_grid(shared_data, tp):
    """At twice Vidur's last token count a GEMM (compute-bound there) costs ~twice its last measured
    time, not whatever the last 32-token segment's slope says (kernels="vidur" of the CLI)."""
    root = shared_data / "profiles" / "vidur-per-op"
    gemms = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
             "mlp_down_proj": "down_proj"}
    # h100-microbench as the base source: attention only, the GEMMs come from Vidur either way
    p = import_profile("h100-microbench", "H100", "llama-2-70b", tp, kernels="vidur")
    raw = import_profile("h100-microbench", "H100", "llama-2-70b", tp, kernels="vidur", extend_grids=False)
    raw_off = []
    for vop, op in gemms.items():
        x_last, y_last = vidur_last_point(root, tp, vop)
        assert p.ops[op].curve(2 * x_last) == pytest.approx(2 * y_last, rel=0.10), (op, x_last, y_last)
        assert p.ops[op].curve(x_last / 2) == raw.ops[op].curve(x_last / 2)  # inside the data: unchanged
        raw_off.append(abs(raw.ops[op].curve(2 * x_last) / (2 * y_last) - 1))
    assert p.meta["extended_in_proportion"] and "all_reduce" in p.meta["extended_in_proportion"]
    # what it replaces: the raw grid's last-segment slope misses this check (measured: 5.3x for the TP2
    # QKV GEMM, 0.5x for every TP8 GEMM)
    assert max(raw_off) > 0.10, raw_off


def test_eager_launch_options_are_refused_with_other_hosts_and_checked(shared_data):
    root = shared_data / "profiles" / "h100-kernel-microbench"
    for kw, field in ((dict(host="graphs", call_s=2e-5), "call_s"), (dict(host="none", calls_per_layer=12),
                                                                     "calls_per_layer"),
                      (dict(host="eager", host_terms={"step_s": 0.0, "per_seq_s": 0.0, "prefill_s": 0.0}),
                       "host_terms"),
                      (dict(host="eager-launch", call_s=2e-5, host_terms={"step_s": 1e-3}), "host_terms"),
                      (dict(host="eager-launch", call_s=2e-5,
                            host_terms={"step_s": 1e-3, "per_seq_s": -1.0, "prefill_s": 0.0}), "host_terms.per_seq_s")):
        with pytest.raises(ConfigError, match=f"^{field}:"):
            import_profile("h100-microbench", "H100", "llama-2-70b", 8, data_dir=root, **kw)


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200", "A100-80G", "B200", "GB200", "L40S", "RTX-PRO-6000"])
def test_every_gpu_with_vllm_tables_imports_within_its_own_memory_bounds(gpu):
    """Each catalog GPU aiconfigurator has vLLM tables for: a decode step's GEMM and attention read
    their bytes no faster than that GPU's HBM (the catalog's datasheet figure) and not 6x slower."""
    pytest.importorskip("aiconfigurator_core", reason="the aiconfigurator extra is not installed")
    from calibrate.importers.aiconfigurator import system_of
    from specs import get_gpu

    bandwidth = get_gpu(gpu).hbm_bandwidth
    profile = import_profile("aiconfigurator", gpu, "llama-3-8b", 1, host="none")
    qkv_bytes = 4096 * (32 + 2 * 8) * 128 * 2  # one layer's fused QKV weights, bf16
    kv_bytes = 64 * 2048 * 2 * 8 * 128 * 2  # 64 sequences x 2048 tokens of one layer's K and V
    for t, floor in ((profile.ops["qkv_proj"].curve(1), qkv_bytes / bandwidth),
                     (profile.ops["attn_decode"].curve(64, 2048), kv_bytes / bandwidth)):
        assert floor <= t < 6 * floor, (gpu, t, floor)
    assert system_of(gpu) == system_of(get_gpu(gpu).name)  # the catalog's spelling and a run's agree
    with pytest.raises(ConfigError, match="^gpu: 'A100-40G' is not allowed"):  # less bandwidth than the tables' card
        system_of("A100-40G")

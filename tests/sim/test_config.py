"""load_config / config_to_toml: sections, overrides, unknown keys, round trips."""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import ConfigError
from sim.config import (Config, _toml_value, apply_override, config_to_toml, load_config, parse_value,
                        section_types)


def test_sections_and_overrides_build_a_frozen_config():
    cfg = load_config({"scheduler": {"policy": "chunked", "max_num_batched_tokens": 512}},
                      ["scheduler.policy=continuous", "workload.rate=2.5", "hardware.tp=2", "slo.ttft_s=0.5"])
    assert cfg.scheduler.policy == "continuous"
    assert cfg.scheduler.max_num_batched_tokens == 512  # untouched by the overrides
    assert cfg.workload.rate == 2.5 and isinstance(cfg.workload.rate, float)
    assert cfg.hardware.tp == 2 and cfg.slo.ttft_s == 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.scheduler = None


def test_override_values_parse_as_toml_scalars():
    assert parse_value("512") == 512
    assert parse_value("0.25") == 0.25
    assert parse_value("true") is True
    assert parse_value('"x y"') == "x y"
    assert parse_value("chunked") == "chunked"  # a bare word is a string
    assert parse_value("[1, 2]") == [1, 2]
    data = {}
    apply_override(data, "workload.prompt_len.kind=uniform")
    assert data == {"workload": {"prompt_len": {"kind": "uniform"}}}


@pytest.mark.parametrize("source, overrides, field", [
    ({"bogus": {}}, [], "bogus"),
    ({}, ["scheduler.polcy=chunked"], "scheduler.polcy"),
    ({}, ["scheduler.policy=fastest"], "scheduler.policy"),
    ({}, ["workload.rate=-1"], "workload.rate"),
    ({}, ["hardware.gpu=TPU9"], "hardware.gpu"),
    ({}, ["sim.max_sim_time_s=0"], "sim.max_sim_time_s"),
    ({}, ["cache.block_size=0"], "cache.block_size"),
    ({}, ["noequals"], "--set"),
    ({}, ["scheduler=3"], "--set"),
    ({"scheduler": 3}, [], "scheduler"),
    # vLLM v1's null block: the key the user set, not the block manager's cache.num_gpu_blocks
    ({}, ["scheduler.policy=vllm", "hardware.num_gpu_blocks=1"], "hardware.num_gpu_blocks"),
])
def test_bad_input_names_the_field(source, overrides, field):
    with pytest.raises(ValueError) as info:
        load_config(source, overrides)
    message = str(info.value)
    assert message.startswith(field), message
    assert "\n" not in message


@pytest.mark.parametrize("override", [
    "workload.rate=nan", "workload.rate=inf", "workload.rate=1e400", "sim.max_sim_time_s=nan",
    "sim.max_sim_time_s=inf", "workload.duration=nan", "slo.ttft_s=nan", "slo.ttft_s=inf", "workload.think_time=nan",
    "hardware.gpu_memory_utilization=nan", "cache.watermark=nan", "hardware.swap_space_gb=nan",
    "hardware.price_per_hour=inf", "cache.offload_size_gb=inf",
])
def test_nan_and_infinity_are_refused_naming_the_field(override):
    """NaN passed every bound and ran as nothing (a NaN rate: no requests, exit 0) or failed far away
    ("cannot convert float NaN to integer"); infinity is no rate, duration, size or price."""
    field, value = override.split("=")
    with pytest.raises(ConfigError) as info:
        load_config({}, [override])
    said = "nan" if value == "nan" else "inf"
    assert str(info.value).startswith(f"{field}: expected a") and said in str(info.value), str(info.value)


def test_nan_in_a_toml_file_is_refused_as_from_the_command_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[workload]\nrate = nan\n")
    with pytest.raises(ConfigError, match=r"^workload\.rate: expected a number, got nan$"):
        load_config(path)


def test_an_infinite_time_limit_is_refused_saying_how_to_have_none():
    with pytest.raises(ConfigError, match=r"^sim\.max_sim_time_s: .*got inf \(leave it unset to run until every"):
        load_config({}, ["sim.max_sim_time_s=inf"])


@pytest.mark.parametrize("override, said", [
    ("workload.num_requests=99999999999999999999", r"^workload\.num_requests: must be <= 100,000,000"),
    ("cluster.num_replicas=99999999999", r"^cluster\.num_replicas: must be <= 10,000"),  # hung building them
    ("hardware.num_gpu_blocks=99999999999999", r"^hardware\.num_gpu_blocks: must be <= 10,000,000"),  # MemoryError
    ("slo.ttft_s=inf", r"^slo\.ttft_s: expected a finite number, got inf \(leave it out for no target\)$"),
    ("workload.stages=5", r"^workload\.stages: expected a list of \[rate, duration\] pairs, .*got 5$"),
    ("workload.classes=foo", r"^workload\.classes: expected a list of tables, .*got 'foo'$"),
])
def test_wrong_shapes_and_huge_counts_are_refused_naming_the_field(override, said):
    """These ended in numpy's "Maximum allowed dimension exceeded" or "'int' object is not iterable"."""
    with pytest.raises(ConfigError, match=said):
        load_config({}, [override])


def test_unknown_key_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match="allowed keys: .*max_num_batched_tokens"):
        load_config({"scheduler": {"budget": 3}})
    with pytest.raises(ConfigError, match="allowed sections: model, hardware, scheduler"):
        load_config({"schedular": {}})


@pytest.mark.parametrize("section", list(section_types()))
def test_every_sections_unknown_key_names_the_section_the_key_and_the_sections_own_fields(section):
    cls = section_types()[section]
    allowed = [f.name for f in dataclasses.fields(cls) if f.init]
    with pytest.raises(ConfigError) as info:
        load_config({section: {"no_such_key": 1}})
    assert str(info.value) == f"{section}.no_such_key: unknown key; allowed keys: {', '.join(allowed)}"


def test_max_model_len_defaults_to_the_models_context_unless_given():
    assert load_config({"model": {"name": "Llama-3-8B"}}).scheduler.max_model_len == 8192
    assert load_config({"model": {"name": "Llama-2-7B"}}).scheduler.max_model_len == 4096
    assert load_config({"model": {"name": "Llama-3-8B"}, "scheduler": {"max_model_len": 2048}}) \
        .scheduler.max_model_len == 2048


def test_toml_round_trip_gives_an_equal_config(tmp_path):
    cfg = load_config({
        "model": {"name": "Mistral-7B"},
        "hardware": {"gpu": "A100-80G", "swap_space_gb": 4.0},
        "scheduler": {"policy": "chunked", "preemption": "swap", "queue": "priority"},
        "cache": {"enable_prefix_caching": True},
        "workload": {"kind": "gamma", "rate": 3.0, "cv": 2.0, "num_requests": 50,
                     "prompt_len": {"kind": "lognormal", "median": 300, "sigma": 0.5, "max": 2000},
                     "classes": [{"name": "chat", "priority": 0, "fraction": 0.75},
                                 {"name": "batch", "priority": 1, "fraction": 0.25}]},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
        "sim": {"max_sim_time_s": 100.0},
    })
    text = config_to_toml(cfg)
    assert load_config(tomllib.loads(text)) == cfg
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert load_config(path) == cfg


def test_relative_trace_paths_are_relative_to_the_config_file(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_time,prompt_tokens,output_tokens\n0.0,10,5\n")
    (tmp_path / "c.toml").write_text('[workload]\ntrace = "t.csv"\n')
    cfg = load_config(tmp_path / "c.toml")
    assert cfg.workload.trace == str(tmp_path / "t.csv")


def test_file_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="^config: file not found"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[scheduler\npolicy=")
    with pytest.raises(ConfigError, match="^config: .* is not valid TOML"):
        load_config(bad)


def test_defaults_fill_every_section():
    cfg = Config()
    assert cfg.model is not None and cfg.hardware is not None and cfg.workload is not None
    assert dataclasses.replace(cfg, scheduler=dataclasses.replace(cfg.scheduler, policy="static")) \
        .scheduler.policy == "static"


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.booleans(),
                 st.lists(st.integers(-5, 5), max_size=4), st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
                                                                       st.text(max_size=5), max_size=3)))
def test_toml_writer_round_trips_values(value):
    assert tomllib.loads(f"v = {_toml_value(value)}")["v"] == value


def test_values_python_code_hands_over_are_read_as_a_toml_file_would_hold_them(tmp_path):
    """numpy scalars (a pandas cell) and paths: accepted, and written back as TOML that loads again."""
    row = pd.DataFrame({"rate": [5], "seqs": [64]}).iloc[0]
    repo = Path(__file__).resolve().parents[2]
    config = load_config({"model": {"name": repo / "examples" / "tiny-llama" / "config.json"},
                          "workload": {"rate": row["rate"], "num_requests": np.int32(20), "cv": np.float64(1.5)},
                          "scheduler": {"max_num_seqs": row["seqs"]},
                          "hardware": {"gpu_memory_utilization": np.float32(0.5)}})
    assert config.workload.rate == 5 and config.scheduler.max_num_seqs == 64 and config.model.name.endswith("config.json")
    path = tmp_path / "c.toml"
    path.write_text(config_to_toml(config))
    assert "np." not in path.read_text() and load_config(path).workload == config.workload


@pytest.mark.parametrize("source, overrides, said", [
    (None, (), r"^config: expected a TOML file's path or a dict of sections, got NoneType$"),
    ({}, "workload.rate=5", r"^overrides: expected a list of 'section.key=value' strings, got one string"),
    ({"workload": {"classes": [{"priority": 0, "fraction": 1.0}]}}, (), r"^workload\.classes\[0\]\.name: required$"),
    ({"workload": {"prompt_len": {"kind": "constant", "value": 5, "field": "x"}}}, (),
     r"^workload\.prompt_len\.field: unknown key; allowed keys are high, kind, low, max, mean, median, min, path, "
     r"sigma, value$"),
])
def test_what_python_code_gets_wrong_is_one_line_naming_it(source, overrides, said):
    with pytest.raises(ConfigError, match=said):
        load_config(source, overrides)

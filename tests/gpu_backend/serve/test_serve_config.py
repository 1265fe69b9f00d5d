"""The [serve] section and the serve TOML split: paths relative to the file, errors naming the field."""
from __future__ import annotations

import pytest

from gpu_backend.serve.config import build_serve_config
from servesim.commands.serve import split_serve_section
from policies import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return path


def test_split_makes_paths_relative_to_the_file(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    path = write(tmp_path, '[model]\nname = "m/config.json"\n[serve]\ntokenizer = "m"\nmax_num_waiting = 7\n')
    data, serve, base = split_serve_section(path)
    assert "serve" not in data and data["model"]["name"] == str(tmp_path / "m" / "config.json")
    assert serve.tokenizer == str(tmp_path / "m") and serve.max_num_waiting == 7


@pytest.mark.parametrize("values, field", [
    ({"max_num_waiting": 0}, "serve.max_num_waiting"),
    ({"max_num_waiting": "many"}, "serve.max_num_waiting"),
    ({"retry_after_s": -1}, "serve.retry_after_s"),
    ({"model_name": ""}, "serve.model_name"),
    ({"tokenizer": 3}, "serve.tokenizer"),
    ({"port": 80}, "serve.port"),
])
def test_bad_serve_values_name_the_field(values, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        build_serve_config(values)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="^config: file not found"):
        split_serve_section(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="^config: .* is not valid TOML"):
        split_serve_section(write(tmp_path, "[serve\n"))


def test_cli_reports_config_errors_in_one_line_and_exits_2(tmp_path, capsys):
    pytest.importorskip("torch")
    from servesim.cli import main

    path = write(tmp_path, '[model]\nname = "nope/config.json"\n[serve]\nmax_num_waiting = -1\n')
    assert main(["serve", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "serve.max_num_waiting" in err[0]


def test_an_unknown_serve_key_is_named_with_the_allowed_keys(tmp_path):
    from dataclasses import fields

    from gpu_backend.serve.config import ServeConfig

    allowed = ", ".join(f.name for f in fields(ServeConfig))
    with pytest.raises(ConfigError) as info:
        build_serve_config({"model_name": "m", "max_waiting": 3})
    assert str(info.value) == f"serve.max_waiting: unknown key; allowed keys: {allowed}"
    with pytest.raises(ConfigError, match=r"^serve\.port: unknown key; allowed keys: model_name, "):
        split_serve_section(write(tmp_path, '[serve]\nport = 8000\n'))

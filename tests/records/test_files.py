"""records.files.read_json_object and write_json: the JSON-file reader (every failure one line naming the field) and writer."""
from __future__ import annotations

import json

import pytest

from policies import ConfigError
from records.files import iter_json_lines, read_json, read_json_lines, read_json_object, write_content_file, write_json


def write(tmp_path, data: bytes | str, name: str = "x.json"):
    path = tmp_path / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def one_line_error(exc_info, field: str) -> str:
    """The message, checked to be one line starting with `field: `."""
    msg = str(exc_info.value)
    assert msg.startswith(f"{field}: ") and "\n" not in msg, msg
    return msg


def test_a_json_object_reads_back_as_the_dict_written(tmp_path):
    data = {"format": "x", "n": 3, "nested": {"a": [1, 2.5, None, True]}, "text": "ü€"}
    assert read_json_object(write(tmp_path, json.dumps(data, ensure_ascii=False)), "f") == data
    assert read_json_object(str(write(tmp_path, "{}", "empty.json")), "f") == {}  # a str path works too


def test_a_missing_file_raises_the_callers_exception_type_naming_field_and_path(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        read_json_object(path, "model.name")
    assert str(path) in one_line_error(info, "model.name")
    with pytest.raises(FileNotFoundError) as info:
        read_json_object(path, "profile", missing=FileNotFoundError)
    assert not isinstance(info.value, ValueError)  # exactly the type asked for
    assert str(path) in one_line_error(info, "profile")


@pytest.mark.parametrize("text", ["{not json", '{"a": 1,}', "", '{"a": 1} trailing'])
def test_invalid_json_is_one_line_naming_field_and_path(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_json_object(path, "frontend profile")
    msg = one_line_error(info, "frontend profile")
    assert str(path) in msg and "not valid JSON" in msg


def test_any_json_value_reads_and_an_empty_file_says_so(tmp_path):
    assert read_json(write(tmp_path, "[1, 2]"), "f") == [1, 2]
    with pytest.raises(ConfigError) as info:
        read_json(write(tmp_path, "  \n"), "inference-perf summary")
    assert one_line_error(info, "inference-perf summary").endswith("is not valid JSON (the file is empty)")


def test_json_lines_read_one_object_a_line_and_a_bad_line_is_named(tmp_path):
    assert read_json_lines(write(tmp_path, '{"a": 1}\n\n{"a": 2}\n', "r.jsonl"), "f") == [{"a": 1}, {"a": 2}]
    for text, what in (('{"a": 1}\n{"a": ', "line 2 is not valid JSON"), ('{"a": 1}\n[1]\n', "line 2 does not hold")):
        path = write(tmp_path, text, "r.jsonl")
        with pytest.raises(ConfigError) as info:
            read_json_lines(path, "requests")
        assert f"{path} {what}" in one_line_error(info, "requests")


def test_json_lines_allow_a_bom_and_refuse_another_encoding_naming_the_file(tmp_path):
    path = write(tmp_path, b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n', "bom.jsonl")  # as Windows tools save UTF-8
    assert [n for n, _ in iter_json_lines(path, "f")] == [1, 2]
    path = write(tmp_path, '{"a": 1}\n{"b": "caf\u00e9"}\n'.encode("latin-1"), "latin1.jsonl")
    with pytest.raises(ConfigError) as info:
        read_json_lines(path, "workload.trace")
    assert one_line_error(info, "workload.trace").endswith(f"{path} is not UTF-8 text (invalid continuation byte); "
                                                             "save it as UTF-8")


def test_json_lines_are_read_as_they_go(tmp_path):
    """The first object comes before a later bad line is reached: a big trace is never one string."""
    lines = iter_json_lines(write(tmp_path, '{"a": 1}\n{cut\n', "r.jsonl"), "f")
    assert next(lines) == (1, {"a": 1})
    with pytest.raises(ConfigError, match="line 2 is not valid JSON"):
        next(lines)


def test_bad_utf8_is_a_config_error_not_a_unicode_error(tmp_path):
    path = write(tmp_path, b'{"name": "\xff\xfe"}')
    with pytest.raises(ConfigError) as info:
        read_json_object(path, "serve.tokenizer")
    msg = one_line_error(info, "serve.tokenizer")
    assert "not valid JSON" in msg and "UTF-8" in msg


@pytest.mark.parametrize("text, kind", [("[1, 2]", "an array"), ('"s"', "a string"), ("3.5", "a number"),
                                        ("null", "null"), ("true", "a boolean")])
def test_a_top_level_that_is_not_an_object_is_refused_saying_what_it_is(tmp_path, text, kind):
    with pytest.raises(ConfigError) as info:
        read_json_object(write(tmp_path, text), "model.config")
    msg = one_line_error(info, "model.config")
    assert "does not hold a JSON object" in msg and msg.endswith(f"(its top level is {kind})")


def test_a_directory_is_a_config_error_even_when_missing_is_file_not_found(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_json_object(tmp_path, "profile", missing=FileNotFoundError)
    assert str(tmp_path) in one_line_error(info, "profile")


def test_write_json_makes_the_folder_and_reads_back(tmp_path):
    from pathlib import PurePath

    data = {"name": "Llama-3.1-8B", "a": [1, 2.5, None], "ünï": {"x": True}, "when": PurePath("w")}
    path = write_json(tmp_path / "new" / "deeper" / "f.json", data, default=str)
    assert path.read_text(encoding="utf-8").endswith("}\n")
    assert read_json_object(path, "f") == {**data, "when": "w"}
    with pytest.raises(TypeError):  # without a default, what JSON cannot hold is an error, not a silent str()
        write_json(tmp_path / "g.json", {"when": PurePath("w")})


def test_a_summary_is_written_with_nan_as_null_and_numpy_scalars_as_numbers(tmp_path):
    import numpy as np

    from records.files import write_summary

    path = write_summary(tmp_path / "run" / "summary.json",
                         {"a": float("nan"), "b": np.int64(3), "c": (np.float32(0.5), float("-inf"))})
    assert path.read_text() == '{\n  "a": null,\n  "b": 3,\n  "c": [\n    0.5,\n    null\n  ]\n}\n'
    with pytest.raises(TypeError, match="not JSON serializable: complex"):
        write_summary(tmp_path / "bad.json", {"z": 1j})


def test_a_content_file_is_named_by_its_content_and_written_once(tmp_path):
    folder = tmp_path / "made"
    first = write_content_file(folder, "profile-a-", b'{"rate": 1}')
    assert first.parent == folder and first.name.startswith("profile-a-") and first.suffix == ".json"
    assert first.read_bytes() == b'{"rate": 1}'
    mtime = first.stat().st_mtime_ns
    assert write_content_file(folder, "profile-a-", b'{"rate": 1}') == first and first.stat().st_mtime_ns == mtime
    other = write_content_file(folder, "profile-a-", b'{"rate": 2}', ".csv")
    assert other != first and other.suffix == ".csv" and sorted(p.name for p in folder.iterdir()) == sorted(
        [first.name, other.name])  # no temporary file left behind

"""Request bodies: what parses, and for each malformed field a 400 naming that field."""
from __future__ import annotations

import pytest

from gpu_backend.serve.protocol import RequestError, parse_request


def body(**overrides) -> dict:
    return {"model": "tiny-llama", "prompt": "hi", **overrides}


def test_defaults_and_fields():
    p = parse_request(body(max_tokens=7, temperature=0, top_p=0.5, seed=3, stop="x", ignore_eos=True, stream=True,
                           stream_options={"include_usage": True}, priority=-2, user="ignored"), chat=False)
    assert (p.max_tokens, p.temperature, p.top_p, p.seed, p.stop, p.ignore_eos, p.stream, p.include_usage,
            p.priority) == (7, 0.0, 0.5, 3, ("x",), True, True, True, -2)
    assert parse_request(body(), chat=False).max_tokens is None
    # a priority is recorded in the engine's tables: any 64-bit integer, no more (Parquet refused 2**70)
    assert parse_request(body(priority=-2**63), chat=False).priority == -2**63
    # stream_options without a stream: refused as OpenAI and vLLM do, unless empty
    assert parse_request(body(stream_options={}), chat=False).stream is False


@pytest.mark.parametrize("seed", [0, 7, -5, -2**63, 2**63 - 1])
def test_any_64_bit_seed_is_taken_as_vllm_takes_it(seed):
    """vLLM's OpenAI protocol bounds seed to torch.long (vllm-project/vllm#4529), negatives included."""
    assert parse_request(body(seed=seed), chat=False).seed == seed


def test_seed_minus_one_is_no_seed_as_in_vllm():
    assert parse_request(body(seed=-1), chat=False).seed is None


def test_a_seed_outside_64_bits_names_the_range():
    with pytest.raises(RequestError, match=r"^seed: must be a 64-bit integer, in \[-2\*\*63, 2\*\*63 - 1\]"):
        parse_request(body(seed=2**64), chat=False)


def test_chat_messages_with_text_parts():
    p = parse_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}],
                       "max_completion_tokens": 4}, chat=True)
    assert p.messages == ({"role": "user", "content": "ab"},) and p.max_tokens == 4 and p.is_chat


@pytest.mark.parametrize("payload, field", [
    ([1, 2], "body"),
    ({"prompt": None}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, -1]}, "prompt"),
    (body(max_tokens="10"), "max_tokens"),
    (body(max_tokens=0), "max_tokens"),
    (body(max_tokens=1.5), "max_tokens"),
    (body(max_tokens=True), "max_tokens"),
    (body(temperature="hot"), "temperature"),
    (body(temperature=-1), "temperature"),
    (body(temperature=float("nan")), "temperature"),
    (body(top_p=0), "top_p"),
    (body(top_p=1.5), "top_p"),
    (body(seed=2**63), "seed"),
    (body(seed=-2**63 - 1), "seed"),
    (body(seed="s"), "seed"),
    (body(seed=1.5), "seed"),
    (body(priority=-2**63 - 1), "priority"),
    (body(priority=2**70), "priority"),
    (body(stop=[1]), "stop"),
    (body(stop=["x"] * 100), "stop"),
    (body(ignore_eos="yes"), "ignore_eos"),
    (body(stream=1), "stream"),
    (body(stream_options=[]), "stream_options"),
    (body(stream_options={"include_usage": True}), "stream_options"),
    (body(stream=False, stream_options={"include_usage": False}), "stream_options"),
    (body(stream=True, stream_options={"include_usage": "y"}), "stream_options.include_usage"),
    (body(priority="high"), "priority"),
    (body(n=2), "n"),
    (body(logprobs=5), "logprobs"),
    (body(model=3), "model"),
])
def test_bad_completion_field_is_named(payload, field):
    with pytest.raises(RequestError) as info:
        parse_request(payload, chat=False)
    assert info.value.field == field and str(info.value).startswith(f"{field}: ") and info.value.status == 400


@pytest.mark.parametrize("field, value", [
    ("min_tokens", 8), ("top_k", 20), ("min_p", 0.1), ("repetition_penalty", 1.2), ("presence_penalty", 0.5),
    ("frequency_penalty", True), ("logit_bias", {"50256": -100}), ("response_format", {"type": "json_object"}),
    ("tools", [{"type": "function"}]), ("tool_choice", "required"), ("top_logprobs", 3), ("use_beam_search", True),
    ("guided_json", {}), ("truncate_prompt_tokens", 10),
])
def test_a_field_that_would_change_the_output_is_refused_unless_neutral(field, value):
    """Silently dropped, a client's min_tokens or penalties would measure other lengths than it asked for."""
    with pytest.raises(RequestError) as info:
        parse_request(body(**{field: value}), chat=False)
    assert info.value.field == field and "not supported" in str(info.value) and info.value.status == 400


def test_neutral_values_of_unhonoured_fields_pass():
    neutral = dict(min_tokens=0, top_k=-1, min_p=0.0, repetition_penalty=1.0, presence_penalty=0,
                   frequency_penalty=0.0, logit_bias={}, response_format={"type": "text"}, tools=[],
                   tool_choice="none", top_logprobs=None, use_beam_search=False, user="u")
    assert parse_request(body(**neutral), chat=False).prompt == "hi"
    # min_tokens under ignore_eos with nothing else to stop on: the output is max_tokens long anyway
    assert parse_request(body(min_tokens=8, max_tokens=8, ignore_eos=True), chat=False).max_tokens == 8
    for stop in (dict(stop="x"), dict(stop_token_ids=[2])):
        with pytest.raises(RequestError, match="^min_tokens: "):
            parse_request(body(min_tokens=8, ignore_eos=True, **stop), chat=False)


@pytest.mark.parametrize("payload, field", [
    ({"prompt": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": ["hi"]}, "messages[0]"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3}, "max_completion_tokens"),
])
def test_bad_chat_field_is_named(payload, field):
    with pytest.raises(RequestError) as info:
        parse_request(payload, chat=True)
    assert info.value.field == field

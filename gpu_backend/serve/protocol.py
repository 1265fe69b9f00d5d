"""The OpenAI request bodies the server accepts, parsed and validated into `CompletionParams`.

Each check raises `RequestError` whose message starts with the offending field, so the client sees
one clear line (HTTP 400). Fields that change nothing generated (`user`, `metadata`, ...) are
ignored, as OpenAI-compatible servers do; fields that would change what is generated and that the
engine cannot honour (`n` > 1, `best_of`, `logprobs`, and `UNHONOURED`'s: penalties, `top_k`,
`min_tokens`, tools, ...) are refused unless they hold their neutral value, rather than silently
dropped: a client's run would otherwise measure other output lengths or texts than it asked for.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_STOP_STRINGS = 16
INT64 = (-2**63, 2**63 - 1)  # a priority is recorded in the engine's tables (Parquet: int64 columns)
# vLLM's "no seed" (its SamplingParams turns seed -1 into None: unseeded, a fresh draw each time)
UNSEEDED = -1
ROLES = ("system", "user", "assistant", "tool", "developer")


# fields of OpenAI's API and vLLM's extensions the engine cannot honour -> the values that ask for nothing
UNHONOURED = {
    "min_tokens": (None, 0), "top_k": (None, 0, -1), "min_p": (None, 0), "repetition_penalty": (None, 1),
    "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "logit_bias": (None, {}),
    "top_logprobs": (None, 0), "prompt_logprobs": (None, 0), "use_beam_search": (None, False),
    "length_penalty": (None, 1), "truncate_prompt_tokens": (None,), "bad_words": (None, []),
    "allowed_token_ids": (None,), "response_format": (None, {"type": "text"}), "tools": (None, []),
    "tool_choice": (None, "none", "auto"), "functions": (None, []), "function_call": (None, "none", "auto"),
    "guided_json": (None,), "guided_regex": (None,), "guided_choice": (None,), "guided_grammar": (None,),
    "structured_outputs": (None,),
}


class RequestError(ValueError):
    """A request body is malformed; `field` names the field and `status` the HTTP code."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.status = status


@dataclass(frozen=True)
class CompletionParams:
    """One validated completion request (chat requests carry `messages`, others `prompt`)."""

    prompt: str | list[int] | None
    messages: tuple[dict, ...] | None
    max_tokens: int | None  # None: up to the model length
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # vLLM's continuous_usage_stats with include_usage: usage in every chunk
    priority: int = 0
    model: str | None = None

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


def _typed(body: dict, field: str, types: tuple, default, what: str):
    value = body.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in types:
        raise RequestError(field, f"expected {what}, got {value!r}")
    if not isinstance(value, types):
        raise RequestError(field, f"expected {what}, got {_short(value)}")
    return value


def _same(value: object, neutral: object) -> bool:
    """`value` is `neutral` as JSON means it: numbers by value (1 == 1.0), a boolean only itself
    (Python's True == 1 would pass a JSON true as a neutral penalty of 1)."""
    if isinstance(value, bool) or isinstance(neutral, bool):
        return value is neutral
    if isinstance(neutral, (int, float)):
        return isinstance(value, (int, float)) and value == neutral
    return value == neutral


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(body: dict, field: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    value = float(_typed(body, field, (int, float), default, "a number"))
    if value != value or value < lo or value > hi or (lo_open and value == lo):  # NaN fails too
        raise RequestError(field, f"must be in {'(' if lo_open else '['}{lo}, {hi}], got {value}")
    return value


def _int(body: dict, field: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    value = _typed(body, field, (int,), default, "an integer")
    if value is not None and lo is not None and value < lo:
        raise RequestError(field, f"must be >= {lo}, got {_short(value)}")
    if value is not None and hi is not None and value > hi:
        raise RequestError(field, f"must be <= {hi}, got {_short(value)}")
    return value


def _seed(body: dict) -> int | None:
    """The sampling seed: any 64-bit integer, as vLLM's OpenAI server takes it (its protocol bounds
    `seed` to torch.long since v0.4.2, vllm-project/vllm#4529); -1 means none, as in vLLM."""
    value = _typed(body, "seed", (int,), None, "an integer")
    if value is not None and not INT64[0] <= value <= INT64[1]:
        raise RequestError("seed", f"must be a 64-bit integer, in [-2**63, 2**63 - 1] (-1: no seed), got {_short(value)}")
    return None if value == UNSEEDED else value


def _prompt(body: dict) -> str | list[int]:
    if "prompt" not in body or body["prompt"] is None:
        raise RequestError("prompt", "is required (a string or a list of token ids)")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise RequestError("prompt", "must not be empty")
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if min(prompt) < 0:
            raise RequestError("prompt", "token ids must be >= 0")
        return list(prompt)
    raise RequestError("prompt", f"expected a non-empty string or list of token ids (one prompt per request), got {_short(prompt)}")


def _messages(body: dict) -> tuple[dict, ...]:
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages", f"expected a non-empty list of messages, got {_short(messages)}")
    out = []
    for i, m in enumerate(messages):
        field = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(field, f"expected an object with role and content, got {_short(m)}")
        role = m.get("role")
        if role not in ROLES:
            raise RequestError(f"{field}.role", f"{role!r} is not allowed; choose one of {', '.join(ROLES)}")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only text is understood
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise RequestError(f"{field}.content[{j}]", "only {\"type\": \"text\", \"text\": ...} parts are supported")
                parts.append(part["text"])
            content = "".join(parts)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise RequestError(f"{field}.content", f"expected a string, got {_short(content)}")
        out.append({"role": role, "content": content})
    return tuple(out)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError("stop", f"expected a string or a list of strings, got {_short(stop)}")
    if len(stop) > MAX_STOP_STRINGS:
        raise RequestError("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(stop)}")
    return tuple(s for s in stop if s)


def parse_request(body: object, chat: bool) -> CompletionParams:
    """Validate a decoded JSON body of /v1/completions (`chat=False`) or /v1/chat/completions."""
    if not isinstance(body, dict):
        raise RequestError("body", f"expected a JSON object, got {type(body).__name__}")
    if chat:
        if "messages" not in body:
            raise RequestError("messages", "is required for /v1/chat/completions")
        messages, prompt = _messages(body), None
    else:
        messages, prompt = None, _prompt(body)
    max_tokens = _int(body, "max_tokens", None, 1)
    if chat and body.get("max_completion_tokens") is not None:
        max_tokens = _int(body, "max_completion_tokens", None, 1)
    n = _int(body, "n", 1, 1)
    if n != 1:
        raise RequestError("n", f"only n=1 is supported, got {n}")
    if _int(body, "best_of", 1, 1) != 1:
        raise RequestError("best_of", "only best_of=1 is supported")
    if body.get("logprobs") not in (None, False, 0):
        raise RequestError("logprobs", "logprobs are not supported")
    if body.get("echo") not in (None, False):
        raise RequestError("echo", "echo is not supported")
    for field, neutral in UNHONOURED.items():
        value = body.get(field)
        if not any(_same(value, v) for v in neutral):
            if field == "min_tokens" and body.get("ignore_eos") is True and not body.get("stop") \
                    and not body.get("stop_token_ids"):
                continue  # nothing can end the output early: min_tokens asks for nothing
            shown = " or ".join("left out" if v is None else _short(v) for v in neutral)
            raise RequestError(field, f"is not supported by this engine (got {_short(value)}); it must be {shown}")
    stream_options = _typed(body, "stream_options", (dict,), {}, "an object")
    stream = _typed(body, "stream", (bool,), False, "true or false")
    if stream_options and not stream:  # as OpenAI and vLLM: options of a stream that is not one
        raise RequestError("stream_options", "only allowed with \"stream\": true")
    include_usage = stream_options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise RequestError("stream_options.include_usage", f"expected true or false, got {_short(include_usage)}")
    continuous_usage = stream_options.get("continuous_usage_stats", False)
    if not isinstance(continuous_usage, bool):
        raise RequestError("stream_options.continuous_usage_stats", f"expected true or false, got {_short(continuous_usage)}")
    stop_token_ids = _typed(body, "stop_token_ids", (list,), [], "a list of token ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in stop_token_ids):
        raise RequestError("stop_token_ids", "expected a list of token ids (integers >= 0)")
    model = _typed(body, "model", (str,), None, "a string")
    return CompletionParams(
        prompt=prompt,
        messages=messages,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=_seed(body),
        stop=_stop(body),
        stop_token_ids=tuple(stop_token_ids),
        ignore_eos=_typed(body, "ignore_eos", (bool,), False, "true or false"),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=include_usage and continuous_usage,  # as vLLM: only with include_usage
        priority=_int(body, "priority", 0, *INT64),
        model=model,
    )

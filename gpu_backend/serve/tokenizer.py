"""Offline tokenization for the server: a local HF `tokenizer.json` plus its chat template.

The server never downloads anything: the config names a local directory holding `tokenizer.json`
(loaded with the `tokenizers` package) and, optionally, `tokenizer_config.json` with the special
tokens and a Jinja `chat_template` (rendered with jinja2, as HF `apply_chat_template` does). Real
benchmark clients load the same directory through `transformers.AutoTokenizer`, so both sides
count tokens the same way.
"""
from __future__ import annotations

from pathlib import Path

from records.files import read_json_object

# Used when the tokenizer directory has no chat template: one turn per message, then the
# assistant's cue. The same text as the template shipped in examples/tiny-llama.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _token_text(value: object) -> str | None:
    """tokenizer_config.json writes special tokens as strings or as {"content": ...} objects."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    """Encode prompts, decode outputs and render chat messages, from a local tokenizer directory."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer  # the serve extra; imported here to keep `sim` light

        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"serve.tokenizer: no tokenizer.json at {file}")
        self.path = file.parent
        self._tok = HFTokenizer.from_file(str(file))
        config_file = self.path / "tokenizer_config.json"
        config = read_json_object(config_file, "serve.tokenizer") if config_file.is_file() else {}
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.bos_token_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_token_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        self.chat_template = config.get("chat_template") or DEFAULT_CHAT_TEMPLATE
        self._template = None  # compiled lazily

    @property
    def vocab_size(self) -> int:
        """Number of token ids, special tokens included (every id is < this)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; with the tokenizer's own post-processor (e.g. a leading BOS)."""
        # encode_batch, not encode: only it lets go of the interpreter lock while the Rust code runs,
        # so the server's event loop and engine thread go on while a long prompt is tokenized
        return self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text for a list of `{"role", "content"}` messages (HF `apply_chat_template` semantics)."""
        if self._template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            self._template = env.from_string(self.chat_template)
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "", eos_token=self.eos_token or "",
        )

"""Incremental detokenization with stop strings, one per streamed request.

Decoding token by token would split multi-byte characters and lose the spaces that byte-level BPE
merges carry, so (as vLLM does) each step decodes a short window `ids[prefix_offset:]` and emits
only the text beyond what the window `ids[prefix_offset:read_offset]` already produced; text that
ends in an incomplete character (U+FFFD) waits for the next token. Stop strings are matched on the
text; while streaming, the last `len(longest stop) - 1` characters are held back so a stop string
split over two tokens is never half-sent. The stop string itself is not returned (OpenAI semantics).
"""
from __future__ import annotations

from gpu_backend.serve.tokenizer import Tokenizer

_WINDOW = 6  # tokens of left context kept to decode the next piece correctly


class IncrementalDetokenizer:
    """Turns a growing list of output token ids into text deltas; notices stop strings."""

    def __init__(self, tokenizer: Tokenizer, stop: list[str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in (stop or []) if s]
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self.token_ids: list[int] = []
        self.text = ""  # all decoded text so far (up to the stop string, once one is found)
        self._sent = 0  # characters of `text` already returned
        self._prefix_offset = 0
        self._read_offset = 0
        self.stopped = False  # a stop string was found; nothing more is produced

    def _decode_new(self, final: bool) -> str:
        ids = self.token_ids
        prefix_text = self.tokenizer.decode(ids[self._prefix_offset:self._read_offset])
        new_text = self.tokenizer.decode(ids[self._prefix_offset:])
        if len(new_text) > len(prefix_text) and (final or not new_text.endswith("\ufffd")):
            self._prefix_offset = max(self._read_offset, len(ids) - _WINDOW)
            self._read_offset = len(ids)
            return new_text[len(prefix_text):]
        return ""

    def add(self, new_token_ids: list[int], final: bool = False) -> str:
        """Feed newly sampled ids; return the text that can be sent now ('' if none yet).

        With `final`, everything left (except a stop string) is flushed. After a stop string is
        found `stopped` is True and later calls return ''.
        """
        if self.stopped:
            return ""
        self.token_ids.extend(new_token_ids)
        start = max(len(self.text) - self._hold, 0)  # a stop string may begin in held-back text
        self.text += self._decode_new(final)
        hits = [at for at in (self.text.find(s, start) for s in self.stop) if at != -1]
        if hits:  # the earliest stop string wins
            self.text = self.text[:min(hits)]
            self.stopped = True
        end = len(self.text) if (final or self.stopped) else max(len(self.text) - self._hold, self._sent)
        delta = self.text[self._sent:end]
        self._sent = end
        return delta

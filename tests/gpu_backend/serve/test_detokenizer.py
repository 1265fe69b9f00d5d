"""Incremental detokenization equals decoding everything at once; stop strings are never half-sent."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_backend.serve.detokenizer import IncrementalDetokenizer

WORDS = ["the", " quick", " brown", " fox", "\n", " naïve", " café", " ✓", " 你好", "(x)", " return", ":"]


def stream(detok, ids, chunk=1):
    """Feed ids `chunk` at a time; return the pieces sent."""
    pieces = []
    for i in range(0, len(ids), chunk):
        part = ids[i:i + chunk]
        pieces.append(detok.add(part, final=i + chunk >= len(ids)))
        if detok.stopped:
            break
    return pieces


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30), st.integers(1, 3))
def test_streamed_text_equals_full_decode(tokenizer, words, chunk):
    ids = tokenizer.encode("".join(words), add_special_tokens=False)
    pieces = stream(IncrementalDetokenizer(tokenizer), ids, chunk)
    assert "".join(pieces) == tokenizer.decode(ids)
    assert not any("\ufffd" in p for p in pieces)  # split multi-byte characters are held, not garbled


def test_random_token_ids_never_lose_text(tokenizer):
    rng = random.Random(0)
    for _ in range(20):
        ids = [rng.randrange(3, tokenizer.vocab_size) for _ in range(40)]
        assert "".join(stream(IncrementalDetokenizer(tokenizer), ids)) == tokenizer.decode(ids)


@pytest.mark.parametrize("stop", [["fox"], [" brown fox"], ["lazy", "quick"], ["zzz", "over the"]])
def test_stop_string_cuts_the_text_and_is_never_sent(tokenizer, stop):
    text = " the quick brown fox jumps over the lazy dog"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, stop)
    pieces = stream(detok, ids)
    first = min(text.find(s) for s in stop if s in text)
    assert detok.stopped
    assert "".join(pieces) == text[:first]


def test_without_a_match_everything_is_flushed_at_the_end(tokenizer):
    ids = tokenizer.encode(" abc def", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, ["a much longer stop string"])
    pieces = stream(detok, ids)
    assert pieces[-1] != "" and "".join(pieces) == " abc def" and not detok.stopped

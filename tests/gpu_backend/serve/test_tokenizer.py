"""The shipped tiny-llama tokenizer: fits the model, round-trips text, agrees with transformers."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from gpu_backend.serve.tokenizer import Tokenizer

TEXTS = ["def f(x):\n    return x + 1\n", "Hello, world! The quick brown fox.", "naïve café — ✓ 你好", "  spaces\t\ttabs\n\n"]


def test_vocab_fits_the_tiny_model(tokenizer):
    config = json.loads((Path(tokenizer.path) / "config.json").read_text())
    assert tokenizer.vocab_size == config["vocab_size"]
    assert tokenizer.bos_token_id == config["bos_token_id"]
    assert tokenizer.eos_token_id == config["eos_token_id"]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_and_leading_bos(tokenizer, text):
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id and tokenizer.bos_token_id not in ids[1:]
    assert all(0 <= t < tokenizer.vocab_size for t in ids)
    assert tokenizer.decode(ids) == text


def test_compresses_the_kind_of_text_it_was_trained_on(tokenizer):
    code = "import os\nfrom pathlib import Path\n\ndef main(argv):\n    return 0\n" * 4
    assert len(tokenizer.encode(code)) < len(code.encode()) / 2.5  # a real BPE, not bytes


@pytest.mark.parametrize("text", TEXTS)
def test_transformers_counts_tokens_the_same_way(tokenizer, text):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tokenizer.path))
    assert hf(text)["input_ids"] == tokenizer.encode(text)


def test_chat_template_matches_transformers(tokenizer):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tokenizer.path))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}]
    ours = tokenizer.apply_chat_template(messages)
    assert ours == hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.endswith("<|assistant|>\n") and ours.count("</s>") == len(messages)


def test_missing_directory_names_the_field(tmp_path):
    with pytest.raises(FileNotFoundError, match="^serve.tokenizer"):
        Tokenizer(tmp_path)


def test_training_gives_the_asked_vocab(tmp_path):
    from gpu_backend.serve.train_tokenizer import train

    train(tmp_path, vocab_size=300, max_bytes=200_000)
    tok = Tokenizer(tmp_path)
    assert tok.vocab_size == 300
    assert tok.decode(tok.encode("any text at all: ü")) == "any text at all: ü"  # byte-level: nothing is unknown
    with pytest.raises(ValueError, match="^vocab_size"):
        train(tmp_path, vocab_size=100)


def test_a_broken_tokenizer_config_is_one_error_naming_serve_tokenizer(tokenizer, tmp_path):
    import shutil

    shutil.copy(Path(tokenizer.path) / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"^serve\.tokenizer: .*tokenizer_config\.json is not valid JSON"):
        Tokenizer(tmp_path)


def test_encoding_lets_other_threads_run(tokenizer):
    """The server tokenizes on a worker thread so that its event loop and engine go on: the
    tokenizer must let go of the interpreter lock meanwhile (`encode` of tokenizers holds it for
    the whole text, 1.5 s for 1 MB; `encode_batch` does not)."""
    text = "def f(x):\n    return x + 1\n" * 12_000  # ~0.3 MB, 0.5 s
    worker = threading.Thread(target=tokenizer.encode, args=(text,))
    gaps, last = [], time.perf_counter()
    worker.start()
    while worker.is_alive():
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    worker.join()
    assert max(gaps) < 0.5 * sum(gaps), (max(gaps), sum(gaps))

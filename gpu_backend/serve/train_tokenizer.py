"""Build the tiny example model's tokenizer: a byte-level BPE trained offline on local text.

    python -m gpu_backend.serve.train_tokenizer examples/tiny-llama [--vocab-size N] [--mb 4]

The corpus is this Python's own standard library sources (always on disk, no download), read in
sorted order so the result is reproducible on one Python version. The vocabulary size defaults to
the model's `vocab_size` in `<dir>/config.json`, so every token id is a valid embedding row. Writes
`tokenizer.json` (Llama-style specials: <unk>=0, <s>=1, </s>=2; a BOS is prepended on encode) and
`tokenizer_config.json` (special tokens and the chat template) for `transformers.AutoTokenizer`.
"""
from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

from gpu_backend.serve.tokenizer import DEFAULT_CHAT_TEMPLATE
from records.files import read_json_object, write_json

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]


def corpus(max_bytes: int) -> list[str]:
    """Standard-library Python sources, sorted by path, up to about `max_bytes`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts or "tests" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return texts


def train(out_dir: Path, vocab_size: int, max_bytes: int = 4_000_000) -> Path:
    """Train and save the tokenizer files into `out_dir`; returns the tokenizer.json path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size: must be >= {256 + len(SPECIAL_TOKENS)} for a byte-level BPE, got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus(max_bytes), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)],
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tokenizer.json"
    tok.save(str(path))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 1_000_000, "add_bos_token": True,
        "chat_template": DEFAULT_CHAT_TEMPLATE,
    }
    write_json(out_dir / "tokenizer_config.json", config)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--vocab-size", type=int, default=None, help="default: vocab_size in MODEL_DIR/config.json")
    parser.add_argument("--mb", type=float, default=4.0, help="megabytes of training text")
    args = parser.parse_args(argv)
    vocab_size = args.vocab_size
    if vocab_size is None:
        vocab_size = read_json_object(args.model_dir / "config.json", "model_dir", missing=FileNotFoundError)["vocab_size"]
    path = train(args.model_dir, vocab_size, int(args.mb * 1e6))
    print(f"wrote {path} ({vocab_size} tokens)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

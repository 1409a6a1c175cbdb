"""WordPiece tokenizer: trained on the corpus with ``tokenizers``, or loaded from a ``vocab.txt``.

The normaliser, pre-tokeniser and post-processor are BERT's, so a vocabulary trained here behaves like
``BertTokenizerFast`` with the same ``vocab.txt``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from ..errors import UserError
from .loading import read_utf8

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _bert_pipeline(tokenizer: Tokenizer, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls is not None and sep is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
        )
    return tokenizer


class VocabularyError(UserError, ValueError):
    pass


def load_vocab_file(vocab_file: str | Path, lowercase: bool = True, strip_accents: bool | None = None) -> Tokenizer:
    """A BERT WordPiece tokenizer from a ``vocab.txt`` (one token per line, line number = id)."""
    vocab_file = Path(vocab_file)
    if not vocab_file.is_file():
        raise VocabularyError(f"vocabulary file {vocab_file} does not exist")
    try:
        text = read_utf8(vocab_file)
    except UserError as err:
        raise VocabularyError(f"vocabulary file {err}") from None
    tokens = [line.rstrip("\r") for line in text.split("\n")]
    while tokens and not tokens[-1]:
        tokens.pop()
    return tokenizer_from_vocab(tokens, lowercase, strip_accents, str(vocab_file))


def tokenizer_from_vocab(tokens: list[str], lowercase: bool = True, strip_accents: bool | None = None,
                         source: str = "vocabulary") -> Tokenizer:
    """A BERT WordPiece tokenizer from the token list (index = id)."""
    vocab = {}
    for i, token in enumerate(tokens):
        if token and token not in vocab:
            vocab[token] = i
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise VocabularyError(f"{source}: vocabulary lacks the special tokens {missing}")
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.add_special_tokens(SPECIAL_TOKENS)  # matched whole in raw text, as BertTokenizerFast does
    return _bert_pipeline(tokenizer, lowercase, strip_accents)


def train_wordpiece(
    texts: Iterable[str],
    vocab_size: int,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    lowercase: bool = True,
    strip_accents: bool | None = None,
) -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    _bert_pipeline(tokenizer, lowercase, strip_accents)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        special_tokens=SPECIAL_TOKENS,
        continuing_subword_prefix="##",
        show_progress=True,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return _bert_pipeline(tokenizer, lowercase, strip_accents)  # post-processor now that ids exist


def vocab_list(tokenizer: Tokenizer) -> list[str]:
    by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    return [token for token, _ in by_id]


def save_vocab(tokenizer: Tokenizer, directory: str | Path) -> Path:
    """Writes ``vocab.txt`` and ``tokenizer.json`` into ``directory``; returns the vocab path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_path = directory / "vocab.txt"
    vocab_path.write_text("\n".join(vocab_list(tokenizer)) + "\n", encoding="utf-8")
    tokenizer.save(str(directory / "tokenizer.json"))
    return vocab_path


def atomic_directory(final: Path, build) -> Path:
    """Runs ``build(tmp_dir)`` and renames the result to ``final``; concurrent builders are harmless
    (the first rename wins, the others discard their identical copies)."""
    final = Path(final)
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final

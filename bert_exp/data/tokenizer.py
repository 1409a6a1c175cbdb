"""The tokenizers (``tokenizers``): BERT's WordPiece, trained on the corpus or loaded from a ``vocab.txt``,
or RoBERTa's byte-level BPE (``data.tokenizer.kind=byte_bpe``), saved and loaded whole as ``tokenizer.json``.

The WordPiece normaliser, pre-tokeniser and post-processor are BERT's, so a vocabulary trained here behaves
like ``BertTokenizerFast`` with the same ``vocab.txt``. Both kinds have the same special tokens at the same
ids and add [CLS]/[SEP] the same way, so everything downstream (instances, masking, heads) takes either.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import __version__ as tokenizers_version
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from ..errors import UserError
from ..records import temp_directory
from .loading import read_utf8

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONTINUATION = "##"  # WordPiece's prefix of the pieces that continue a word
KINDS = ("wordpiece", "byte_bpe")


@dataclass(frozen=True)
class SpecialIds:
    """The special tokens' ids and the vocabulary's size: all that masking and the heads know of a
    tokenizer (here, not in corpus/masking.py, so the fine-tuning DataModules need no pre-training code)."""

    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int


def _bert_template(tokenizer: Tokenizer) -> processors.TemplateProcessing | None:
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]`` (B of token type 1); None before the ids exist."""
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls is None or sep is None:
        return None
    return processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                         special_tokens=[("[CLS]", cls), ("[SEP]", sep)])


def _bert_pipeline(tokenizer: Tokenizer, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    template = _bert_template(tokenizer)
    if template is not None:
        tokenizer.post_processor = template
    return tokenizer


def _byte_level_pipeline(tokenizer: Tokenizer, lowercase: bool) -> Tokenizer:
    """RoBERTa's byte-level BPE pipeline (GPT-2's bytes-to-characters map and split pattern), nothing
    normalised unless ``lowercase``. ``add_prefix_space``: every text, and every word of a pre-split
    sentence (tagging), starts with the space a word has inside a text, so a word is the same tokens
    wherever it stands (the corpus is encoded a sentence at a time) and its first piece carries the space
    ("Ġ"), which whole-word masking reads; decoding gives the text with that one space in front. The
    ByteLevel post-processor trims the spaces off the offsets, so they are character offsets into the
    original text (SQuAD answers, tagged words)."""
    tokenizer.normalizer = normalizers.Lowercase() if lowercase else None
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True)
    tokenizer.decoder = decoders.ByteLevel()
    template = _bert_template(tokenizer)
    if template is not None:
        tokenizer.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=True), template])
    return tokenizer


def tokenizer_kind(tokenizer: Tokenizer) -> str:
    """``byte_bpe`` for a BPE model, else ``wordpiece``."""
    return "byte_bpe" if isinstance(tokenizer.model, models.BPE) else "wordpiece"


class VocabularyError(UserError, ValueError):
    pass


def load_vocab_file(vocab_file: str | Path, lowercase: bool = True, strip_accents: bool | None = None) -> Tokenizer:
    """A BERT WordPiece tokenizer from a ``vocab.txt`` (one token per line, line number = id), or the
    tokenizer saved whole in a ``tokenizer.json`` (any kind; its own normaliser, the options unused)."""
    vocab_file = Path(vocab_file)
    if not vocab_file.is_file():
        raise VocabularyError(f"vocabulary file {vocab_file} does not exist")
    whole = vocab_file.suffix == ".json"
    try:
        text = read_utf8(vocab_file)
    except UserError as err:
        raise VocabularyError(f"{'tokenizer' if whole else 'vocabulary'} file {err}") from None
    if whole:
        return tokenizer_from_json(text, str(vocab_file))
    tokens = [line.rstrip("\r") for line in text.split("\n")]
    while tokens and not tokens[-1]:
        tokens.pop()
    return tokenizer_from_vocab(tokens, lowercase, strip_accents, str(vocab_file))


def tokenizer_from_json(text: str, source: str = "tokenizer.json") -> Tokenizer:
    """A tokenizer saved whole (``tokenizer.json``), without the truncation or padding it was saved with."""
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as err:  # noqa: BLE001  tokenizers raises a bare Exception for a bad file
        reason = (str(err).splitlines() or [type(err).__name__])[0]
        raise VocabularyError(f"{source}: not a tokenizer.json ({reason})") from None
    missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise VocabularyError(f"{source}: vocabulary lacks the special tokens {missing}")
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def tokenizer_json(tokenizer: Tokenizer) -> str | None:
    """What a checkpoint carries besides its token list: the whole tokenizer (``tokenizer.json``) where the
    list cannot rebuild it (byte-level BPE: its merges); None for WordPiece, which the list rebuilds."""
    if tokenizer_kind(tokenizer) == "wordpiece":
        return None
    return tokenizer_from_json(tokenizer.to_str()).to_str()


def checkpoint_tokenizer(tokens: list[str], lowercase: bool = True, serialized: str | None = None,
                         source: str = "vocabulary") -> Tokenizer:
    """The tokenizer a checkpoint was trained with: its ``tokenizer.json`` when it carries one, else the
    WordPiece tokenizer of its tokens."""
    if serialized:
        return tokenizer_from_json(serialized, source)
    return tokenizer_from_vocab(tokens, lowercase, source=source)


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


def _rereadable(texts) -> Callable[[], Iterable[str]]:
    """``texts`` as a function that gives the strings again each time it is called (the WordPiece
    training reads them twice): a list or tuple, or such a function itself."""
    if callable(texts):
        return texts
    if isinstance(texts, (list, tuple)):
        return lambda: iter(texts)
    raise TypeError("the texts to train a vocabulary on are read twice: give a list, or a function that "
                    "returns an iterable of strings")


def _continuation(token: str) -> bool:
    return token.startswith(CONTINUATION) and len(token) == len(CONTINUATION) + 1


def train_wordpiece(
    texts: Sequence[str] | Callable[[], Iterable[str]],
    vocab_size: int,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    lowercase: bool = True,
    strip_accents: bool | None = None,
) -> Tokenizer:
    """BERT's WordPiece vocabulary trained by ``tokenizers``, the same for the same text and settings in
    any process on any machine.

    The library's trainer alone is not: it numbers the "##x" pieces in hash-map order (a new random seed
    in every process), and breaks ties between equally frequent merges by those numbers; it also cuts
    the alphabet at ``limit_alphabet`` among equally frequent characters in hash-map order
    (huggingface/tokenizers issue 1794). So the text is read twice. A first pass with no merges gives
    the alphabet and the characters that continue a word, and numpy counts the characters. The
    training then gets both pinned: the alphabet cut at ``limit_alphabet`` by (count, code point), and
    every token before the merges (specials, the alphabet in code-point order, then the "##x" pieces
    in code-point order) given its id up front as a special token, so every tie is broken the same way.
    Every merge sequence the library could make is one of those of a fixed numbering, and it picks
    by count then by ids: with the ids fixed the vocabulary is. The tokenizer is then rebuilt from the
    token list, as a ``vocab.txt`` loads, so only BERT's five special tokens are special. ``texts``: a
    list of strings or a function returning an iterable of them (read twice).
    """
    read = _rereadable(texts)
    probe = _bert_pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100)),
                           lowercase, strip_accents)
    counts = np.zeros(0x110000, dtype=np.int64)  # by code point, of the normalised text
    normalize = probe.normalizer.normalize_str

    def counted():
        for text in read():
            points = np.frombuffer(normalize(text).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            np.add(counts, np.bincount(points, minlength=counts.size), out=counts)
            yield text

    probe.train_from_iterator(counted(), trainer=trainers.WordPieceTrainer(
        vocab_size=1, special_tokens=SPECIAL_TOKENS, continuing_subword_prefix=CONTINUATION, show_progress=False))
    seen = vocab_list(probe)[len(SPECIAL_TOKENS):]
    characters = [t for t in seen if len(t) == 1]
    continuing = {t[len(CONTINUATION):] for t in seen if _continuation(t)}
    if len(characters) + len(continuing) != len(seen):
        raise RuntimeError(f"tokenizers {tokenizers_version}: the alphabet probe made merges; the deterministic "
                           "WordPiece training does not know this version")
    if limit_alphabet is not None and len(characters) > limit_alphabet:
        characters = sorted(characters, key=lambda c: (-int(counts[ord(c)]), ord(c)))[:limit_alphabet]
    alphabet = sorted(characters)
    pinned = SPECIAL_TOKENS + alphabet + [CONTINUATION + c for c in alphabet if c in continuing]
    tokenizer = _bert_pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100)),
                               lowercase, strip_accents)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, limit_alphabet=len(alphabet), initial_alphabet=alphabet,
        special_tokens=pinned, continuing_subword_prefix=CONTINUATION, show_progress=True,
    )
    tokenizer.train_from_iterator(read(), trainer=trainer)
    tokens = vocab_list(tokenizer)
    if tokens[: len(pinned)] != pinned:
        raise RuntimeError(f"tokenizers {tokenizers_version}: the pinned tokens moved; the deterministic "
                           "WordPiece training does not know this version")
    return tokenizer_from_vocab(tokens, lowercase, strip_accents, source="the trained vocabulary")


def train_byte_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2, lowercase: bool = False) -> Tokenizer:
    """RoBERTa's byte-level BPE trained on ``texts``: the 256 byte characters first, so any text encodes
    with no [UNK]. The special tokens keep BERT's names and ids ([PAD] 0 ... [MASK] 4), so the instances,
    masking and heads take it unchanged; [MASK] takes the space before it, as RoBERTa's <mask> does (so
    "a [MASK] b" predicts one word with its space)."""
    tokenizer = Tokenizer(models.BPE())
    _byte_level_pipeline(tokenizer, lowercase)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[AddedToken(t, special=True, lstrip=t == "[MASK]") for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=True,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return _byte_level_pipeline(tokenizer, lowercase)  # post-processor now that ids exist


def vocab_list(tokenizer: Tokenizer) -> list[str]:
    by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    return [token for token, _ in by_id]


def save_vocab(tokenizer: Tokenizer, directory: str | Path) -> Path:
    """Writes ``tokenizer.json`` and, for WordPiece, ``vocab.txt`` into ``directory`` (a byte-level BPE
    has no ``vocab.txt``: it cannot hold the merges, and would read as a WordPiece vocabulary); returns
    the file to load it from (``data.vocab_file`` takes either)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    if tokenizer_kind(tokenizer) != "wordpiece":
        return directory / "tokenizer.json"
    vocab_path = directory / "vocab.txt"
    vocab_path.write_text("\n".join(vocab_list(tokenizer)) + "\n", encoding="utf-8")
    return vocab_path


def atomic_directory(final: Path, build) -> Path:
    """Runs ``build(tmp_dir)`` and renames the result to ``final``; concurrent builders are harmless
    (the first rename wins, the others discard their identical copies)."""
    final = Path(final)
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(temp_directory(final.parent, f".{final.name}."))
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

"""Token classification (NER, POS) data: CoNLL-style column files and CoNLL-U.

* ``conll``: one token per line, whitespace- or tab-separated columns, a blank line between sentences,
  ``-DOCSTART-`` lines skipped; the token is column 0, the label ``label_column`` (default: the last).
* ``conllu``: ten tab-separated columns; the token is FORM (column 1, 0-based), the label UPOS
  (column 3) unless ``label_column`` says otherwise; comments (``#``), multiword-token ranges (``3-4``)
  and empty nodes (``8.1``) are skipped.

The label set comes from the training file (``O`` first, the rest sorted); a label at evaluation that
training never saw stops the run naming ``file:line``. Words are split into WordPiece; the label goes on
the first sub-token of each word (all sub-tokens with ``label_all_subtokens``), the others get -100.
A sentence longer than ``max_seq_length`` is cut into windows at word boundaries; every word is scored
in exactly one window (``window_context`` sub-tokens of unscored context on each side).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..base import TrainAndValSetsDataModule
from ..loading import DataFileError, EncodedDataset, LoaderSettings, pad_batch

IGNORE = -100
FORMATS = ("conll", "conllu")


@dataclass
class Sentence:
    words: list[str]
    labels: list[str]
    lines: list[int] = field(default_factory=list)  # the file line of each word


def read_conll(path: str | Path, label_column: int = -1, token_column: int = 0) -> list[Sentence]:
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file (set $BERT_EXP_DATA or the data.* paths)")
    sentences, current = [], Sentence([], [], [])
    needed = max(token_column, label_column) + 1 if label_column >= 0 else max(token_column + 1, 2)
    with open(path, encoding="utf-8-sig") as f:  # a leading byte-order mark dropped
        for lineno, line in enumerate(f, start=1):
            cols = line.split()
            if not cols:
                if current.words:
                    sentences.append(current)
                    current = Sentence([], [], [])
                continue
            if cols[0] == "-DOCSTART-":
                continue
            if len(cols) < needed:
                raise DataFileError(f"{path}:{lineno}: expected at least {needed} columns (token and label), "
                                    f"found {len(cols)}: {line.rstrip()!r}")
            current.words.append(cols[token_column])
            current.labels.append(cols[label_column])
            current.lines.append(lineno)
    if current.words:
        sentences.append(current)
    if not sentences:
        raise DataFileError(f"{path}: no sentences")
    return sentences


def read_conllu(path: str | Path, label_column: int = 3, token_column: int = 1) -> list[Sentence]:
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file (set $BERT_EXP_DATA or the data.* paths)")
    sentences, current = [], Sentence([], [], [])
    with open(path, encoding="utf-8-sig") as f:  # a leading byte-order mark dropped
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if current.words:
                    sentences.append(current)
                    current = Sentence([], [], [])
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 10:
                raise DataFileError(f"{path}:{lineno}: a CoNLL-U line has 10 tab-separated columns, found {len(cols)}")
            word_id = cols[0]
            if "-" in word_id or "." in word_id:  # multiword-token range, empty node
                continue
            if not word_id.isdigit():
                raise DataFileError(f"{path}:{lineno}: ID {word_id!r} is not a word number")
            label = cols[label_column]
            if label in ("", "_"):
                raise DataFileError(f"{path}:{lineno}: no label in column {label_column}")
            current.words.append(cols[token_column])
            current.labels.append(label)
            current.lines.append(lineno)
    if current.words:
        sentences.append(current)
    if not sentences:
        raise DataFileError(f"{path}: no sentences")
    return sentences


def read_tagged(path: str | Path, format: str = "conll", label_column: int | None = None) -> list[Sentence]:
    if format == "conll":
        return read_conll(path, -1 if label_column is None else label_column)
    if format == "conllu":
        return read_conllu(path, 3 if label_column is None else label_column)
    raise ValueError(f"data.format: {format!r} is not one of {FORMATS}")


def label_set(sentences: list[Sentence]) -> list[str]:
    """``O`` first (when present), the rest sorted: the same list for the same training file."""
    labels = sorted({label for s in sentences for label in s.labels})
    return (["O"] + [x for x in labels if x != "O"]) if "O" in labels else labels


def windows(lengths: list[int], budget: int, context: int = 0) -> list[tuple[int, int, int, int]]:
    """Cuts words with ``lengths`` sub-tokens into windows of at most ``budget`` sub-tokens.
    Returns (first, last) of the scored words and (first, last) of all words in the window (scored words
    plus context), ``last`` exclusive. Every word is scored in exactly one window; a word longer than
    the budget alone gets a window of its own (its sub-tokens are cut there, its first one kept)."""
    if sum(lengths) <= budget:
        return [(0, len(lengths), 0, len(lengths))] if lengths else []
    context = max(0, min(context, (budget - 1) // 2))
    core = budget - 2 * context
    out, start, n = [], 0, len(lengths)
    while start < n:
        end, used = start, 0
        while end < n and (end == start or used + lengths[end] <= core):
            used += lengths[end]
            end += 1
        # whole words of context on each side, at most ``context`` sub-tokens each, while the budget lasts
        left, right, room, taken = start, end, budget - used, 0
        while left > 0 and lengths[left - 1] <= room and taken + lengths[left - 1] <= context:
            taken += lengths[left - 1]
            room -= lengths[left - 1]
            left -= 1
        taken = 0
        while right < n and lengths[right] <= room and taken + lengths[right] <= context:
            taken += lengths[right]
            room -= lengths[right]
            right += 1
        out.append((start, end, left, right))
        start = end
    return out


class TaggingDataModule(TrainAndValSetsDataModule):
    """Train file + named validation files (the first is monitored) of tagged sentences."""

    def __init__(
        self,
        train_file: str,
        val_files: dict[str, str],
        format: str = "conll",
        label_column: int | None = None,
        label_all_subtokens: bool = False,
        max_seq_length: int = 128,
        window_context: int = 16,
        vocab_file: str | None = None,
        lowercase: bool = True,
        loader: LoaderSettings = LoaderSettings(),
        limit_train_examples: int | None = None,
        limit_val_examples: int | None = None,
        download: bool = True,
        seed: int = 0,
    ):
        super().__init__(vocab_file, lowercase, download, loader)
        if format not in FORMATS:
            raise ValueError(f"data.format: {format!r} is not one of {FORMATS}")
        if max_seq_length < 3:
            raise ValueError("data.max_seq_length: at least 3 ([CLS], one sub-token, [SEP])")
        self.train_file, self.val_files = train_file, dict(val_files)
        self.format, self.label_column = format, label_column
        self.label_all_subtokens = label_all_subtokens
        self.max_seq_length, self.window_context = max_seq_length, window_context
        self.limit_train_examples, self.limit_val_examples = limit_train_examples, limit_val_examples
        self.seed = seed
        self.datasets: dict[str, EncodedDataset] = {}
        self.sentences: dict[str, list[Sentence]] = {}
        self._labels: list[str] | None = None

    # -- labels -----------------------------------------------------------------------------------

    def read(self, path: str) -> list[Sentence]:
        return read_tagged(path, self.format, self.label_column)

    @property
    def labels(self) -> list[str]:
        """The label set of the training file (read once)."""
        if self._labels is None:
            if "train" not in self.sentences:
                self.sentences["train"] = self.read(self.train_file)
            self._labels = label_set(self.sentences["train"])
        return self._labels

    def use_labels(self, labels: list[str]) -> None:
        """Score with this label set (a checkpoint's) instead of the training file's."""
        self._labels = list(labels)

    def module_arguments(self) -> dict:
        """What the task module needs from the data: the label names (index = class id)."""
        return {"labels": self.labels}

    def save_vocab(self, directory: str | Path) -> Path:
        (Path(directory) / "labels.json").write_text(json.dumps(self.labels, indent=1) + "\n")
        return super().save_vocab(directory)

    def input_files(self) -> list[Path]:
        return [Path(self.train_file), *map(Path, self.val_files.values())]

    # -- encoding ---------------------------------------------------------------------------------

    def word_pieces(self, sentences: list[Sentence]) -> list[list[list[int]]]:
        """For each sentence, the sub-word ids of each word (``[UNK]`` for a word that yields none)."""
        tokenizer = self.tokenizer
        tokenizer.no_truncation()
        unk = tokenizer.token_to_id("[UNK]")
        encodings = tokenizer.encode_batch([s.words for s in sentences], is_pretokenized=True,
                                           add_special_tokens=False)
        out = []
        for sentence, enc in zip(sentences, encodings):
            pieces: list[list[int]] = [[] for _ in sentence.words]
            for token_id, word in zip(enc.ids, enc.word_ids):
                if word is not None:
                    pieces[word].append(token_id)
            out.append([p or [unk] for p in pieces])
        return out

    def encode(self, sentences: list[Sentence], path: str) -> EncodedDataset:
        index = {label: i for i, label in enumerate(self.labels)}
        special = self.special_ids
        budget = self.max_seq_length - 2
        features = []
        for sid, (sentence, pieces) in enumerate(zip(sentences, self.word_pieces(sentences))):
            label_ids = []
            for label, line in zip(sentence.labels, sentence.lines):
                if label not in index:
                    raise DataFileError(f"{path}:{line}: label {label!r} is not in the training set's labels "
                                        f"{self.labels}")
                label_ids.append(index[label])
            lengths = [min(len(p), budget) for p in pieces]
            for first, last, left, right in windows(lengths, budget, self.window_context):
                ids, labels, words = [special.cls], [IGNORE], [-1]
                for w in range(left, right):
                    piece = pieces[w][:budget]
                    scored = first <= w < last
                    ids.extend(piece)
                    for k in range(len(piece)):
                        labels.append(label_ids[w] if scored and (k == 0 or self.label_all_subtokens) else IGNORE)
                        words.append(w if scored and k == 0 else -1)
                ids.append(special.sep)
                labels.append(IGNORE)
                words.append(-1)
                features.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "labels": labels,
                                 "word_index": words, "sentence": sid})
        return EncodedDataset(features)

    def setup(self, stage: str | None = None) -> None:
        train = self.sentences.get("train") or self.read(self.train_file)
        self.sentences["train"] = train
        if self.limit_train_examples:
            train = train[: self.limit_train_examples]
        self.datasets = {"train": self.encode(train, self.train_file)}
        for name, path in self.val_files.items():
            sentences = self.read(path)
            if self.limit_val_examples:
                sentences = sentences[: self.limit_val_examples]
            self.sentences[name] = sentences
            self.datasets[name] = self.encode(sentences, path)

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = pad_batch(features, self.special_ids.pad, loader=self.loader, max_seq_length=self.max_seq_length)
        length = batch["input_ids"].shape[1]
        for key in ("labels", "word_index"):
            rows = torch.full((len(features), length), IGNORE if key == "labels" else -1, dtype=torch.long)
            for r, f in enumerate(features):
                rows[r, : len(f[key])] = torch.tensor(f[key])
            batch[key] = rows
        batch["sentence"] = torch.tensor([f["sentence"] for f in features], dtype=torch.long)
        return batch


    def gold(self, name: str) -> list[list[str]]:
        """The gold labels of a validation set, one list per sentence (what the metrics compare with)."""
        return [s.labels for s in self.sentences[name]]

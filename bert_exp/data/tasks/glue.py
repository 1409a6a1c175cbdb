"""Sentence(-pair) classification and regression data in GLUE-style TSV files (CoLA, SST-2, ...).

Every row is checked: the column count (when ``num_columns`` is given), a non-empty text, and a label
that is an integer in ``[0, num_labels)`` (or a number, for regression with ``num_labels=1``). A bad
row stops the run with ``file:line`` and what is wrong.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import torch

from ..base import TrainAndValSetsDataModule
from ..loading import DataFileError, EncodedDataset, LoaderSettings, pad_batch, read_utf8


@dataclass
class Example:
    texts: tuple[str, ...]
    label: float | int


def read_tsv(path: str | Path, text_columns: list[int], label_column: int | None, num_labels: int,
             num_columns: int | None = None, header: bool = False) -> list[Example]:
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file (set $BERT_EXP_DATA or the data.* paths)")
    examples = []
    for lineno, line in enumerate(io.StringIO(read_utf8(path), newline=""), start=1):
        if header and lineno == 1:
            continue
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        cols = line.split("\t")
        needed = max([*text_columns, label_column if label_column is not None else 0]) + 1
        if (num_columns is not None and len(cols) != num_columns) or len(cols) < needed:
            raise DataFileError(f"{path}:{lineno}: expected {num_columns or needed} tab-separated columns, "
                                f"found {len(cols)}")
        texts = tuple(cols[c] for c in text_columns)
        if not all(t.strip() for t in texts):
            raise DataFileError(f"{path}:{lineno}: empty text in column {text_columns}")
        label: float | int = -1
        if label_column is not None:
            raw = cols[label_column].strip()
            try:
                label = float(raw) if num_labels == 1 else int(raw)
            except ValueError:
                label = None
            if label is None or (num_labels > 1 and not 0 <= label < num_labels):
                expected = "a number" if num_labels == 1 else f"an integer in 0..{num_labels - 1}"
                raise DataFileError(f"{path}:{lineno}: label {raw!r} is not {expected}")
        examples.append(Example(texts, label))
    if not examples:
        raise DataFileError(f"{path}: no examples")
    return examples


def pop_from_longer(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """The lengths google-research/bert's ``_truncate_seq_pair`` leaves: one token at a time from the end
    of the longer sequence (of the second when equal) until the pair fits in ``budget``."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def encode_pairs_google(tokenizer, pairs: list[tuple[str, str]], max_seq_length: int) -> list:
    """[CLS] A [SEP] B [SEP] encodings with the pair cut as the original BERT's ``_truncate_seq_pair``
    does (tokenizers' ``longest_first`` gives the odd token to the longer input instead)."""
    tokenizer.no_truncation()
    budget = max_seq_length - tokenizer.num_special_tokens_to_add(is_pair=True)
    firsts = tokenizer.encode_batch([a for a, _ in pairs], add_special_tokens=False)
    seconds = tokenizer.encode_batch([b for _, b in pairs], add_special_tokens=False)
    encodings = []
    for first, second in zip(firsts, seconds):
        len_a, len_b = pop_from_longer(len(first.ids), len(second.ids), budget)
        first.truncate(len_a)
        second.truncate(len_b)
        encodings.append(tokenizer.post_process(first, second))
    return encodings


class GlueDataModule(TrainAndValSetsDataModule):
    """Train file + one or more named validation files; single sentences or pairs (two text columns)."""

    def __init__(
        self,
        train_file: str,
        val_files: dict[str, str],
        text_columns: list[int],
        label_column: int,
        num_labels: int = 2,
        num_columns: int | None = None,
        header: bool = False,
        max_seq_length: int = 128,
        vocab_file: str | None = None,
        lowercase: bool = True,
        loader: LoaderSettings = LoaderSettings(),
        limit_train_examples: int | None = None,
        download: bool = True,
        seed: int = 0,
        pair_truncation: str = "longest_first",
    ):
        """``seed``: the training order (grouped by length or not)."""
        super().__init__(vocab_file, lowercase, download, loader)
        if pair_truncation not in ("longest_first", "google"):
            raise ValueError(f"data.pair_truncation={pair_truncation!r}: expected longest_first or google")
        self.pair_truncation = pair_truncation
        if not 1 <= len(text_columns) <= 2:
            raise ValueError("data.text_columns: one column (single sentences) or two (pairs)")
        self.train_file, self.val_files = train_file, dict(val_files)
        self.text_columns, self.label_column = list(text_columns), label_column
        self.num_labels, self.num_columns, self.header = num_labels, num_columns, header
        self.max_seq_length = max_seq_length
        self.limit_train_examples = limit_train_examples
        self.seed = seed
        self.datasets: dict[str, EncodedDataset] = {}

    def input_files(self) -> list[Path]:
        return [Path(self.train_file), *map(Path, self.val_files.values())]

    def read(self, path: str) -> list[Example]:
        return read_tsv(path, self.text_columns, self.label_column, self.num_labels, self.num_columns, self.header)

    def encode(self, examples: list[Example]) -> EncodedDataset:
        tokenizer = self.tokenizer
        if self.pair_truncation == "google" and len(self.text_columns) == 2:
            encodings = encode_pairs_google(tokenizer, [tuple(e.texts) for e in examples], self.max_seq_length)
        else:
            tokenizer.enable_truncation(max_length=self.max_seq_length)
            inputs = [e.texts if len(e.texts) == 2 else e.texts[0] for e in examples]
            encodings = tokenizer.encode_batch(inputs)
        dtype = torch.float32 if self.num_labels == 1 else torch.int64
        return EncodedDataset([{"input_ids": enc.ids, "token_type_ids": enc.type_ids, "label": e.label, "dtype": dtype}
                               for enc, e in zip(encodings, examples)])

    def setup(self, stage: str | None = None) -> None:
        train = self.read(self.train_file)
        if self.limit_train_examples:
            train = train[: self.limit_train_examples]
        self.datasets = {"train": self.encode(train)}
        for name, path in self.val_files.items():
            self.datasets[name] = self.encode(self.read(path))

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = pad_batch(features, self.special_ids.pad, loader=self.loader, max_seq_length=self.max_seq_length)
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=features[0]["dtype"])
        return batch


"""Sentence(-pair) classification and regression data in table files: GLUE's TSV files (every GLUE task),
and CSV, JSON Lines and Parquet files of one's own (tables.py reads them).

Every row is checked: the column count (when ``num_columns`` is given), a non-empty text, and a label
that is an integer in ``[0, num_labels)``, a number (regression, ``num_labels=1``), or a string that
``label_map`` maps (MNLI's ``entailment``, ...). A bad row stops the run with ``file:line`` and what is
wrong. Columns are positions, or names when the file has a header (MNLI's train and dev files hold the
label at different positions under one name).
"""

from __future__ import annotations

import io
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..base import TrainAndValSetsDataModule
from ..loading import DataFileError, EncodedDataset, LoaderSettings, pad_batch
from .tables import NAMED, SUFFIXES, Table, id_value, label_text, read_table, table_format, text_value


@dataclass
class Example:
    texts: tuple[str, ...]
    label: float | int
    index: str = ""  # the row's id (its index columns, tab-joined, else its position): GLUE's submission key


Column = int | str  # a position, or a header name (files with a header row)


def read_examples(path: str | Path, text_columns: list[Column] | None, label_column: Column | None, num_labels: int,
                  num_columns: int | None = None, header: bool = False, label_map: dict[str, int] | None = None,
                  index_columns: list[Column] = (), label_range: tuple[float, float] | None = None,
                  format: str | None = None) -> list[Example]:
    """The rows of a table file (TSV, CSV, JSON Lines, Parquet: tables.py; ``format`` None: by suffix).
    Columns are positions or names (a header row, JSON keys, Parquet's columns); ``text_columns`` None:
    run_glue's names, sentence1 and sentence2, else sentence or text. Labels are integers in
    ``[0, num_labels)``, finite numbers for regression (``num_labels == 1``; within ``label_range`` when
    given), or strings mapped by ``label_map``; ``label_column=None`` reads an unlabelled (test) file."""
    table = read_table(path, header, format)
    if text_columns is None:
        text_columns = default_text_columns(table)
    texts_at = [table.position(c, "text") for c in text_columns]
    label_at = table.position(label_column, "label") if label_column is not None else None
    index_at = [table.position(c, "index") for c in index_columns]
    delimited = table.format in ("tsv", "csv")
    word = "tab-separated" if table.format == "tsv" else "comma-separated"
    if delimited and table.columns is not None and num_columns is not None and len(table.columns) != num_columns:
        raise DataFileError(f"{path}:1: the header names {len(table.columns)} columns, data.num_columns is {num_columns}")
    needed = max([*texts_at, *index_at, label_at if label_at is not None else 0]) + 1
    examples = []
    for where, cols in table.rows:
        if delimited and num_columns is not None and len(cols) != num_columns:
            raise DataFileError(f"{where}: expected {num_columns} {word} columns (data.num_columns), found {len(cols)}")
        if len(cols) < needed:
            raise DataFileError(f"{where}: found {len(cols)} {word} columns; the columns read need at least {needed}")
        texts = tuple(text_value(cols[c], where, name) for c, name in zip(texts_at, text_columns))
        if not all(t.strip() for t in texts):
            raise DataFileError(f"{where}: empty text in column {list(text_columns)}")
        label: float | int = -1
        if label_at is not None:
            label = parse_label(label_text(cols[label_at], where, label_column), num_labels, label_map, where,
                                label_range)
        index = "\t".join(id_value(cols[c], where, name) for c, name in zip(index_at, index_columns)) \
            if index_at else str(len(examples))
        examples.append(Example(texts, label, index))
    if not examples:
        raise DataFileError(f"{path}: no examples")
    return examples


read_tsv = read_examples  # the reader's earlier name (it read GLUE's TSV files alone)


def default_text_columns(table: Table) -> list[str]:
    """run_glue's text columns: sentence1 and sentence2 when the file has both, else sentence or text."""
    names = table.columns or []
    for choice in (["sentence1", "sentence2"], ["sentence"], ["text"]):
        if set(choice) <= set(names):
            return choice
    raise DataFileError(f"{table.path}: name data.text_columns (no sentence1/sentence2, sentence or text column "
                        f"among {', '.join(map(repr, names)) or 'no names: the file has no header'})")


def header_row(path: Path, format: str | None = None) -> list[str]:
    """The column names of a table file (a header row's, JSON's keys, Parquet's schema)."""
    return read_table(path, True, format, head_only=True).columns or []


def parse_label(raw: str, num_labels: int, label_map: dict[str, int] | None, where: str,
                label_range: tuple[float, float] | None = None) -> float | int:
    if label_map:
        if raw not in label_map:
            raise DataFileError(f"{where}: label {raw!r} is not in data.label_map ({', '.join(label_map)})")
        return label_map[raw]
    try:
        label = float(raw) if num_labels == 1 else int(raw)
    except ValueError:
        label = None
    if num_labels == 1 and label is not None and not math.isfinite(label):
        label = None  # float() reads "nan" and "inf": no score a regression can learn or be scored on
    if label is None or (num_labels > 1 and not 0 <= label < num_labels):
        expected = "a finite number" if num_labels == 1 else f"an integer in 0..{num_labels - 1}"
        raise DataFileError(f"{where}: label {raw!r} is not {expected}")
    if label_range is not None and not label_range[0] <= label <= label_range[1]:
        raise DataFileError(f"{where}: label {raw!r} is outside data.label_range "
                            f"[{label_range[0]:g}, {label_range[1]:g}]")
    return label


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


@dataclass(frozen=True)
class HoldOut:
    """A validation set cut from the training file: its last rows (``last_rows``), or the rows whose id
    columns are listed in ``ids_file`` (GLUE's MRPC dev set: pairs of sentence ids, one pair a line)."""

    name: str = "dev"
    last_rows: int | None = None
    ids_file: str | None = None
    id_columns: tuple[Column, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "id_columns", tuple(self.id_columns))  # a ListConfig from Hydra
        if (self.last_rows is None) == (self.ids_file is None):
            raise DataFileError("data.hold_out: give exactly one of last_rows or ids_file (with id_columns)")
        if self.ids_file is not None and not self.id_columns:
            raise DataFileError("data.hold_out.ids_file: name the training file's id_columns it lists")

    def split(self, examples: list[Example]) -> tuple[list[Example], list[Example]]:
        """(kept, held out); with ``ids_file`` the examples' ``index`` is their id columns, tab-joined."""
        if self.last_rows is not None:
            if not 0 < self.last_rows < len(examples):
                raise DataFileError(f"data.hold_out.last_rows={self.last_rows}: the training file has "
                                    f"{len(examples)} rows")
            return examples[:-self.last_rows], examples[-self.last_rows:]
        # one row of ids a line: TSV unless its suffix names another table format (tables.py)
        suffix = Path(self.ids_file).suffix.lower()
        table = read_table(self.ids_file, header=False, format=None if suffix in SUFFIXES and suffix != ".txt" else "tsv")
        first: dict[str, str] = {}  # ids -> where (file:line)
        for where, values in table.rows:
            ids = "\t".join(str(c).strip() for c in values)
            if ids in first:
                raise DataFileError(f"{where}: ids {ids!r} again (first at {first[ids]})")
            first[ids] = where
        held = [i for i, example in enumerate(examples) if example.index in first]
        twice = [ids for ids, count in Counter(examples[i].index for i in held).items() if count > 1]
        if twice:
            raise DataFileError(f"{first[twice[0]]}: ids {twice[0]!r} are on "
                                f"{sum(examples[i].index == twice[0] for i in held)} rows of the training file "
                                "(a held-out row must be one row)")
        if len(held) != len(first):
            missing = next(ids for ids in first if ids not in {examples[i].index for i in held})
            raise DataFileError(f"{self.ids_file}: {len(first) - len(held)} of its {len(first)} id rows are not in "
                                f"the training file ({first[missing]}: {missing!r})")
        chosen = set(held)
        return ([e for i, e in enumerate(examples) if i not in chosen], [examples[i] for i in held])


AGGREGATES = ("mean", "max", "first")


@dataclass(frozen=True)
class Windows:
    """Texts longer than ``max_seq_length`` read in windows (``data.windows``), each sharing ``overlap``
    tokens with the one before (tokenizers' ``stride``); a document is predicted from its windows' logits:
    their ``mean``, their ``max`` (each class's highest), or the ``first`` window's (truncation). Training
    takes every window as an example with its document's label."""

    overlap: int = 64
    aggregate: str = "mean"

    def check(self, max_seq_length: int) -> None:
        if self.aggregate not in AGGREGATES:
            raise DataFileError(f"data.windows.aggregate={self.aggregate!r}: expected {', '.join(AGGREGATES)}")
        if not 0 <= self.overlap < max_seq_length - 2:
            raise DataFileError(f"data.windows.overlap={self.overlap}: at least 0 and less than a window's "
                                f"{max_seq_length - 2} text tokens (data.max_seq_length={max_seq_length})")


class GlueDataModule(TrainAndValSetsDataModule):
    """Train file + one or more named validation sets (a file, or a list of files read as one set: GLUE's
    CoLA dev is the release's in-domain and out-of-domain dev files); single sentences or pairs (two text
    columns). Columns are positions or header names; string labels are mapped by ``label_map``;
    ``hold_out`` cuts a validation set from the training file (MRPC)."""

    def __init__(
        self,
        train_file: str | None,
        val_files: dict[str, str | list[str]],
        text_columns: list[Column] | None,
        label_column: Column,
        num_labels: int = 2,
        num_columns: int | None = None,
        header: bool = False,
        label_map: dict[str, int] | None = None,
        label_range: list[float] | None = None,
        hold_out: dict | None = None,
        max_seq_length: int = 128,
        vocab_file: str | None = None,
        lowercase: bool = True,
        loader: LoaderSettings = LoaderSettings(),
        limit_train_examples: int | None = None,
        download: bool = True,
        seed: int = 0,
        pair_truncation: str = "longest_first",
        test_files: dict[str, str] | None = None,
        test_text_columns: list[Column] | None = None,
        test_index_column: Column | None = "index",
        test_labels: str = "refuse",
        hub: str | None = None,
        hub_config: dict | None = None,
        cache_dir: str | None = None,
        format: str | None = None,
        windows: dict | None = None,
    ):
        """``label_range``: [low, high] of a regression's scores (STS-B's 0 to 5); a row outside is refused.
        ``seed``: the training order (grouped by length or not). ``test_files``: unlabelled files to
        predict (GLUE's test sets: submission name -> file, read by header names: ``test_text_columns``,
        else ``text_columns``, and the row id in ``test_index_column``, null: the row's position); training never
        reads them. A test file with the label column is refused (``test_labels: refuse``), or read without it
        (``drop``: MRPC's test set is the MSRP test file, whose labels are public). ``hub``: the task's data
        from ``datasets`` instead (``nyu-mll/glue[@REV]``, ``hub_config``'s config name, text columns and
        splits; :mod:`bert_exp.data.tasks.glue_hub`), staged under ``cache_dir``."""
        super().__init__(vocab_file, lowercase, download, loader)
        if pair_truncation not in ("longest_first", "google"):
            raise ValueError(f"data.pair_truncation={pair_truncation!r}: expected longest_first or google")
        self.pair_truncation = pair_truncation
        if text_columns is not None and not 1 <= len(text_columns) <= 2:
            raise ValueError("data.text_columns: one column (single sentences) or two (pairs)")
        self.format = table_format(train_file, format) if format is not None else None
        # keys as the file spells them: an override's True/False, or YAML's 1, are read as other types
        self.label_map = {str(k): int(v) for k, v in label_map.items()} if label_map else None
        if self.label_map is not None:
            if num_labels == 1:
                raise DataFileError("data.label_map: a regression task (num_labels=1) reads numbers, not a map")
            wrong = {k: v for k, v in self.label_map.items() if v not in range(num_labels)}
            if wrong:
                raise DataFileError(f"data.label_map: {wrong} not a class in 0..{num_labels - 1}")
        self.label_range = None
        if label_range is not None:
            if num_labels != 1 or len(label_range) != 2 or not label_range[0] < label_range[1]:
                raise DataFileError(f"data.label_range={list(label_range)}: [low, high] of a regression's scores "
                                    "(num_labels=1)")
            self.label_range = (float(label_range[0]), float(label_range[1]))
        self.hold_out = HoldOut(**hold_out) if hold_out else None
        self.train_file = train_file
        self.val_files = {name: path if isinstance(path, str) or path is None else [str(p) for p in path]
                          for name, path in dict(val_files or {}).items()}
        unset = (["data.train_file"] if train_file is None else []) + [
            f"data.val_files.{name}" for name, path in self.val_files.items() if path is None]
        if unset and hub is None:
            raise DataFileError(f"{unset[0]}: give a file (or a datasets id for every set: data.hub=OWNER/NAME)")
        held_file = self.val_files.get(self.hold_out.name, "") if self.hold_out is not None else ""
        if self.hold_out is not None and (not isinstance(held_file, str) or Path(held_file) != Path(train_file)):
            raise DataFileError(f"data.hold_out.name={self.hold_out.name!r}: list it in data.val_files with the "
                                f"training file as its file ({self.hold_out.name}: ${{data.train_file}})")
        # None: run_glue's names, read from each file (default_text_columns)
        self.text_columns = list(text_columns) if text_columns is not None else None
        self.label_column = label_column
        self.num_labels, self.num_columns, self.header = num_labels, num_columns, header
        self.max_seq_length = max_seq_length
        self.limit_train_examples = limit_train_examples
        self.seed = seed
        self.test_files = dict(test_files or {})
        self.test_text_columns = list(test_text_columns) if test_text_columns else self.text_columns
        if None not in (self.text_columns, self.test_text_columns) and len(self.test_text_columns) != len(self.text_columns):
            raise DataFileError(f"data.test_text_columns={self.test_text_columns}: the model reads "
                                f"{len(self.text_columns)} text column(s) (data.text_columns)")
        self.test_index_column = test_index_column
        if test_labels not in ("refuse", "drop"):
            raise ValueError(f"data.test_labels={test_labels!r}: expected refuse or drop")
        self.test_labels = test_labels
        self.hub, self.hub_config, self.cache_dir = hub, dict(hub_config or {}), cache_dir
        try:
            self.windows = Windows(**windows) if windows is not None else None
        except TypeError:
            raise DataFileError(f"data.windows={dict(windows)}: its keys are overlap and aggregate") from None
        if self.windows is not None:
            self.windows.check(max_seq_length)
        if hub and not {"name", "text_columns", "splits"} <= set(self.hub_config):
            raise DataFileError("data.hub: this data preset has no data.hub_config (name, text_columns, splits)")
        self._staged = not hub
        self.datasets: dict[str, EncodedDataset] = {}

    def from_hub(self) -> None:
        """With ``data.hub``: stage the splits (once per commit) and read them as this task's files."""
        if self._staged:
            return
        from platformdirs import user_cache_dir

        from .glue_hub import stage_glue

        root = Path(self.cache_dir or os.environ.get("BERT_EXP_CACHE") or user_cache_dir("bert_exp")) / "inputs" / "datasets"
        wanted = {"train", *self.val_files, *self.test_files}
        splits = {k: v for k, v in self.hub_config["splits"].items() if k in wanted}
        missing = sorted(wanted - set(splits))
        if missing:
            raise DataFileError(f"data.hub={self.hub}: data.hub_config.splits names no split for "
                                f"{', '.join(missing)} (leave a set out: ~data.val_files.{missing[0]})")
        staged = stage_glue(self.hub, {**self.hub_config, "splits": splits}, root, label_names=bool(self.label_map),
                            test_sets=list(self.test_files))
        self.train_file = str(staged["train"])
        self.val_files = {name: str(staged[name]) for name in self.val_files}
        self.test_files = {name: str(staged[name]) for name in self.test_files}
        self.text_columns = self.test_text_columns = list(self.hub_config["text_columns"])
        self.label_column, self.header, self.num_columns, self.hold_out = "label", True, None, None
        self.format = None  # the staged files are TSVs, whatever data.format says of one's own files
        self.test_index_column, self.test_labels = "idx", "refuse"  # the staged test splits have no labels
        self._staged = True

    def required_inputs(self) -> list[str]:
        self.from_hub()
        return super().required_inputs()

    def input_files(self) -> list[Path]:
        self.from_hub()
        extra = [Path(self.hold_out.ids_file)] if self.hold_out and self.hold_out.ids_file else []
        val = [Path(p) for paths in self.val_files.values() for p in ([paths] if isinstance(paths, str) else paths)]
        return list(dict.fromkeys([Path(self.train_file), *val, *extra]))

    def label_name(self) -> str | None:
        """The label column's header name (to tell labelled files from test files), where files have one."""
        if not self.header and table_format(self.train_file, self.format) not in NAMED:
            return None
        if isinstance(self.label_column, str):
            return self.label_column
        names = header_row(Path(self.train_file), self.format)
        return names[self.label_column] if self.label_column < len(names) else None

    def read(self, path: str | list[str], index_columns: list[Column] = ()) -> list[Example]:
        """The labelled rows of a file, or of several read as one set, in order."""
        if not isinstance(path, str):
            return [example for one in path for example in self.read(one, index_columns)]
        name = self.label_name()
        if name is not None and name not in header_row(Path(path), self.format):
            raise DataFileError(f"{path}:1: no {name!r} column: an unlabelled file (a GLUE test.tsv) belongs in "
                                "data.test_files, predicted by python -m bert_exp.score RUN --submission DIR")
        return read_examples(path, self.text_columns, self.label_column, self.num_labels, self.num_columns, self.header,
                             self.label_map, index_columns, self.label_range, self.format)

    def read_test(self, name: str) -> list[Example]:
        """A test file's rows (no labels: a file with the label column is refused), each with its id."""
        self.from_hub()
        path = Path(self.test_files[name])
        label = self.label_name()
        if self.test_labels == "refuse" and label is not None and label in header_row(path, self.format):
            raise DataFileError(f"{path}:1: a {label!r} column in a test file: data.test_files holds unlabelled "
                                "files (GLUE's test.tsv); a labelled one is scored as one of data.val_files")
        rows = read_examples(path, self.test_text_columns, None, self.num_labels, header=True,
                             index_columns=[self.test_index_column] if self.test_index_column is not None else [],
                             format=self.format)
        first: dict[str, int] = {}
        for line, row in enumerate(rows, start=2):  # (read_examples skips blank lines: the line is a lower bound)
            if not row.index:
                raise DataFileError(f"{path}: row {line - 1} has an empty {self.test_index_column!r}: every test row "
                                    "needs its id (GLUE matches predictions by it)")
            if row.index in first:
                raise DataFileError(f"{path}: id {row.index!r} on rows {first[row.index]} and {line - 1}: each test "
                                    "row's id is its own")
            first[row.index] = line - 1
        return rows

    def test_inputs(self) -> list[str]:
        """The test files (fetched when the catalog has them, by the tools that predict them)."""
        self.from_hub()
        return [str(p) for p in self.test_files.values()]

    def test_loader(self, name: str):
        """The predictions' loader for one test set, in file order; its rows (ids) beside it."""
        examples = self.read_test(name)
        return examples, self.dataloader(self.encode(examples), self.loader.eval_batch_size, None, self.collate)

    def train_and_held_out(self) -> tuple[list[Example], list[Example]]:
        """The training rows, and the rows ``hold_out`` takes from them (none without it)."""
        if self.hold_out is None:
            return self.read(self.train_file), []
        return self.hold_out.split(self.read(self.train_file, self.hold_out.id_columns))

    def encode(self, examples: list[Example]) -> EncodedDataset:
        tokenizer = self.tokenizer
        if self.windows is not None:
            return self.encode_windows(examples)
        if self.pair_truncation == "google" and examples and len(examples[0].texts) == 2:
            encodings = encode_pairs_google(tokenizer, [tuple(e.texts) for e in examples], self.max_seq_length)
        else:
            tokenizer.enable_truncation(max_length=self.max_seq_length)
            inputs = [e.texts if len(e.texts) == 2 else e.texts[0] for e in examples]
            encodings = tokenizer.encode_batch(inputs)
        dtype = torch.float32 if self.num_labels == 1 else torch.int64
        return EncodedDataset([{"input_ids": enc.ids, "token_type_ids": enc.type_ids, "label": e.label, "dtype": dtype}
                               for enc, e in zip(encodings, examples)])

    def encode_windows(self, examples: list[Example]) -> EncodedDataset:
        """Every window of each text (tokenizers' overflowing encodings), each with its document's index."""
        if examples and len(examples[0].texts) != 1:
            raise DataFileError("data.windows: long-document windows read one text a row (data.text_columns names "
                                f"{len(examples[0].texts)})")
        tokenizer = self.tokenizer
        tokenizer.enable_truncation(max_length=self.max_seq_length, stride=self.windows.overlap)
        encodings = tokenizer.encode_batch([e.texts[0] for e in examples])
        tokenizer.no_truncation()
        dtype = torch.float32 if self.num_labels == 1 else torch.int64
        return EncodedDataset([{"input_ids": window.ids, "token_type_ids": window.type_ids, "label": e.label,
                                "dtype": dtype, "doc": doc, "window": k}
                               for doc, (enc, e) in enumerate(zip(encodings, examples))
                               for k, window in enumerate([enc, *enc.overflowing])])

    def setup(self, stage: str | None = None) -> None:
        """The training set is encoded only for fitting (scoring a run reads its dev sets: the training
        file only where the dev set is cut from it)."""
        self.from_hub()
        fitting = stage in (None, "fit")
        train, held_out = self.train_and_held_out() if fitting or self.hold_out else ([], [])
        if self.limit_train_examples:
            train = train[: self.limit_train_examples]
        self.datasets = {"train": self.encode(train)} if fitting else {}
        for name, path in self.val_files.items():
            held = self.hold_out is not None and name == self.hold_out.name
            self.datasets[name] = self.encode(held_out if held else self.read(path))

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = pad_batch(features, self.special_ids.pad, loader=self.loader, max_seq_length=self.max_seq_length)
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=features[0]["dtype"])
        if "doc" in features[0]:  # long-document windows: the document each belongs to
            batch["doc"] = torch.tensor([f["doc"] for f in features])
            batch["window"] = torch.tensor([f["window"] for f in features])
        return batch


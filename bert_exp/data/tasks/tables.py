"""Rows of a table file, whatever its format: TSV (GLUE's, split on tabs only), CSV (quoted fields, as
Python's csv module and pandas write them), JSON Lines (one object a line) and Parquet. Each row keeps
where it came from (``file:line``, or ``file: row N`` in Parquet) for the errors that name it. The
classification and regression reader (glue.py), the hold-out's id lists and predict's input files all
read through here, so a format is added once. (A pre-training corpus's tables are streamed a text column
at a time, memory bounded, by data/corpus/tables.py.)"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from ..loading import DataFileError, read_utf8

FORMATS = ("tsv", "csv", "jsonl", "parquet")
SUFFIXES = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
            ".pq": "parquet"}
NAMED = ("jsonl", "parquet")  # formats whose columns always have names (no header setting)
MISSING = object()  # a JSON object without one of the columns


def table_format(path: str | Path, format: str | None = None) -> str:
    """``format`` (data.format), else the file's suffix; a suffix of no table format is read as TSV, as
    GLUE's and SentEval's files are (msr_paraphrase_train.txt)."""
    if format is not None:
        if format not in FORMATS:
            raise DataFileError(f"data.format={format!r}: expected one of {', '.join(FORMATS)} (or null: by suffix)")
        return format
    return SUFFIXES.get(Path(path).suffix.lower(), "tsv")


@dataclass
class Table:
    path: Path
    format: str
    columns: list[str] | None  # the names (a header row, JSON keys, Parquet's schema); None: no header
    rows: list[tuple[str, list]]  # (where, the row's values in column order)

    def position(self, column: int | str, what: str) -> int:
        """A column name or position as a position in the rows."""
        if isinstance(column, int):
            return column
        if self.columns is None:
            raise DataFileError(f"{self.path}: {what} {column!r} is a column name, but the file has no header "
                                "(data.header)")
        if column not in self.columns:
            bom = " (a byte-order mark inside the name: the file joins two files?)" if any(
                "\ufeff" in c for c in self.columns) else ""
            where, holder = (f"{self.path}:1", "header") if self.format in ("tsv", "csv") else (self.path, "file")
            raise DataFileError(f"{where}: no column {column!r} for the {what} (the {holder} has "
                                f"{', '.join(map(repr, self.columns))}){bom}")
        return self.columns.index(column)


def _delimited(path: Path, format: str, header: bool, head_only: bool) -> Table:
    word = "tab-separated" if format == "tsv" else "comma-separated"
    if head_only:  # the header alone: the file's first MiB, not the whole of a large file (MNLI's, QQP's)
        with open(path, "rb") as f:
            text = f.read(1 << 20).decode("utf-8-sig", errors="replace")
    else:
        text = read_utf8(path)
    if format == "tsv":  # GLUE's files quote nothing: a quote character is text (MNLI's sentences hold them)
        lines = io.StringIO(text, newline="")  # \n, \r\n and a lone \r each end a line
        records = ((n, line.rstrip("\r\n").split("\t")) for n, line in enumerate(lines, start=1))
    else:
        records = _csv_rows(path, text)
    columns, header_line, rows = None, None, []
    for lineno, values in records:
        if not any(v.strip() for v in values):
            continue
        if header and columns is None:
            if "" in values:
                raise DataFileError(f"{path}:{lineno}: an empty column name in the header ({values!r}): a stray "
                                    f"{'tab' if format == 'tsv' else 'comma'}?")
            columns, header_line = values, lineno
            if head_only:
                break
            continue
        if columns is not None and len(values) != len(columns):
            lacks = " (the header lacks a name: GLUE's files begin with index)" if len(values) > len(columns) \
                and format == "tsv" else ""
            raise DataFileError(f"{path}:{lineno}: {len(values)} {word} columns, the header (line {header_line}) "
                                f"names {len(columns)}{lacks}")
        rows.append((f"{path}:{lineno}", values))
    return Table(path, format, [] if header and columns is None else columns, rows)


def _csv_rows(path: Path, text: str):
    """(the line a record starts on, its fields): a quoted field may hold commas, quotes and newlines."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    ended = 0
    try:
        for row in reader:
            yield ended + 1, row
            ended = reader.line_num
    except csv.Error as err:
        raise DataFileError(f"{path}:{reader.line_num}: not CSV ({err})") from None


def json_objects(path: Path, head_only: bool = False) -> list[tuple[str, dict]]:
    """The objects of a JSON Lines file, each with its ``file:line`` (blank lines skipped)."""
    objects = []
    for lineno, line in enumerate(read_utf8(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFileError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise DataFileError(f"{path}:{lineno}: a JSON Lines row is an object, found {type(record).__name__}")
        objects.append((f"{path}:{lineno}", record))
        if head_only:
            break
    return objects


def _json_lines(path: Path, head_only: bool) -> Table:
    objects = json_objects(path)  # the columns are every key of every row, so the whole file even for them
    columns = list(dict.fromkeys(key for _, record in objects for key in record))  # first seen first
    rows = [] if head_only else [(where, [record.get(c, MISSING) for c in columns]) for where, record in objects]
    return Table(path, "jsonl", columns, rows)


def _parquet(path: Path, head_only: bool) -> Table:
    import pyarrow.parquet as pq

    try:
        if head_only:
            return Table(path, "parquet", list(pq.read_schema(path).names), [])
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001  pyarrow's own errors, each a reason the file cannot be read
        raise DataFileError(f"{path}: not a Parquet file pyarrow reads ({err})") from None
    columns = table.column_names
    data = [table.column(c).to_pylist() for c in columns]
    return Table(path, "parquet", columns, [(f"{path}: row {i + 1}", [col[i] for col in data])
                                             for i in range(table.num_rows)])


def read_table(path: str | Path, header: bool = True, format: str | None = None, head_only: bool = False) -> Table:
    """The rows of ``path``; ``header``: a TSV's or CSV's first line names its columns (JSON Lines and
    Parquet always name theirs). ``head_only``: the column names alone."""
    path = Path(path)
    kind = table_format(path, format)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file (set $BERT_EXP_DATA or the data.* paths)")
    if kind == "jsonl":
        return _json_lines(path, head_only)
    if kind == "parquet":
        return _parquet(path, head_only)
    return _delimited(path, kind, header, head_only)


def id_value(value, where: str, column) -> str:
    """An id cell as text (a JSON or Parquet number as Python writes it); a missing or null one refused."""
    if value is MISSING or value is None:
        raise DataFileError(f"{where}: no {column!r}")
    return str(value).strip()


def text_value(value, where: str, column) -> str:
    """A text cell: a string (a JSON or Parquet number or null is not text)."""
    if value is MISSING:
        raise DataFileError(f"{where}: no {column!r}")
    if not isinstance(value, str):
        raise DataFileError(f"{where}: {column!r} is {value!r}, not text")
    return value


def label_text(value, where: str, column) -> str:
    """A label cell as the text a label map or a number parser reads: JSON's and Parquet's booleans as
    True/False (pandas' spelling), their numbers as Python writes them."""
    if value is MISSING or value is None:
        raise DataFileError(f"{where}: no {column!r} label")
    return str(value).strip()  # str(True) is "True"

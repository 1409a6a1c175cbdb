"""Corpora kept as tables: Parquet, Arrow (what ``datasets`` writes) and JSON Lines files with a text column.

Each row's text is one document (a Wikipedia article, a book, a review); within it, blank lines separate
paragraphs and sentences are split as in plain text (:func:`.text.document_sentences`). Rows
whose text is empty or null are skipped. Parquet and Arrow are read a batch at a time with pyarrow (the
text column only); JSON Lines a line at a time, through the same decompression as plain text (``.jsonl.gz``,
``.jsonl.xz``, ``.jsonl.zst``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from .files import CorpusError, iter_lines

DEFAULT_COLUMN = "text"
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")  # a .json named as an input is read as JSON Lines, as datasets does
_COMPRESSION_SUFFIXES = (".gz", ".xz", ".bz2", ".zst")
_BATCH_ROWS = 1024
_NO_ROW = object()


def table_format(path: Path) -> str | None:
    """``parquet``, ``arrow`` or ``jsonl`` for a table file (by its first bytes; JSON Lines by its name), else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1") or head.startswith(b"\xff\xff\xff\xff"):  # IPC file / stream (datasets' .arrow)
        return "arrow"
    name = Path(path).name.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return "jsonl" if name.endswith(JSONL_SUFFIXES) else None


def _missing_column(path: Path, column: str, columns: list[str]):
    return CorpusError(f"{path}: no column {column!r} (columns: {', '.join(columns[:10]) or 'none'}); name the "
                       "text column: data.files=[{path: ..., text_column: NAME}]")


def _unreadable(path: Path, fmt: str, err: Exception) -> CorpusError:
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    return CorpusError(f"{path}: unreadable {fmt} file ({detail})")


def _arrow_reader(source):
    """An Arrow IPC file's reader and its record batches, or an IPC stream's (what ``datasets`` writes)."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(source)
        return reader, (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        source.seek(0)
        reader = pa.ipc.open_stream(source)
        return reader, iter(reader)


def _arrow_batches(path: Path, column: str):
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        reader, batches = _arrow_reader(source)
        if column not in reader.schema.names:
            raise _missing_column(path, column, reader.schema.names)
        for batch in batches:
            yield batch.column(reader.schema.get_field_index(column)).to_pylist()


def _parquet_batches(path: Path, column: str):
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    if column not in table.schema_arrow.names:
        raise _missing_column(path, column, table.schema_arrow.names)
    for batch in table.iter_batches(batch_size=_BATCH_ROWS, columns=[column]):
        yield batch.column(0).to_pylist()


def _jsonl_rows(path: Path, column: str) -> Iterator[str | None]:
    for number, line in enumerate(iter_lines(path, encoding_fallback=None), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise CorpusError(f"{path}:{number}: not a JSON object ({err.msg})") from None
        if not isinstance(row, dict):
            raise CorpusError(f"{path}:{number}: not a JSON object")
        if column not in row:
            raise CorpusError(f"{path}:{number}: no key {column!r} (keys: {', '.join(list(row)[:10])}); name the "
                              "text column: data.files=[{path: ..., text_column: NAME}]")
        yield row[column]


def table_has_rows(path: Path, column: str = DEFAULT_COLUMN, fmt: str | None = None) -> bool:
    """Whether a table file holds a row, read before any work from Parquet's footer, Arrow's batch headers
    or the first line of JSON Lines; the same CorpusError as reading it gives when ``column`` is not there
    (or the file is damaged)."""
    fmt = fmt or table_format(path)
    try:
        if fmt == "jsonl":
            rows = _jsonl_rows(path, column)
            try:
                return next(rows, _NO_ROW) is not _NO_ROW
            finally:
                rows.close()
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetFile(path) as table:
                if column not in table.schema_arrow.names:
                    raise _missing_column(path, column, table.schema_arrow.names)
                return table.metadata.num_rows > 0
        import pyarrow as pa

        with pa.memory_map(str(path)) as source:
            reader, batches = _arrow_reader(source)
            if column not in reader.schema.names:
                raise _missing_column(path, column, reader.schema.names)
            return any(batch.num_rows for batch in batches)
    except CorpusError:
        raise
    except Exception as err:  # noqa: BLE001  pyarrow's errors for a damaged file: one line naming it
        raise _unreadable(path, fmt, err) from None


def iter_table_texts(path: Path, column: str = DEFAULT_COLUMN, fmt: str | None = None) -> Iterator[str]:
    """The non-empty texts of a table file's ``column``, row by row, line endings normalised."""
    fmt = fmt or table_format(path)
    if fmt == "jsonl":
        rows = _jsonl_rows(path, column)
    else:
        batches = (_parquet_batches if fmt == "parquet" else _arrow_batches)(path, column)
        rows = (value for batch in batches for value in batch)
    try:
        for value in rows:
            if value is None:
                continue
            if not isinstance(value, str):
                raise CorpusError(f"{path}: column {column!r} holds {type(value).__name__} values, not text")
            if value.strip():
                yield value.replace("\r\n", "\n").replace("\r", "\n")
    except CorpusError:
        raise
    except Exception as err:  # noqa: BLE001  pyarrow's errors for a damaged file: one line naming it
        raise _unreadable(path, fmt, err) from None

"""Corpus text as documents and sentences, and as the text a vocabulary is trained on.

Every input is read a line at a time through :mod:`.files` (formats, decompression, decoding), or, for a
table file, a row at a time through :mod:`.tables` (a row's text is one document).

Documents: ``doc_boundary="file"`` makes each file one document; ``"blank_line"`` makes every block of
text between blank lines a document (the original BERT input format); ``"regex"`` starts a new document
at every line matching ``document_regex`` (e.g. WikiText's `` = Title = `` headings).

Sentences: within a document, blank lines separate paragraphs; the lines of a paragraph are joined and
split into sentences by :func:`split_sentences`, unless ``line_is_sentence`` is set (one sentence per
line, the original BERT format).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from .files import ESCAPED, CorpusError, ReadReport, check_fallback, decode_escaped, detect_format, iter_lines
from .tables import DEFAULT_COLUMN, iter_table_texts, table_format


def iter_input_lines(path: Path, encoding_fallback: str | None = "latin-1", report: ReadReport | None = None,
                     column: str = DEFAULT_COLUMN) -> Iterator[str]:
    """The lines of any corpus input: a text file's (:func:`.files.iter_lines`), or, for a table file
    (:mod:`.tables`), the lines of its ``column``'s texts, a blank line after each row."""
    path = Path(path)
    check_fallback(encoding_fallback)
    kind = table_format(path)
    if not kind:
        yield from iter_lines(path, encoding_fallback, report)
        return
    for text in iter_table_texts(path, column, kind):
        if report is not None:
            report.characters += len(text)
        yield from text.split("\n")
        yield ""
    if report is not None:
        report.formats[str(path)] = kind


def read_text(path: Path, encoding_fallback: str | None = "latin-1") -> tuple[str, str]:
    """Returns (text, encoding used: utf-8, or the fallback when some bytes needed it): the lines,
    line endings normalised, joined by newlines (no final one). Reads the whole file: :func:`iter_documents`
    streams instead."""
    report = ReadReport()
    text = "\n".join(iter_input_lines(path, encoding_fallback, report))
    return text, (encoding_fallback if report.fallback_decoded else "utf-8")


_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def split_documents(text: str, doc_boundary: str = "file", document_regex: str | None = None) -> list[str]:
    if doc_boundary == "file":
        docs = [text]
    elif doc_boundary == "blank_line":
        docs = _BLANK_LINES.split(text)
    elif doc_boundary == "regex":
        if not document_regex:
            raise CorpusError("data.instances.doc_boundary=regex needs data.instances.document_regex")
        pattern = re.compile(document_regex)
        docs, current = [], []
        for line in text.split("\n"):
            if pattern.match(line) and current:
                docs.append("\n".join(current))
                current = []
            current.append(line)
        docs.append("\n".join(current))
    else:
        raise CorpusError(f"data.instances.doc_boundary={doc_boundary!r}: expected file, blank_line or regex")
    return [d for d in docs if d.strip()]


# Words that end in a period without ending a sentence (compared lower-cased, without the period).
ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf viz al approx no nos vol vols ch chap sec
    fig pp p gen col maj capt lt sgt cmdr adm gov sen rep rev hon pres supt insp messrs mme mlle
    co corp inc ltd bros dept univ jan feb mar apr aug sept sep oct nov dec u.s u.k u.n d.c a.m p.m""".split()
)

# A candidate boundary: terminal punctuation, optional closing quotes/brackets, whitespace, and then
# something that can start a sentence (an optional opening quote/bracket, then a capital or digit).
_BOUNDARY = re.compile(r"""([.!?]+)(['"\)\]\u2019\u201d]*)\s+(?=['"\(\[\u2018\u201c]*[A-Z0-9])""")


def split_sentences(paragraph: str) -> list[str]:
    """Rule-based English sentence splitter.

    Splits after ``.``, ``!`` or ``?`` (with any closing quotes or brackets) when whitespace and a
    capital letter or digit follow, except after a known abbreviation (``Mr.``, ``e.g.``, ``U.S.``)
    or a single-letter initial (``J. Smith``). Line breaks count as spaces.
    """
    text = " ".join(paragraph.split())
    if not text:
        return []
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        if match.group(1) == ".":
            word = text[start : match.start()].rsplit(None, 1)[-1] if text[start : match.start()].strip() else ""
            word = word.lstrip("\"'([\u2018\u201c").lower()
            if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    if start < len(text):
        sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def document_sentences(document: str, line_is_sentence: bool = False) -> list[str]:
    if line_is_sentence:
        return [line.strip() for line in document.split("\n") if line.strip()]
    return [s for paragraph in _BLANK_LINES.split(document) for s in split_sentences(paragraph)]


def iter_file_documents(
    path: Path,
    encoding_fallback: str | None = "latin-1",
    doc_boundary: str = "file",
    document_regex: str | None = None,
    report: ReadReport | None = None,
    column: str = DEFAULT_COLUMN,
) -> Iterator[str]:
    """Each document of one file as text, read a line at a time (what :func:`split_documents` gives
    for the whole text, without holding more than one document). A table file's documents are its rows
    (the text of ``column``), whatever ``doc_boundary`` says."""
    if kind := table_format(path):
        for text in iter_table_texts(path, column, kind):
            if report is not None:
                report.characters += len(text)
            yield text
        if report is not None:
            report.formats[str(path)] = kind
        return
    if doc_boundary not in ("file", "blank_line", "regex"):
        raise CorpusError(f"data.instances.doc_boundary={doc_boundary!r}: expected file, blank_line or regex")
    if doc_boundary == "regex" and not document_regex:
        raise CorpusError("data.instances.doc_boundary=regex needs data.instances.document_regex")
    pattern = re.compile(document_regex) if doc_boundary == "regex" else None
    current: list[str] = []
    for line in iter_lines(path, encoding_fallback, report):
        starts_new = (doc_boundary == "blank_line" and not line.strip(" \t")) or \
            bool(pattern is not None and current and pattern.match(line))
        if starts_new:
            document = "\n".join(current)
            current = [] if doc_boundary == "blank_line" else [line]
            if document.strip():
                yield document
        else:
            current.append(line)
    document = "\n".join(current)
    if document.strip():
        yield document


def iter_documents(
    files: list[Path],
    encoding_fallback: str | None = "latin-1",
    doc_boundary: str = "file",
    document_regex: str | None = None,
    line_is_sentence: bool = False,
    report: ReadReport | None = None,
    with_file_index: bool = False,
    boundaries: dict[str, list] | None = None,
) -> Iterator[list[str]]:
    """Yields each document of each file as its list of sentences (empty documents skipped), streaming;
    with ``with_file_index``, ``(index of its file, sentences)``. ``boundaries`` maps a file (its
    path as a string) to its own ``[doc_boundary, document_regex]``."""
    for index, path in enumerate(files):
        boundary, regex = (boundaries or {}).get(str(path), (doc_boundary, document_regex))
        for doc in iter_file_documents(path, encoding_fallback, boundary, regex, report):
            sentences = document_sentences(doc, line_is_sentence)
            if sentences:
                yield (index, sentences) if with_file_index else sentences


def column_of(path: Path, columns: dict | None) -> str:
    """The text column of a table file: its input's ``text_column``, else ``text``."""
    return (columns or {}).get(str(path), DEFAULT_COLUMN)


def iter_text_chunks(files: list[Path], encoding_fallback: str | None = "latin-1", chunk_chars: int = 1 << 20,
                     columns: dict | None = None) -> Iterator[str]:
    """The files' text, read as :func:`iter_input_lines` reads it, as strings of whole lines of about
    ``chunk_chars`` characters: what a vocabulary is trained on. It depends on the words alone, and
    documents or sentences hold the same words as the lines they are made of."""
    for path in files:
        lines: list[str] = []
        size = 0
        for line in iter_input_lines(path, encoding_fallback, column=column_of(path, columns)):
            lines.append(line)
            size += len(line) + 1
            if size >= chunk_chars:
                yield "\n".join(lines)
                lines, size = [], 0
        if lines:
            yield "\n".join(lines)


SAMPLE_WINDOW_BYTES = 1 << 16  # a plain file is sampled in windows of about this much text


COMPRESSED_RATIO = 4  # text bytes per compressed byte (xz, gzip: 3-5), to size compressed files' text
PARQUET_RATIO = 2  # Parquet's default (snappy) compression of text


def text_weight(path: Path) -> int:
    """About how many bytes of text a file holds (a compressed file counts four times its size, Parquet twice)."""
    if table_format(Path(path)) == "parquet":
        return os.path.getsize(path) * PARQUET_RATIO
    return os.path.getsize(path) * (1 if detect_format(Path(path)) == "plain" else COMPRESSED_RATIO)


def corpus_text_bytes(files: list[Path]) -> int:
    """About how much text the files hold (:func:`text_weight`, as groups are sized)."""
    return sum(text_weight(p) for p in files)


def sample_text_chunks(files: list[Path], sample_bytes: int, encoding_fallback: str | None = "latin-1",
                       columns: dict | None = None) -> Iterator[str]:
    """About ``sample_bytes`` of the files' text, each file giving its share (its size over the corpus's),
    as strings of whole lines; the same on every machine. A plain file's share is read in windows spread
    evenly through it (seeks, nothing else is read); a compressed file's share is its beginning (a
    compressed stream cannot be entered in the middle). What a vocabulary is trained on when the corpus
    is larger than ``data.tokenizer.sample_bytes``."""
    total = corpus_text_bytes(files)
    for path in files:
        path = Path(path)
        fmt = detect_format(path)
        size = os.path.getsize(path)
        share = int(sample_bytes * text_weight(path) / total)
        if share <= 0:
            continue
        if fmt != "plain" or table_format(path):  # from the beginning (a table: its first rows)
            yield from _head_chunks(path, share, encoding_fallback, column=column_of(path, columns))
            continue
        windows = max(1, -(-share // SAMPLE_WINDOW_BYTES))
        width = share // windows
        with open(path, "rb") as f:
            for k in range(windows):
                offset = (size - width) * k // max(windows - 1, 1) if windows > 1 else 0
                f.seek(offset)
                block = f.read(width)
                if offset > 0:  # from the first whole line
                    block = block.partition(b"\n")[2]
                if len(block) == width and b"\n" in block:  # to the last whole line
                    block = block[: block.rindex(b"\n")]
                text = block.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
                if ESCAPED.search(text):
                    if encoding_fallback is None:
                        raise CorpusError(f"{path}: not valid UTF-8 (near byte {offset}) and "
                                          "data.instances.encoding_fallback is null")
                    text, _ = decode_escaped(text, encoding_fallback)
                yield text.replace("\r\n", "\n").replace("\r", "\n")


def _head_chunks(path: Path, share: int, encoding_fallback: str | None, chunk_chars: int = 1 << 20,
                 column: str = DEFAULT_COLUMN) -> Iterator[str]:
    lines: list[str] = []
    size = taken = 0
    for line in iter_input_lines(path, encoding_fallback, column=column):
        lines.append(line)
        size += len(line) + 1
        if size >= chunk_chars:
            yield "\n".join(lines)
            taken += size
            lines, size = [], 0
        if taken + size >= share:
            break
    if lines:
        yield "\n".join(lines)

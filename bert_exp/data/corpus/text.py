"""Reading corpus text: input expansion, decompression, decoding, documents and sentences.

Formats: a file is recognised by its first bytes, whatever its name: xz, gzip and bz2 are decompressed
while reading (standard library), zstd too when the ``zstandard`` module is installed (otherwise the
error names the file and ``pip install zstandard``). Everything streams: a file is read line by line,
a document at a time, never whole. A corrupt or truncated archive is a one-line :class:`CorpusError`
naming the file, and so is a binary file (NUL bytes in its first 8 KB, after decompression, or the
magic bytes of a PNG/JPEG/GIF image, a zip/7z/rar archive, a PDF, an ELF binary).

Encoding: every file is decoded as UTF-8; bytes that are not valid UTF-8 are decoded with
``encoding_fallback`` (default Latin-1, which maps every byte to a character so nothing is lost; the
shared plain-text corpus has 9 such files, mostly stray punctuation bytes inside ASCII text). Only the
invalid bytes are, so the valid UTF-8 around them stays intact; the fallback should be a single-byte
encoding (latin-1, cp1252). Each such file is reported: a warning on the ``bert_exp.data`` logger
names it and counts the replaced bytes, and :class:`ReadReport` keeps the count. ``None`` turns a
non-UTF-8 file into an error naming the file and the byte offset.

Directories: expanding a directory skips files that are obviously not corpus text
(:data:`NON_CORPUS_FILES`: ``*.json``, ``*.jsonl``, ``*.md``, ``README*``, ``LICENSE*``, ``SHA256SUMS``,
``MD5SUMS``) and hidden files. Files named explicitly or by a glob are read as given.

Documents: ``doc_boundary="file"`` makes each file one document; ``"blank_line"`` makes every block of
text between blank lines a document (the original BERT input format); ``"regex"`` starts a new document
at every line matching ``document_regex`` (e.g. WikiText's `` = Title = `` headings).

Sentences: within a document, blank lines separate paragraphs; the lines of a paragraph are joined and
split into sentences by :func:`split_sentences`, unless ``line_is_sentence`` is set (one sentence per
line, the original BERT format).
"""

from __future__ import annotations

import bz2
import codecs
import fnmatch
import glob
import gzip
import io
import logging
import lzma
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import UserError
from .tables import DEFAULT_COLUMN, iter_table_texts, table_format

log = logging.getLogger("bert_exp.data")


class CorpusError(UserError, ValueError):
    """A corpus input that cannot be read as configured; the message names the file."""


# -- which files ---------------------------------------------------------------------------------

# Skipped when a directory is expanded (matched against the file name, case-insensitively).
NON_CORPUS_FILES = ("*.json", "*.jsonl", "*.md", "README*", "LICENSE*", "SHA256SUMS", "MD5SUMS")


def is_corpus_file(path: Path) -> bool:
    name = path.name.lower()
    return not name.startswith(".") and not any(fnmatch.fnmatchcase(name, p.lower()) for p in NON_CORPUS_FILES)


def expand_inputs(inputs: list[str] | str) -> list[Path]:
    """Files, directories (every corpus file below, recursively; see :data:`NON_CORPUS_FILES`) or
    glob patterns -> sorted unique files."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    files: list[Path] = []
    for item in inputs:
        item = os.path.expanduser(str(item))
        if glob.has_magic(item):
            matches = sorted(Path(p) for p in glob.glob(item, recursive=True) if Path(p).is_file())
            if not matches:
                raise CorpusError(f"corpus input {item!r} matches no files")
            files.extend(matches)
        elif os.path.isdir(item):
            found = sorted(p for p in Path(item).rglob("*") if p.is_file())
            matches = [p for p in found if is_corpus_file(p)]
            if not matches:
                skipped = [p.name for p in found if not p.name.startswith(".")]
                raise CorpusError(f"corpus directory {item!r} holds no corpus files"
                                  + (f" (skipped as not corpus text: {', '.join(skipped[:5])})" if skipped else ""))
            files.extend(matches)
        elif os.path.isfile(item):
            files.append(Path(item))
        else:
            raise CorpusError(f"corpus input {item!r} does not exist (set $BERT_EXP_DATA or data.files)")
    unique = list(dict.fromkeys(p.resolve() for p in files))
    return unique


# -- formats -------------------------------------------------------------------------------------

COMPRESSED_MAGIC = {b"\xfd7zXZ\x00": "xz", b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\x28\xb5\x2f\xfd": "zstd"}
BINARY_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image",
    b"PK\x03\x04": "a zip archive", b"PK\x05\x06": "a zip archive", b"7z\xbc\xaf\x27\x1c": "a 7z archive",
    b"Rar!\x1a\x07": "a rar archive", b"%PDF-": "a PDF document", b"\x7fELF": "an ELF binary",
    b"\x93NUMPY": "a numpy array", b"\xef\xbb\xbf\x00": "binary data",
}
SNIFF_BYTES = 8192


def detect_format(path: Path) -> str:
    """``plain``, ``xz``, ``gzip``, ``bz2`` or ``zstd``, from the file's first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as err:
        raise CorpusError(f"{path}: cannot be read ({err.strerror or err})") from None
    for magic, name in COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            return name
    return "plain"


def _check_text_head(path: Path, head: bytes, fmt: str) -> None:
    """Refuses binary content: known magic bytes, UTF-16/32 text, or NUL bytes in the first 8 KB."""
    inside = "" if fmt == "plain" else f" (inside its {fmt} compression)"
    for magic, what in BINARY_MAGIC.items():
        if head.startswith(magic):
            raise CorpusError(f"{path}: is {what}{inside}, not corpus text")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise CorpusError(f"{path}: is UTF-16/32 text{inside}; convert it to UTF-8 (e.g. iconv -t UTF-8)")
    if b"\x00" in head[:SNIFF_BYTES]:
        offset = head.index(b"\x00")
        if offset < 4 and head[:4].count(b"\x00") >= 2:
            raise CorpusError(f"{path}: looks like UTF-16/32 text{inside}; convert it to UTF-8")
        raise CorpusError(f"{path}: binary data{inside} (a NUL byte at offset {offset}), not corpus text")


def open_binary(path: Path, fmt: str | None = None) -> BinaryIO:
    """The file's bytes, decompressed as its magic bytes say."""
    fmt = fmt or detect_format(path)
    if fmt == "plain":
        return open(path, "rb")  # the caller closes it
    if fmt == "xz":
        return lzma.open(path, "rb")
    if fmt == "gzip":
        return gzip.open(path, "rb")
    if fmt == "bz2":
        return bz2.open(path, "rb")
    if fmt == "zstd":
        try:
            import zstandard
        except ImportError:
            raise CorpusError(f"{path}: is zstd-compressed and reading it needs the zstandard module: "
                              "pip install zstandard (or decompress it: zstd -d)") from None
        raw = open(path, "rb")  # noqa: SIM115
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
    raise ValueError(f"unknown format {fmt!r}")


def _decompression_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [lzma.LZMAError, gzip.BadGzipFile, zlib.error, EOFError, OSError]
    try:
        import zstandard
        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


# -- decoding ------------------------------------------------------------------------------------

@dataclass
class ReadReport:
    """What reading the corpus files met: their formats, and the files decoded with the fallback."""

    formats: dict[str, str] = field(default_factory=dict)  # path -> plain | xz | gzip | bz2 | zstd
    fallback_decoded: dict[str, int] = field(default_factory=dict)  # path -> invalid UTF-8 bytes replaced
    characters: int = 0  # of decoded text

    def as_dict(self) -> dict:
        return {"formats": dict(self.formats), "fallback_decoded": dict(self.fallback_decoded),
                "characters": self.characters}


_ESCAPED = re.compile("[\udc80-\udcff]+")
_WARNED_FALLBACK: set[str] = set()
_READ_CHUNK = 1 << 16


def _check_fallback(encoding_fallback: str | None) -> None:
    if encoding_fallback is None:
        return
    try:
        codecs.lookup(encoding_fallback)
    except LookupError:
        raise CorpusError(f"data.instances.encoding_fallback={encoding_fallback!r} is not a known encoding") from None


def _first_invalid_byte(path: Path, fmt: str) -> int:
    """Byte offset (in the decompressed stream) of the first byte that is not valid UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    consumed = 0
    with open_binary(path, fmt) as stream:
        while True:
            block = stream.read(_READ_CHUNK)
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as err:
                return consumed - pending + err.start
            if not block:
                return consumed
            consumed += len(block)


def iter_lines(path: Path, encoding_fallback: str | None = "latin-1", report: ReadReport | None = None,
               column: str = DEFAULT_COLUMN, tables: bool = True) -> Iterator[str]:
    """The file's lines (without line endings; CR LF and CR end lines too), decompressed and
    decoded as the module docstring says, streaming. A table file (:mod:`bert_exp.data.tables`) gives the
    lines of its ``column``'s texts, a blank line after each row (unless ``tables`` is false)."""
    path = Path(path)
    _check_fallback(encoding_fallback)
    if tables and (kind := table_format(path)):
        for text in iter_table_texts(path, column, kind):
            if report is not None:
                report.characters += len(text)
            yield from text.split("\n")
            yield ""
        if report is not None:
            report.formats[str(path)] = kind
        return
    fmt = detect_format(path)
    replaced = 0
    try:
        with open_binary(path, fmt) as raw:
            buffered = io.BufferedReader(raw, _READ_CHUNK) if fmt != "plain" else raw
            _check_text_head(path, buffered.peek(SNIFF_BYTES)[:SNIFF_BYTES], fmt)
            text = io.TextIOWrapper(buffered, encoding="utf-8", errors="surrogateescape", newline=None)
            partial: list[str] = []  # the start of a line that continues in the next block
            first = True
            while block := text.read(_READ_CHUNK):
                if first:
                    first = False
                    block = block.removeprefix("\ufeff")
                if report is not None:
                    report.characters += len(block)
                if _ESCAPED.search(block):
                    if encoding_fallback is None:
                        offset = _first_invalid_byte(path, fmt)
                        raise CorpusError(f"{path}: not valid UTF-8 at byte {offset} and data.instances.encoding_fallback is null")
                    block, count = _decode_escaped(block, encoding_fallback)
                    replaced += count
                lines = block.split("\n")
                if len(lines) == 1:
                    partial.append(block)
                    continue
                if partial:
                    partial.append(lines[0])
                    lines[0] = "".join(partial)
                partial = [lines.pop()]
                yield from lines
            if partial and partial != [""]:
                yield "".join(partial)
    except CorpusError:
        raise
    except _decompression_errors() as err:
        what = "corrupt or truncated" if fmt != "plain" else "unreadable"
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CorpusError(f"{path}: {what} {fmt if fmt != 'plain' else 'file'} ({detail})") from None
    finally:
        if replaced:
            if str(path) not in _WARNED_FALLBACK:  # once a process: the vocabulary and the cache read it again
                _WARNED_FALLBACK.add(str(path))
                log.warning("%s: not valid UTF-8; %d invalid bytes decoded as %s", path, replaced, encoding_fallback)
            if report is not None:
                report.fallback_decoded[str(path)] = replaced
        if report is not None:
            report.formats[str(path)] = fmt


def _decode_escaped(line: str, encoding: str) -> tuple[str, int]:
    count = 0

    def undo(match: re.Match) -> str:
        nonlocal count
        raw = bytes(ord(c) - 0xDC00 for c in match.group())
        count += len(raw)
        return raw.decode(encoding, errors="replace")

    return _ESCAPED.sub(undo, line), count


def read_text(path: Path, encoding_fallback: str | None = "latin-1") -> tuple[str, str]:
    """Returns (text, encoding used: utf-8, or the fallback when some bytes needed it): the lines,
    line endings normalised, joined by newlines (no final one). Reads the whole file: :func:`iter_documents`
    streams instead."""
    report = ReadReport()
    text = "\n".join(iter_lines(path, encoding_fallback, report))
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
    """The files' text, decompressed and decoded as :func:`iter_lines` does, as strings of whole lines of
    about ``chunk_chars`` characters: what a vocabulary is trained on. It depends on the words alone, and
    documents or sentences hold the same words as the lines they are made of."""
    for path in files:
        lines: list[str] = []
        size = 0
        for line in iter_lines(path, encoding_fallback, column=column_of(path, columns)):
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
                if _ESCAPED.search(text):
                    if encoding_fallback is None:
                        raise CorpusError(f"{path}: not valid UTF-8 (near byte {offset}) and "
                                          "data.instances.encoding_fallback is null")
                    text, _ = _decode_escaped(text, encoding_fallback)
                yield text.replace("\r\n", "\n").replace("\r", "\n")


def _head_chunks(path: Path, share: int, encoding_fallback: str | None, chunk_chars: int = 1 << 20,
                 column: str = DEFAULT_COLUMN) -> Iterator[str]:
    lines: list[str] = []
    size = taken = 0
    for line in iter_lines(path, encoding_fallback, column=column):
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

"""One corpus file read as lines of text: which files are corpus text, their format, decompression and
decoding; and :class:`CorpusError`, the one-line error for an input that cannot be read.

The lowest layer of corpus reading: :mod:`.tables` (a table's rows) and :mod:`.text` (documents,
sentences) both build on it, and it imports neither, so reading has no import circle.

Formats: a file is recognised by its first bytes, whatever its name: xz, gzip and bz2 are decompressed
while reading (standard library), zstd too when the ``zstandard`` module is installed (otherwise the
error names the file and ``pip install zstandard``). Everything streams: a file is read line by line,
never whole. A corrupt or truncated archive is a one-line :class:`CorpusError` naming the file, and so
is a binary file (NUL bytes in its first 8 KB, after decompression, or the magic bytes of a PNG/JPEG/GIF
image, a zip/7z/rar archive, a PDF, an ELF binary).

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

from ...errors import UserError

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


ESCAPED = re.compile("[\udc80-\udcff]+")  # undecodable bytes, as surrogateescape keeps them
_WARNED_FALLBACK: set[str] = set()
_READ_CHUNK = 1 << 16


def check_fallback(encoding_fallback: str | None) -> None:
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


def iter_lines(path: Path, encoding_fallback: str | None = "latin-1",
               report: ReadReport | None = None) -> Iterator[str]:
    """A text file's lines (without line endings; CR LF and CR end lines too), decompressed and decoded
    as the module docstring says, streaming. (The lines of any input, a table's rows too:
    :func:`.text.iter_input_lines`.)"""
    path = Path(path)
    check_fallback(encoding_fallback)
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
                if ESCAPED.search(block):
                    if encoding_fallback is None:
                        offset = _first_invalid_byte(path, fmt)
                        raise CorpusError(f"{path}: not valid UTF-8 at byte {offset} and data.instances.encoding_fallback is null")
                    block, count = decode_escaped(block, encoding_fallback)
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


def decode_escaped(line: str, encoding: str) -> tuple[str, int]:
    """The bytes ``surrogateescape`` kept in ``line`` decoded with ``encoding``; and how many there were."""
    count = 0

    def undo(match: re.Match) -> str:
        nonlocal count
        raw = bytes(ord(c) - 0xDC00 for c in match.group())
        count += len(raw)
        return raw.decode(encoding, errors="replace")

    return ESCAPED.sub(undo, line), count

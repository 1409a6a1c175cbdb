"""Reading corpus text: input expansion, decoding, documents and sentences.

Encoding: every file is decoded as UTF-8 first; a file that is not valid UTF-8 is decoded with
``encoding_fallback`` (default Latin-1, which maps every byte to a character so nothing is lost; the
shared corpus has 9 such files, mostly Big5 punctuation bytes inside ASCII text). ``None`` turns a
non-UTF-8 file into an error naming the file and the byte offset.

Documents: ``doc_boundary="file"`` makes each file one document; ``"blank_line"`` makes every block of
text between blank lines a document (the original BERT input format); ``"regex"`` starts a new document
at every line matching ``document_regex`` (e.g. WikiText's `` = Title = `` headings).

Sentences: within a document, blank lines separate paragraphs; the lines of a paragraph are joined and
split into sentences by :func:`split_sentences`, unless ``line_is_sentence`` is set (one sentence per
line, the original BERT format).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError


class CorpusError(UserError, ValueError):
    """A corpus input that cannot be read as configured; the message names the file."""


def expand_inputs(inputs: list[str] | str) -> list[Path]:
    """Files, directories (every file below, recursively) or glob patterns -> sorted unique files."""
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
            matches = sorted(p for p in Path(item).rglob("*") if p.is_file() and not p.name.startswith("."))
            if not matches:
                raise CorpusError(f"corpus directory {item!r} holds no files")
            files.extend(matches)
        elif os.path.isfile(item):
            files.append(Path(item))
        else:
            raise CorpusError(f"corpus input {item!r} does not exist (set $BERT_EXP_DATA or data.files)")
    unique = list(dict.fromkeys(p.resolve() for p in files))
    return unique


def read_text(path: Path, encoding_fallback: str | None = "latin-1") -> tuple[str, str]:
    """Returns (text, encoding used). Line endings are normalised to \\n."""
    raw = Path(path).read_bytes()
    try:
        text, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as err:
        if encoding_fallback is None:
            raise CorpusError(
                f"{path}: not valid UTF-8 at byte {err.start} and data.encoding_fallback is null"
            ) from None
        text, encoding = raw.decode(encoding_fallback), encoding_fallback
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n"), encoding


_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def split_documents(text: str, doc_boundary: str = "file", document_regex: str | None = None) -> list[str]:
    if doc_boundary == "file":
        docs = [text]
    elif doc_boundary == "blank_line":
        docs = _BLANK_LINES.split(text)
    elif doc_boundary == "regex":
        if not document_regex:
            raise CorpusError("data.doc_boundary=regex needs data.document_regex")
        pattern = re.compile(document_regex)
        docs, current = [], []
        for line in text.split("\n"):
            if pattern.match(line) and current:
                docs.append("\n".join(current))
                current = []
            current.append(line)
        docs.append("\n".join(current))
    else:
        raise CorpusError(f"data.doc_boundary={doc_boundary!r}: expected file, blank_line or regex")
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


def iter_documents(
    files: list[Path],
    encoding_fallback: str | None = "latin-1",
    doc_boundary: str = "file",
    document_regex: str | None = None,
    line_is_sentence: bool = False,
) -> Iterator[list[str]]:
    """Yields each document of each file as its list of sentences (empty documents skipped)."""
    for path in files:
        text, _ = read_text(path, encoding_fallback)
        for doc in split_documents(text, doc_boundary, document_regex):
            sentences = document_sentences(doc, line_is_sentence)
            if sentences:
                yield sentences

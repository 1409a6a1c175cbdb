"""Does a pre-training document share text with an evaluation set? A corpus that holds the paragraphs a
fine-tuning task is scored on (Wikipedia and SQuAD's contexts) inflates that score without a word said.

The evaluation texts (SQuAD contexts from a SQuAD JSON file, or the lines of a text file) are cut into
every run of :data:`WINDOW` words (lower-cased, punctuation dropped) and each run hashed. A document's own
runs are taken every :data:`STRIDE` words, and it shares a paragraph when :data:`MIN_RUNS` of them are
among the evaluation runs: some 24 words of evaluation text, found whatever their offset. A quoted phrase
or a citation that two articles share (the shared Wikipedia copy has a few 12-word ones) does not count.
The runs are hashed with blake2b, so every process agrees.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

WINDOW = 12
STRIDE = 4
MIN_RUNS = 4
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _digest(words: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(words).encode(), digest_size=8).digest(), "little")


def evaluation_texts(path: Path) -> list[str]:
    """A SQuAD JSON file's contexts, or a text file's lines."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if Path(path).suffix == ".json":
        data = json.loads(text)
        return [p["context"] for article in data.get("data", []) for p in article.get("paragraphs", [])]
    return [line for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class Overlap:
    """The hashed word runs of the evaluation texts of ``sources``."""

    runs: frozenset[int]
    sources: tuple[str, ...]

    @classmethod
    def of_files(cls, paths: list[str | Path]) -> Overlap:
        runs = set()
        for path in paths:
            for text in evaluation_texts(Path(path)):
                words = _words(text)
                runs.update(_digest(words[i : i + WINDOW]) for i in range(len(words) - WINDOW + 1))
        return cls(frozenset(runs), tuple(str(p) for p in paths))

    def shares_text(self, document: str) -> bool:
        if not self.runs:
            return False
        words = _words(document)
        found = 0
        for i in range(0, max(len(words) - WINDOW + 1, 0), STRIDE):
            found += _digest(words[i : i + WINDOW]) in self.runs
            if found >= MIN_RUNS:
                return True
        return False

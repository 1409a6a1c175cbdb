"""Pre-training instances from corpus text, one group of input files at a time.

A group is one or more whole input files (:mod:`bert_exp.data.corpus.preparation` deals the corpus into groups and
prepares them in worker processes). For each group :func:`cut_group` reads the documents, holds out
validation documents, tokenizes them into one flat token array and cuts the objective's instances
(:mod:`bert_exp.data.corpus.instances`: BERT's pairs, RoBERTa's packings, ALBERT's sentence order), whose
NotNext segments come from other documents of the same group and split, as they did when the original
``create_pretraining_data.py`` was run on each input shard. With a single group (a small corpus) the
instances are those the whole corpus made before groups existed: the same documents, split, random
generator (``random.Random(seed)``, then ``seed + g`` for group g) and order of draws.

:func:`assemble` turns an instance into its token ids ``[CLS] A [SEP] (B [SEP])``.

The data report says what went in and what was lost: files by format, documents, sentences, tokens,
the files decoded with the encoding fallback and how many bytes each needed it, and the tokens that no
instance holds. With NSP a sentence longer than an instance (``max_seq_length - 3`` tokens) is cut to
that length, and the rest of it is dropped: text without sentence punctuation (one line of 1 MB is one
"sentence") loses almost all of itself. Each file that has such sentences gets a warning on the
``bert_exp.data`` logger, and the report counts the dropped tokens per such file and in total.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from .files import CorpusError, ReadReport
from .instances import (
    create_instances_from_document,
    create_sentence_pairs_from_document,
    create_sop_instances_from_document,
    pack_doc_sentences,
    pack_full_sentences,
    pack_token_blocks,
)
from .overlap import Overlap
from .text import column_of, document_sentences, iter_file_documents

log = logging.getLogger("bert_exp.data")

# a file whose instances leave out more than this fraction of its tokens is named in a warning
DROPPED_WARNING_FRACTION = 0.5  # BERT's own pair truncation drops some 15 % anywhere
# a sentence this many times longer than an instance (an instance keeps under a quarter of it) is named
CUT_WARNING_FACTOR = 4
CUT_WARNING_FILES = 3  # the files with the longest such sentences; the rest in one line (a screen stays a screen)

# pre-training objectives (the `objective` config group), RoBERTa's four input formats and ours, token_blocks
OBJECTIVES = ("mlm_nsp", "mlm", "mlm_sop", "clm", "electra")
PACKINGS = ("segment_pair", "sentence_pair", "full_sentences", "doc_sentences", "token_blocks")
# packing -> (InstanceSettings.nsp: sentence-pair instances, InstanceSettings.layout)
_PACKING_LAYOUT = {"segment_pair": (True, None), "sentence_pair": (True, "sentence_pair"),
                   "full_sentences": (False, None), "doc_sentences": (False, "doc_sentences"),
                   "token_blocks": (False, "token_blocks")}
# InstanceSettings.layout of the MLM-only formats -> the function that packs them
_PACKERS = {None: pack_full_sentences, "doc_sentences": pack_doc_sentences, "token_blocks": pack_token_blocks}


def instance_layout(objective: str = "mlm_nsp", packing: str | None = None, nsp: bool = True) -> tuple[bool, str | None]:
    """The instances an objective trains on, as ``(InstanceSettings.nsp, InstanceSettings.layout)``.

    ``mlm_nsp``: BERT's segment pairs, half with a random next segment. ``mlm_sop``: two consecutive
    segments, swapped half the time. ``mlm``, ``electra``: one of RoBERTa's formats (``packing``, by
    default ``full_sentences``; or ``token_blocks``, ours: the running text cut into full blocks);
    ``clm``: ``full_sentences``, ``doc_sentences`` or ``token_blocks``. ``nsp=False`` with
    ``mlm_nsp`` is the older spelling of ``objective=mlm`` (full sentences); the settings of the
    default objectives are those caches had before objectives existed, so their cache keys stay."""
    if objective not in OBJECTIVES:
        raise ValueError(f"data.objective={objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if packing is not None and packing not in PACKINGS:
        raise ValueError(f"data.packing={packing!r}: expected one of {', '.join(PACKINGS)} (or null)")
    if not nsp:
        if objective != "mlm_nsp":
            raise ValueError(f"data.nsp=false is the older spelling of objective=mlm; with objective={objective} "
                             "leave data.nsp at true")
        objective = "mlm"
    if objective in ("mlm_nsp", "mlm_sop"):
        if packing not in (None, "segment_pair"):
            raise ValueError(f"data.packing={packing}: objective={objective} trains on segment pairs "
                             "(packing: segment_pair or null)")
        return True, "sop" if objective == "mlm_sop" else None
    packing = packing or "full_sentences"
    if objective == "clm" and packing not in ("full_sentences", "doc_sentences", "token_blocks"):
        raise ValueError(f"data.packing={packing}: objective=clm reads running text "
                         "(full_sentences, doc_sentences or token_blocks)")
    return _PACKING_LAYOUT[packing]


@dataclass(frozen=True)
class InstanceSettings:
    """Every setting that changes the cached instances (part of the cache key)."""

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    short_seq_per_document: bool = False
    nsp: bool = True
    dupe_factor: int = 1
    val_fraction: float = 0.02
    min_val_documents: int = 2
    encoding_fallback: str | None = "latin-1"
    doc_boundary: str = "file"
    document_regex: str | None = None
    line_is_sentence: bool = False
    seed: int = 12345
    # files with their own [doc_boundary, document_regex] (inputs given as {path, doc_boundary}); None: none
    file_boundaries: dict | None = None
    # table files (Parquet, Arrow, JSON Lines) whose text column is not "text": {path: column}; None: none
    text_columns: dict | None = None
    # None: BERT's segment pairs (nsp) or RoBERTa's full sentences (not nsp); with nsp "sentence_pair"
    # or "sop" (ALBERT's sentence order), without "doc_sentences" or "token_blocks" (see instance_layout)
    layout: str | None = None


@dataclass
class FileStats:
    """What one input file gave: tokens, sentences, sentences longer than an NSP instance, the tokens no
    instance holds."""

    tokens: int = 0
    sentences: int = 0
    long_sentences: int = 0  # longer than an NSP instance can hold
    longest_sentence: int = 0
    dropped: int = 0  # tokens no instance holds

    def add(self, other: FileStats) -> None:
        self.tokens += other.tokens
        self.sentences += other.sentences
        self.long_sentences += other.long_sentences
        self.longest_sentence = max(self.longest_sentence, other.longest_sentence)
        self.dropped += other.dropped


@dataclass
class GroupReport:
    """What cutting one group (or, added up, the corpus) met: per-file counts and what reading found."""

    files: dict[str, FileStats] = field(default_factory=dict)
    read: ReadReport = field(default_factory=ReadReport)
    documents: int = 0
    instances: int = 0
    shared: list[str] = field(default_factory=list)  # documents sharing a paragraph with evaluation sets
    token_counts: dict[int, int] = field(default_factory=dict)  # of the training documents, by token id

    def file(self, path) -> FileStats:
        return self.files.setdefault(str(path), FileStats())

    def add(self, other: GroupReport) -> None:
        for path, stats in other.files.items():
            self.file(path).add(stats)
        self.read.formats.update(other.read.formats)
        self.read.fallback_decoded.update(other.read.fallback_decoded)
        self.read.characters += other.read.characters
        self.documents += other.documents
        self.instances += other.instances
        self.shared += other.shared
        for token, count in other.token_counts.items():
            self.token_counts[token] = self.token_counts.get(token, 0) + count

    def as_dict(self) -> dict:
        return {"files": {p: vars(f) for p, f in self.files.items()}, "read": self.read.as_dict(),
                "documents": self.documents, "instances": self.instances, "shared": self.shared,
                "token_counts": {str(t): c for t, c in self.token_counts.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> GroupReport:
        read = ReadReport(dict(data["read"]["formats"]), dict(data["read"]["fallback_decoded"]),
                          data["read"]["characters"])
        return cls({p: FileStats(**f) for p, f in data["files"].items()}, read, data["documents"], data["instances"],
                   list(data.get("shared", [])), {int(t): c for t, c in data.get("token_counts", {}).items()})


def _covered(instances: list, own_b: bool, sop: bool = False) -> int:
    """Tokens of its own document(s) that instances hold: A always, B when it is the actual next
    segment (a random B comes from another document, whose own instances count it); with ``sop`` both
    segments always (the label says the order, not the origin)."""
    if not instances:
        return 0
    array = np.asarray(instances, dtype=np.int64).reshape(-1, 5)
    covered = int(array[:, 1].sum())
    if sop:
        return covered + int(array[:, 3].sum())
    if own_b:
        covered += int(array[array[:, 4] == 0, 3].sum())
    return covered


def read_group_documents(files: list[Path], s: InstanceSettings, report: ReadReport) -> list[tuple[int, str]]:
    """The group's documents as (index of their file, text), in file order (empty documents skipped)."""
    documents = []
    for index, path in enumerate(files):
        boundary, regex = (s.file_boundaries or {}).get(str(path), (s.doc_boundary, s.document_regex))
        documents.extend((index, text) for text in iter_file_documents(path, s.encoding_fallback, boundary, regex,
                                                                          report, column_of(path, s.text_columns)))
    return documents


def held_out(num_documents: int, s: InstanceSettings, rng: random.Random, files: list[Path]) -> list[int]:
    """The validation documents of a group of ``num_documents`` (their indices, sorted): a seeded shuffle,
    ``val_fraction`` of them and at least ``min_val_documents``. Draws from ``rng`` as the split always has."""
    order = list(range(num_documents))
    rng.shuffle(order)
    num_val = max(s.min_val_documents, round(s.val_fraction * num_documents)) if s.val_fraction > 0 else 0
    min_docs = 2 if s.nsp and s.layout != "sop" else 1  # NotNext needs another document in the same split
    if num_val and (num_val < min_docs or num_documents - num_val < min_docs):
        named = ", ".join(str(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")
        raise CorpusError(
            f"the corpus files {named} hold {num_documents} documents: too few to hold out {num_val} for "
            f"validation and keep {min_docs}+ in each split (see data.instances.doc_boundary, "
            "data.instances.val_fraction, data.prepare.group_bytes)"
        )
    return sorted(order[:num_val])


class _Tokens:
    """A group's documents tokenized into one flat array; a document is the array of its sentence
    boundaries. Documents that are not tokenized leave a gap of one position where they stand, so two
    documents are adjacent in the array only when they are in the group (packing reads adjacency)."""

    def __init__(self):
        self.parts: list[np.ndarray] = []
        self.offset = 0

    def add(self, sentence_ids: list[np.ndarray]) -> np.ndarray:
        lengths = np.fromiter((len(x) for x in sentence_ids), dtype=np.int64, count=len(sentence_ids))
        bounds = self.offset + np.concatenate([[0], np.cumsum(lengths)])
        self.parts.append(np.concatenate(sentence_ids))
        self.offset = int(bounds[-1])
        return bounds

    def skip(self) -> None:
        self.parts.append(np.zeros(1, dtype=np.int32))
        self.offset += 1

    def array(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int32)


def _tokenize(text: str, tokenizer: Tokenizer, s: InstanceSettings, stats: FileStats) -> list[np.ndarray]:
    sentences = document_sentences(text, s.line_is_sentence)
    encodings = tokenizer.encode_batch(sentences, add_special_tokens=False) if sentences else []
    ids = [np.asarray(e.ids, dtype=np.int32) for e in encodings if e.ids]
    if ids:
        stats.sentences += len(ids)
        stats.tokens += sum(len(x) for x in ids)
        longest = max(len(x) for x in ids)
        stats.longest_sentence = max(stats.longest_sentence, longest)
        if s.nsp and longest > s.max_seq_length - 3:
            stats.long_sentences += sum(len(x) > s.max_seq_length - 3 for x in ids)
    return ids


def _make_instances(documents: list[np.ndarray], s: InstanceSettings, rng: random.Random) -> list[list]:
    """Each document's instances (one list a document), ``dupe_factor`` times over: BERT's pairs or the
    objective's layout (see :func:`instance_layout`)."""
    made = []
    for _ in range(s.dupe_factor):
        if s.nsp:
            for index in range(len(documents)):
                if s.layout == "sentence_pair":
                    made.append(create_sentence_pairs_from_document(documents, index, s.max_seq_length, rng))
                elif s.layout == "sop":
                    made.append(create_sop_instances_from_document(
                        documents, index, s.max_seq_length, s.short_seq_prob, rng, s.short_seq_per_document))
                else:
                    made.append(create_instances_from_document(
                        documents, index, s.max_seq_length, s.short_seq_prob, rng, s.short_seq_per_document))
        else:  # packing cuts long sentences into pieces: nothing is dropped
            made.append(_PACKERS[s.layout](documents, s.max_seq_length))
    return made


@dataclass
class GroupInstances:
    """One split of a group: its tokens (flat), where its documents start (and the end, last), its
    instances ``(a_start, a_len, b_start, b_len, label)`` into the tokens, in the order they were made,
    and which of the group's documents (their numbers in reading order) it holds."""

    tokens: np.ndarray
    doc_starts: np.ndarray
    instances: np.ndarray
    report: GroupReport
    documents: list[int]


def cut_group(files: list[Path], tokenizer: Tokenizer, s: InstanceSettings, group: int, split: str,
              overlap: Overlap | None = None) -> GroupInstances:
    """The instances of one split (``train`` or ``val``) of the group of ``files``.

    The documents are read, the validation ones drawn, and what the split needs tokenized: the
    validation split its own documents; the training split every document, since the validation
    instances are made first from the same random generator (so a single group gives exactly what the
    whole corpus gave before groups existed). The training pass also names the documents that share a
    paragraph with the evaluation sets of ``overlap`` (:mod:`bert_exp.data.corpus.overlap`)."""
    if s.max_seq_length < 8:
        raise CorpusError(f"data.instances.max_seq_length={s.max_seq_length} is too short for sentence pairs")
    if split not in ("train", "val"):
        raise ValueError(f"split={split!r}: train or val")
    report = GroupReport()
    texts = read_group_documents(files, s, report.read)
    if not texts:
        raise CorpusError(f"the corpus files {[str(f) for f in files[:3]]}... hold no text")
    if overlap is not None and split == "train":
        report.shared = [f"{files[f]}: {' '.join(t.split()[:8])} ..." for f, t in texts if overlap.shares_text(t)]
    rng = random.Random(s.seed + group)
    val = held_out(len(texts), s, rng, files)
    wanted = set(val) if split == "val" else set(range(len(texts)))
    tokens, documents, doc_files, is_val, numbers = _Tokens(), [], [], [], []
    for index, (file_index, text) in enumerate(texts):
        if index not in wanted:
            tokens.skip()
            continue
        scratch = FileStats()  # counted for the split's own documents only
        ids = _tokenize(text, tokenizer, s, scratch)
        if not ids:
            tokens.skip()
            continue
        if (index in val) == (split == "val"):
            report.file(files[file_index]).add(scratch)
        documents.append(tokens.add(ids))
        doc_files.append(file_index)
        is_val.append(index in val)
        numbers.append(index)
    # the validation documents' instances come first from the generator, as they always have
    held = [d for d, v in zip(documents, is_val) if v]
    made = _make_instances(held, s, rng)
    if split == "train":
        own = [d for d, v in zip(documents, is_val) if not v]
        own_files = [f for f, v in zip(doc_files, is_val) if not v]
        made = _make_instances(own, s, rng)
    else:
        own, own_files = held, doc_files
    if s.nsp:  # tokens lost: what the first copy's instances of each document leave out
        for bounds, file_index, instances in zip(own, own_files, made[: len(own)]):
            report.file(files[file_index]).dropped += \
                int(bounds[-1] - bounds[0]) - _covered(instances, own_b=True, sop=s.layout == "sop")
    instances = [i for per_document in made for i in per_document]
    report.documents, report.instances = len(own), len(instances)
    flat = tokens.array()
    if split == "train" and own:  # what a masked token is, by frequency: the unigram level of the MLM loss
        counts = np.bincount(np.concatenate([flat[int(d[0]) : int(d[-1])] for d in own]))
        report.token_counts = {int(t): int(c) for t, c in enumerate(counts) if c}
    if split == "val":
        report.read = ReadReport()  # what reading found is the training split's to report (the same files)
    doc_starts = np.array([int(d[0]) for d in own] + [tokens.offset], dtype=np.int64)
    array = np.asarray(instances, dtype=np.int64).reshape(-1, 5)
    mine = [n for n, v in zip(numbers, is_val) if v == (split == "val")]
    return GroupInstances(flat, doc_starts, array, report, mine)


def assemble(tokens: np.ndarray, doc_starts: np.ndarray, instance, cls_id: int, sep_id: int
             ) -> tuple[np.ndarray, int, int]:
    """An instance's token ids ``[CLS] A [SEP] (B [SEP])``, the position where B starts (where the token
    types turn 1; the length when there is no B) and its label (-1: none). A packed MLM instance that
    spans documents gets a [SEP] between them."""
    a_start, a_len, b_start, b_len, label = (int(x) for x in instance)
    a = tokens[a_start : a_start + a_len]
    if label < 0:  # MLM only: a [SEP] goes between the documents a packed instance spans
        inner = doc_starts[np.searchsorted(doc_starts, a_start, side="right"):]
        inner = inner[inner < a_start + a_len] - a_start
        if len(inner):
            a = np.insert(a, inner, sep_id)
    parts = [[cls_id], a, [sep_id]]
    if b_len:
        parts += [tokens[b_start : b_start + b_len], [sep_id]]
    return np.concatenate(parts), len(a) + 2, label


def data_report(report: GroupReport, files: list[Path], seconds: float | None = None,
                overlap: Overlap | None = None) -> dict:
    """The report a run records (``run.json`` ``data_report``), from the groups' reports added up; names
    the files whose sentences an instance cuts short, or that lose most of their tokens."""
    stats = [report.files.get(str(p), FileStats()) for p in files]
    tokens = sum(f.tokens for f in stats)
    dropped = sum(f.dropped for f in stats)
    truncated = {
        str(path): {"tokens": f.tokens, "tokens_dropped": f.dropped, "long_sentences": f.long_sentences,
                    "longest_sentence": f.longest_sentence}
        for path, f in zip(files, stats)
        if f.long_sentences or f.dropped > DROPPED_WARNING_FRACTION * max(f.tokens, 1)
    }
    return {
        "files": len(files),
        "formats": dict(Counter(report.read.formats.get(str(p), "plain") for p in files)),
        "characters": report.read.characters,
        "documents": report.documents,
        "sentences": sum(f.sentences for f in stats),
        "tokens": tokens,
        "instances": report.instances,
        "tokens_dropped": dropped,
        "unigram_entropy": unigram_entropy(report.token_counts),
        "tokens_dropped_fraction": dropped / tokens if tokens else 0.0,
        "long_sentences": sum(f.long_sentences for f in stats),
        "truncated_files": truncated,
        "fallback_decoded": dict(report.read.fallback_decoded),
        "build_seconds": None if seconds is None else round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds else None,
        **({"evaluation_overlap": {"checked_against": list(overlap.sources), "documents": len(report.shared),
                                   "examples": report.shared[:10]}} if overlap is not None else {}),
    }


def unigram_entropy(counts: dict[int, int]) -> float | None:
    """The entropy (nats) of the training tokens' frequencies: the masked-LM loss of a model that has
    learned nothing but how often each token occurs (the plateau pre-training leaves first)."""
    total = sum(counts.values())
    if not total:
        return None
    p = np.array(list(counts.values()), dtype=np.float64) / total
    return round(float(-(p * np.log(p)).sum()), 4)


def warn_about_losses(report: dict, max_seq_length: int) -> None:
    """Names the files of which instances keep little: sentences far longer than an instance (text
    without sentence punctuation?), and files that lose most of their tokens to truncation."""
    limit = max_seq_length - 3
    cut = sorted(((path, f) for path, f in report["truncated_files"].items()
                  if f["longest_sentence"] > CUT_WARNING_FACTOR * limit), key=lambda pf: -pf[1]["longest_sentence"])
    for path, f in cut[:CUT_WARNING_FILES]:
        log.warning(
            "%s: %d sentence(s) longer than an instance (%d tokens: data.instances.max_seq_length - 3); the "
            "longest, %d tokens, keeps only its first %d. Text without sentence punctuation? (see "
            "data.instances.line_is_sentence, data.nsp=false)", path, f["long_sentences"], limit,
            f["longest_sentence"], limit)
    if len(cut) > CUT_WARNING_FILES:
        log.warning("... and %d more file(s) with a sentence over %d tokens (run.json data_report.truncated_files)",
                    len(cut) - CUT_WARNING_FILES, CUT_WARNING_FACTOR * limit)
    long_files = [p for p, f in report["truncated_files"].items() if f["long_sentences"]]
    if long_files:
        log.info("%d sentence(s) in %d file(s) are longer than an instance (%d tokens): their tails are dropped "
                 "(run.json data_report.truncated_files)", report["long_sentences"], len(long_files), limit)
    shared = report.get("evaluation_overlap", {})
    if shared.get("documents"):
        log.warning("%d pre-training document(s) share a paragraph with the evaluation sets %s, e.g. %s: scores on "
                    "those sets would be inflated; leave those documents out of the corpus", shared["documents"],
                    ", ".join(shared["checked_against"]), shared["examples"][0])
    heavy = [p for p, f in report["truncated_files"].items()
             if f["tokens_dropped"] > DROPPED_WARNING_FRACTION * max(f["tokens"], 1)]
    if heavy:
        log.warning("%d file(s) lose more than %d%% of their tokens to truncation, e.g. %s", len(heavy),
                    round(100 * DROPPED_WARNING_FRACTION), ", ".join(heavy[:3]))

"""The pre-training corpus cache: token ids and instance spans on disk, memory-mapped for training.

Layout of a cache directory (named by a hash of the input files' contents, the vocabulary and every
data setting that changes instances)::

    tokens.npy       all sentences' token ids, flat (uint16 when the vocabulary allows)
    doc_starts.npy   offset of each document's first token (and the total, last)
    train.npy        instances of the training documents, int64 [N, 5] (see instances.py)
    val.npy          instances of the held-out documents
    meta.json        counts, files and their sha256, settings, and the data report (below)

It is built once, into a temporary directory renamed into place, so concurrent builders (DDP ranks on
a shared file system) cannot leave a half-written cache.

The data report (``meta.json["report"]``, JSON) says what went in and what was lost: files by format,
documents, sentences, tokens, the files decoded with the encoding fallback and how many bytes each
needed it, tokens per second of the build, and the tokens that no instance holds. With NSP a sentence
longer than an instance (``max_seq_length - 3`` tokens) is cut to that length, and the rest of it is
dropped: text without sentence punctuation (one line of 1 MB is one "sentence") loses almost all of
itself. Each file that has such sentences gets a warning on the ``bert_exp.data`` logger, and the
report counts the dropped tokens per such file and in total.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from .instances import (
    create_instances_from_document,
    create_sentence_pairs_from_document,
    create_sop_instances_from_document,
    pack_doc_sentences,
    pack_full_sentences,
    pack_token_blocks,
)
from .masking import IGNORE_INDEX
from ..records import write_json
from .text import CorpusError, ReadReport, iter_documents

log = logging.getLogger("bert_exp.data")

# a file whose instances leave out more than this fraction of its tokens is named in a warning
DROPPED_WARNING_FRACTION = 0.5  # BERT's own pair truncation drops some 15 % anywhere
# a sentence this many times longer than an instance (an instance keeps under a quarter of it) is named
CUT_WARNING_FACTOR = 4

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
    # None: BERT's segment pairs (nsp) or RoBERTa's full sentences (not nsp); with nsp "sentence_pair"
    # or "sop" (ALBERT's sentence order), without "doc_sentences" or "token_blocks" (see instance_layout)
    layout: str | None = None


@dataclass
class _FileStats:
    tokens: int = 0
    sentences: int = 0
    long_sentences: int = 0  # longer than an NSP instance can hold
    longest_sentence: int = 0
    dropped: int = 0  # tokens no instance holds


def _tokenize_documents(files: list[Path], tokenizer: Tokenizer, s: InstanceSettings):
    """Yields each document's sentences as token-id arrays (empty sentences dropped)."""
    for _, ids in _tokenize_by_file(files, tokenizer, s, ReadReport(), [_FileStats() for _ in files]):
        yield ids


def _tokenize_by_file(files: list[Path], tokenizer: Tokenizer, s: InstanceSettings, read: ReadReport,
                      stats: list[_FileStats]):
    """Yields each document's (file index, sentences as token-id arrays), counting into ``read`` and
    ``stats``."""
    docs = iter_documents(files, s.encoding_fallback, s.doc_boundary, s.document_regex, s.line_is_sentence,
                          report=read, with_file_index=True, boundaries=s.file_boundaries)
    for file_index, sentences in docs:
        encodings = tokenizer.encode_batch(sentences, add_special_tokens=False)
        ids = [np.asarray(e.ids, dtype=np.int32) for e in encodings if e.ids]
        if ids:
            stat = stats[file_index]
            stat.sentences += len(ids)
            longest = max(len(x) for x in ids)
            stat.longest_sentence = max(stat.longest_sentence, longest)
            if s.nsp and longest > s.max_seq_length - 3:
                stat.long_sentences += sum(len(x) > s.max_seq_length - 3 for x in ids)
            yield file_index, ids


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


class _ArrayAppender:
    """Appends arrays of one dtype and row width to a raw file, then turns it into a ``.npy`` file, in
    blocks: the cache is built with memory that does not grow with the corpus."""

    BLOCK_BYTES = 64 << 20

    def __init__(self, path: Path, dtype, width: int = 1):
        self.path, self.dtype, self.width = path, np.dtype(dtype), width
        self.raw = path.with_suffix(".part")
        self.file = open(self.raw, "wb")  # noqa: SIM115 - closed in finish()
        self.count = 0

    def append(self, values) -> None:
        array = np.asarray(values, dtype=self.dtype)
        self.file.write(array.tobytes())
        self.count += array.size

    def finish(self) -> int:
        """Writes the ``.npy`` header, then copies the raw bytes behind it (plain writes, not a memory
        map, whose dirty pages would count as this process's memory)."""
        self.file.close()
        shape = (self.count // self.width, self.width) if self.width > 1 else (self.count,)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
        with open(self.path, "wb") as out, open(self.raw, "rb") as raw:
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(raw, out, self.BLOCK_BYTES)
        self.raw.unlink()
        return shape[0]


def build_corpus_cache(files: list[Path], tokenizer: Tokenizer, directory: Path, settings: InstanceSettings,
                       file_checksums: dict[str, str]) -> dict:
    """Tokens and instances stream to disk as they are made; what stays in memory is each document's
    sentence offsets (8 bytes a sentence), which instance creation reads at random for NotNext pairs.
    Returns the data report (also written to ``meta.json``)."""
    s = settings
    if s.max_seq_length < 8:
        raise CorpusError(f"data.instances.max_seq_length={s.max_seq_length} is too short for sentence pairs")
    token_dtype = np.uint16 if tokenizer.get_vocab_size() <= np.iinfo(np.uint16).max + 1 else np.int32
    started = time.perf_counter()
    read, stats = ReadReport(), [_FileStats() for _ in files]

    tokens = _ArrayAppender(directory / "tokens.npy", token_dtype)
    documents, doc_files, offset = [], [], 0
    for file_index, sentence_ids in tqdm(_tokenize_by_file(files, tokenizer, s, read, stats),
                                         desc="tokenizing corpus", unit=" docs"):
        lengths = np.fromiter((len(x) for x in sentence_ids), dtype=np.int64, count=len(sentence_ids))
        bounds = offset + np.concatenate([[0], np.cumsum(lengths)])
        documents.append(bounds)
        doc_files.append(file_index)
        tokens.append(np.concatenate(sentence_ids))
        stats[file_index].tokens += int(bounds[-1] - bounds[0])
        offset = int(bounds[-1])
    tokens.finish()
    tokenize_seconds = time.perf_counter() - started
    if not documents:
        raise CorpusError(f"the corpus files {[str(f) for f in files[:3]]}... hold no text")
    limit = s.max_seq_length - 3
    cut_short = [(path, stat) for path, stat in zip(files, stats) if stat.longest_sentence > CUT_WARNING_FACTOR * limit]
    for path, stat in cut_short:  # a sentence of which an instance keeps a small fraction: named
        log.warning(
            "%s: %d sentence(s) longer than an instance (%d tokens: data.instances.max_seq_length - 3); the longest, "
            "%d tokens, keeps only its first %d. Text without sentence punctuation? (see "
            "data.instances.line_is_sentence, data.nsp=false)", path, stat.long_sentences, limit,
            stat.longest_sentence, limit)
    long_files = sum(1 for stat in stats if stat.long_sentences)
    if long_files > len(cut_short):  # long but ordinary sentences: one line; the data report has each file
        log.info("%d sentence(s) in %d file(s) are longer than an instance (%d tokens): their tails are dropped "
                 "(run.json data_report.truncated_files)", sum(st.long_sentences for st in stats), long_files, limit)
    doc_starts = np.array([d[0] for d in documents] + [offset], dtype=np.int64)

    rng = random.Random(s.seed)
    order = list(range(len(documents)))
    rng.shuffle(order)
    num_val = max(s.min_val_documents, round(s.val_fraction * len(documents))) if s.val_fraction > 0 else 0
    min_docs = 2 if s.nsp and s.layout != "sop" else 1  # NotNext needs another document in the same split
    if num_val and (num_val < min_docs or len(documents) - num_val < min_docs):
        raise CorpusError(
            f"the corpus has {len(documents)} documents: too few to hold out {num_val} for validation "
            f"and keep {min_docs}+ in each split (see data.instances.doc_boundary, data.instances.val_fraction)"
        )
    splits = {"val": sorted(order[:num_val]), "train": sorted(order[num_val:])}

    counts = {}
    for split, doc_ids in splits.items():
        split_docs = [documents[i] for i in doc_ids]
        instances = _ArrayAppender(directory / f"{split}.npy", np.int64, width=5)
        for copy in range(s.dupe_factor):
            if s.nsp:
                for index in range(len(split_docs)):
                    if s.layout == "sentence_pair":
                        made = create_sentence_pairs_from_document(split_docs, index, s.max_seq_length, rng)
                    elif s.layout == "sop":
                        made = create_sop_instances_from_document(
                            split_docs, index, s.max_seq_length, s.short_seq_prob, rng, s.short_seq_per_document)
                    else:
                        made = create_instances_from_document(
                            split_docs, index, s.max_seq_length, s.short_seq_prob, rng, s.short_seq_per_document)
                    if copy == 0:  # tokens lost: what the first copy's instances of a document leave out
                        bounds = split_docs[index]
                        stats[doc_files[doc_ids[index]]].dropped += \
                            int(bounds[-1] - bounds[0]) - _covered(made, own_b=True, sop=s.layout == "sop")
                    instances.append(np.asarray(made, dtype=np.int64).reshape(-1))
            else:  # packing cuts long sentences into pieces: nothing is dropped
                pack = _PACKERS[s.layout]
                instances.append(np.asarray(pack(split_docs, s.max_seq_length), dtype=np.int64).reshape(-1))
        counts[split] = {"documents": len(doc_ids), "instances": instances.finish()}

    np.save(directory / "doc_starts.npy", doc_starts)
    seconds = time.perf_counter() - started
    report = _data_report(files, stats, read, len(documents), offset, seconds, tokenize_seconds)
    log.info("corpus cache: %d files, %d documents, %d tokens in %.1f s (%.0f tokens/s); %d tokens (%.2f%%) dropped "
             "by truncation", len(files), len(documents), offset, seconds, report["tokens_per_second"],
             report["tokens_dropped"], 100 * report["tokens_dropped_fraction"])
    noisy = report["truncated_files"]
    heavy = [p for p, f in noisy.items() if f["tokens_dropped"] > DROPPED_WARNING_FRACTION * max(f["tokens"], 1)]
    if heavy:
        log.warning("%d file(s) lose more than %d%% of their tokens to truncation, e.g. %s", len(heavy),
                    round(100 * DROPPED_WARNING_FRACTION), ", ".join(heavy[:3]))
    meta = {"tokens": offset, "documents": len(documents), "splits": counts,
            "files": file_checksums, "settings": s.__dict__, "report": report}
    write_json(directory / "meta.json", meta, indent=1)
    return report


def _data_report(files, stats, read: ReadReport, documents: int, tokens: int, seconds: float,
                 tokenize_seconds: float) -> dict:
    dropped = sum(f.dropped for f in stats)
    truncated = {
        str(path): {"tokens": f.tokens, "tokens_dropped": f.dropped, "long_sentences": f.long_sentences,
                    "longest_sentence": f.longest_sentence}
        for path, f in zip(files, stats)
        if f.long_sentences or f.dropped > DROPPED_WARNING_FRACTION * max(f.tokens, 1)
    }
    return {
        "files": len(files),
        "formats": dict(Counter(read.formats.get(str(p), "plain") for p in files)),
        "characters": read.characters,
        "documents": documents,
        "sentences": sum(f.sentences for f in stats),
        "tokens": tokens,
        "tokens_dropped": dropped,
        "tokens_dropped_fraction": dropped / tokens if tokens else 0.0,
        "long_sentences": sum(f.long_sentences for f in stats),
        "truncated_files": truncated,
        "fallback_decoded": dict(read.fallback_decoded),
        "build_seconds": round(seconds, 3),
        "tokenize_seconds": round(tokenize_seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else None,
    }


class PretrainingDataset(torch.utils.data.Dataset):
    """Instances of one split, assembled as ``[CLS] A [SEP] B [SEP]`` from the memory-mapped tokens.

    The arrays are opened lazily in each process, so DataLoader workers share the page cache instead
    of each receiving a pickled copy of the corpus.
    """

    def __init__(self, directory: Path, split: str, cls_id: int, sep_id: int, mask_seed: int = 0,
                 static_masks: bool = False):
        self.directory, self.split = Path(directory), split
        self.cls_id, self.sep_id = cls_id, sep_id
        self.mask_seed, self.static_masks = mask_seed, static_masks
        self._arrays = None
        self._length = int(np.load(self.directory / f"{split}.npy", mmap_mode="r").shape[0])

    def _open(self):
        if self._arrays is None:
            self._arrays = tuple(
                np.load(self.directory / f"{name}.npy", mmap_mode="r") for name in ("tokens", self.split, "doc_starts")
            )
        return self._arrays

    def __getstate__(self):
        return {**self.__dict__, "_arrays": None}

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict:
        # a training sampler tags indices with the epoch (epoch * len + index): dynamic masks differ
        # per epoch, and depend on nothing else, so a resumed run draws the same ones
        epoch, index = divmod(index, self._length)
        tokens, instances, doc_starts = self._open()
        a_start, a_len, b_start, b_len, label = (int(x) for x in instances[index])
        a = np.asarray(tokens[a_start : a_start + a_len], dtype=np.int64)
        if label < 0:  # MLM only: a [SEP] goes between the documents a packed instance spans
            inner = doc_starts[np.searchsorted(doc_starts, a_start, side="right"):]
            inner = inner[inner < a_start + a_len] - a_start
            a = np.insert(a, inner, self.sep_id)
        parts = [[self.cls_id], a, [self.sep_id]]
        if b_len:
            parts += [np.asarray(tokens[b_start : b_start + b_len], dtype=np.int64), [self.sep_id]]
        input_ids = np.concatenate(parts).astype(np.int64)
        token_type_ids = np.zeros_like(input_ids)
        token_type_ids[len(a) + 2 :] = 1
        nsp_label = label if label >= 0 else IGNORE_INDEX
        sample = {"input_ids": input_ids, "token_type_ids": token_type_ids, "next_sentence_label": nsp_label}
        sample["mask_seed"] = self.mask_seed * 1_000_003 + index
        if not self.static_masks:
            sample["mask_seed"] = sample["mask_seed"] * 1_000_033 + epoch
        return sample

"""The pre-training corpus cache: token ids and instance spans on disk, memory-mapped for training.

Layout of a cache directory (named by a hash of the input files' contents, the vocabulary and every
data setting that changes instances)::

    tokens.npy       all sentences' token ids, flat (uint16 when the vocabulary allows)
    doc_starts.npy   offset of each document's first token (and the total, last)
    train.npy        instances of the training documents, int64 [N, 5] (see instances.py)
    val.npy          instances of the held-out documents
    meta.json        counts, files and their sha256, settings

It is built once, into a temporary directory renamed into place, so concurrent builders (DDP ranks on
a shared file system) cannot leave a half-written cache.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from .instances import create_instances_from_document, pack_full_sentences
from .masking import IGNORE_INDEX
from ..records import write_json
from .text import CorpusError, iter_documents


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


def _tokenize_documents(files: list[Path], tokenizer: Tokenizer, s: InstanceSettings):
    """Yields each document's sentences as token-id arrays (empty sentences dropped)."""
    docs = iter_documents(files, s.encoding_fallback, s.doc_boundary, s.document_regex, s.line_is_sentence)
    for sentences in docs:
        encodings = tokenizer.encode_batch(sentences, add_special_tokens=False)
        ids = [np.asarray(e.ids, dtype=np.int32) for e in encodings if e.ids]
        if ids:
            yield ids


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
                       file_checksums: dict[str, str]) -> None:
    """Tokens and instances stream to disk as they are made; what stays in memory is each document's
    sentence offsets (8 bytes a sentence), which instance creation reads at random for NotNext pairs."""
    s = settings
    if s.max_seq_length < 8:
        raise CorpusError(f"data.max_seq_length={s.max_seq_length} is too short for sentence pairs")
    token_dtype = np.uint16 if tokenizer.get_vocab_size() <= np.iinfo(np.uint16).max + 1 else np.int32

    tokens = _ArrayAppender(directory / "tokens.npy", token_dtype)
    documents, offset = [], 0
    for sentence_ids in tqdm(_tokenize_documents(files, tokenizer, s), desc="tokenizing corpus", unit=" docs"):
        lengths = np.fromiter((len(x) for x in sentence_ids), dtype=np.int64, count=len(sentence_ids))
        bounds = offset + np.concatenate([[0], np.cumsum(lengths)])
        documents.append(bounds)
        tokens.append(np.concatenate(sentence_ids))
        offset = int(bounds[-1])
    tokens.finish()
    if not documents:
        raise CorpusError(f"the corpus files {[str(f) for f in files[:3]]}... hold no text")
    doc_starts = np.array([d[0] for d in documents] + [offset], dtype=np.int64)

    rng = random.Random(s.seed)
    order = list(range(len(documents)))
    rng.shuffle(order)
    num_val = max(s.min_val_documents, round(s.val_fraction * len(documents))) if s.val_fraction > 0 else 0
    min_docs = 2 if s.nsp else 1  # NotNext needs another document in the same split
    if num_val and (num_val < min_docs or len(documents) - num_val < min_docs):
        raise CorpusError(
            f"the corpus has {len(documents)} documents: too few to hold out {num_val} for validation "
            f"and keep {min_docs}+ in each split (see data.doc_boundary, data.val_fraction)"
        )
    splits = {"val": sorted(order[:num_val]), "train": sorted(order[num_val:])}

    counts = {}
    for split, doc_ids in splits.items():
        split_docs = [documents[i] for i in doc_ids]
        instances = _ArrayAppender(directory / f"{split}.npy", np.int64, width=5)
        for _ in range(s.dupe_factor):
            if s.nsp:
                for index in range(len(split_docs)):
                    instances.append(np.asarray(create_instances_from_document(
                        split_docs, index, s.max_seq_length, s.short_seq_prob, rng, s.short_seq_per_document),
                        dtype=np.int64).reshape(-1))
            else:
                instances.append(np.asarray(pack_full_sentences(split_docs, s.max_seq_length),
                                            dtype=np.int64).reshape(-1))
        counts[split] = {"documents": len(doc_ids), "instances": instances.finish()}

    np.save(directory / "doc_starts.npy", doc_starts)
    meta = {"tokens": offset, "documents": len(documents), "splits": counts,
            "files": file_checksums, "settings": s.__dict__}
    write_json(directory / "meta.json", meta, indent=1)


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

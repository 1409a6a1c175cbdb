"""What a prepared dataset is, and whether the copy at hand is it.

- **Identity** (:func:`identity`): a hash of the content alone: the vocabulary's sha256 and every chunk's
  name, size, item count and sha256 (the bytes hold every setting's effect). Copies prepared on two
  machines, at other times or with other numbers of workers, have the same identity (the layout depends
  on the groups alone: :mod:`bert_exp.data.corpus.preparation`); timings, worker counts and the inputs' paths
  are not part of it. Every rank of a run compares it with rank 0's before the first step,
  and a checkpoint records it, so a resume onto other data stops.
- **Chunks present and whole** (:func:`check_chunks`): every chunk the index names is there with its size
  (each launch: a listing); on a local copy, each chunk's sha256 is checked once per file version
  (:func:`verify_checksums`: size and mtime remembered in the cache, so a chunk rewritten in place is read
  again); an object store's chunks are checked by size, and each is checked against its sha256 once
  after it is downloaded into the node's stream cache (:class:`DownloadedChunks`).
- **Items whole** (:class:`ItemRules`): wherever the chunk came from, every field of every item read is
  checked against what preparation writes (token ids in the vocabulary, [CLS] first and [SEP] last, a
  length within ``max_seq_length``, segment B starting after a [SEP], a next-sentence label the objective
  has), so damaged bytes that still unpack stop the run, named, instead of training or failing deep
  inside the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...records import write_json
from ..hashing import file_sha256
from .storage import Location, PreparedDataError, is_disk_full

log = logging.getLogger("bert_exp.data")

SPLITS = ("val", "train")


def read_meta(location: Location) -> dict | None:
    """The dataset's ``meta.json``; None while it is incomplete (being prepared, or prepared no further)."""
    text = location.read_text("meta.json")
    if text is None:
        return None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise PreparedDataError(f"{location.join('meta.json')}: not valid JSON ({err.msg}, line {err.lineno}); "
                                "delete the prepared dataset to prepare it again") from None
    problem = _meta_problem(meta)
    if problem:
        raise PreparedDataError(f"{location.join('meta.json')}: not a prepared dataset's record ({problem}); "
                                "delete the prepared dataset to prepare it again")
    return meta


_CHUNK_KEYS = ("filename", "chunk_bytes", "chunk_size", "sha256")


def _meta_problem(meta) -> str | None:
    """What a parsed meta.json lacks of what the readers use, or None."""
    if not isinstance(meta, dict):
        return "not an object"
    missing = [key for key in ("identity", "chunks", "splits", "report") if key not in meta]
    if missing:
        return f"no {', '.join(missing)}"
    for split in SPLITS:
        chunks = meta["chunks"].get(split) if isinstance(meta["chunks"], dict) else None
        if not isinstance(chunks, list) or not all(isinstance(c, dict) and all(k in c for k in _CHUNK_KEYS)
                                                   for c in chunks):
            return f"chunks.{split} is not a list of chunks ({', '.join(_CHUNK_KEYS)})"
    return None


def identity(vocabulary_sha256: str, chunks: dict[str, list[dict]]) -> str:
    """The content's identity: the vocabulary and each split's chunks (name, bytes, items, sha256). The
    chunks' bytes hold every setting's effect; the key is left out, as it holds the inputs' paths, which
    may be spelt otherwise on another machine or in a resumed run."""
    content = {split: [[c["filename"], c["chunk_bytes"], c["chunk_size"], c["sha256"]] for c in chunks[split]]
               for split in SPLITS}
    blob = json.dumps([vocabulary_sha256, content], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def read_index(location: Location, split: str) -> list[dict]:
    name = f"{split}/index.json"
    text = location.read_text(name)
    if text is None:
        raise PreparedDataError(f"{location.join(name)}: missing (the prepared dataset is damaged; delete "
                                f"{location} to prepare it again)")
    try:
        return json.loads(text)["chunks"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise PreparedDataError(f"{location.join(name)}: not a litdata index (delete {location} to prepare "
                                "it again)") from None


def check_chunks(location: Location) -> None:
    """Every chunk each split's index names is there, with the size the index gives: a missing, cut or
    grown chunk (or a damaged index) stops here, named, instead of deep inside a loader worker."""
    for split in SPLITS:
        chunks = read_index(location, split)
        sizes = location.sizes(split)
        for chunk in chunks:
            size = sizes.get(chunk["filename"])
            if size is None:
                raise PreparedDataError(f"{location.join(split, chunk['filename'])}: missing (delete {location} to "
                                        "prepare the data again)")
            if size != chunk["chunk_bytes"]:
                raise PreparedDataError(f"{location.join(split, chunk['filename'])}: {size} bytes where the index "
                                        f"says {chunk['chunk_bytes']}: damaged (delete {location} to prepare the data "
                                        "again)")


def verify_checksums(location: Location, meta: dict, memo_dir: Path) -> int:
    """A local copy's chunks against the sha256 in meta.json, each once per file version (path, size,
    mtime: remembered under ``memo_dir``, this node's cache). Returns how many were read; a chunk that
    differs stops the run, named. An object store's copy is left to :func:`check_chunks` and the
    token-id check."""
    if location.remote:
        return 0
    memo_path = Path(memo_dir) / "verified" / f"{meta['identity']}.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    todo = []
    for split in SPLITS:
        for chunk in meta["chunks"][split]:
            path = Path(location.join(split, chunk["filename"]))
            stat = path.stat()
            version = [str(path.resolve()), stat.st_size, stat.st_mtime_ns]
            if memo.get(f"{split}/{chunk['filename']}") != version:
                todo.append((split, chunk, path, version))
    if not todo:
        return 0
    log.info("checking the sha256 of %d prepared chunk(s) in %s (once per chunk file)", len(todo), location)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # hashlib releases the GIL
        digests = list(pool.map(lambda item: file_sha256(item[2]), todo))
    for (split, chunk, path, version), digest in zip(todo, digests):
        if digest != chunk["sha256"]:
            raise PreparedDataError(f"{path}: its sha256 is not the one meta.json records: the chunk is damaged "
                                    f"(delete {location} to prepare the data again)")
        memo[f"{split}/{chunk['filename']}"] = version
    write_memo(memo_path, memo)
    return len(todo)


@dataclass(frozen=True)
class ItemRules:
    """What every stored item is (:func:`bert_exp.data.corpus.preparation.group_items`): token ids
    ``[CLS] A [SEP] (B [SEP])`` of at most ``max_seq_length``, and ``info`` = [uid, where B starts, label];
    with ``pairs`` (NSP, SOP) B is there and the label 0 or 1, otherwise B starts at the end and the
    label is -1. A handful of numpy reductions an item: nothing next to a training step."""

    vocab_size: int
    max_seq_length: int
    pairs: bool
    cls_id: int
    sep_id: int

    def problem(self, item: dict) -> str | None:
        """What is wrong with ``item`` (as litdata unpacked it), or None."""
        ids, info = np.asarray(item.get("input_ids")), np.asarray(item.get("info"))
        if ids.ndim != 1 or info.shape != (3,) or ids.dtype.kind not in "iu" or info.dtype.kind not in "iu":
            return f"an item of {ids.shape} token ids and {info.shape} info values (1-D ids and 3 info values)"
        n = len(ids)
        if not 2 <= n <= self.max_seq_length:
            return f"an item of {n} tokens (from 2 to data.instances.max_seq_length={self.max_seq_length})"
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= self.vocab_size:
            return f"token id {high if high >= self.vocab_size else low} outside the vocabulary of {self.vocab_size}"
        if ids[0] != self.cls_id or ids[-1] != self.sep_id:
            return "an item that does not start with [CLS] and end with [SEP]"
        uid, b_start, label = (int(x) for x in info)
        if uid < 0:
            return f"an item uid {uid} below 0"
        if self.pairs:
            if label not in (0, 1):
                return f"next-sentence label {label} (0 or 1)"
            if not 2 <= b_start < n or ids[b_start - 1] != self.sep_id:
                return f"segment B starting at {b_start} in {n} tokens (after a [SEP], before the end)"
        else:
            if label != -1:
                return f"next-sentence label {label} where the objective has none (-1)"
            if b_start != n:
                return f"segment B starting at {b_start} in an item of one segment of {n} tokens"
        return None


class DownloadedChunks:
    """The chunks of an object store's split as this node's stream cache holds them, each checked against
    the sha256 meta.json records once after it is downloaded: a chunk replaced in the store by another of
    the same size, or bytes damaged on the way, stop the run, named (and the download is removed, so the
    next run fetches it again). The version of the file checked (size, mtime, ctime, inode) is remembered
    under ``memo_dir`` (this node's cache), so a chunk kept between epochs or runs is not read again, and
    one downloaded again is. Loader workers that check at once may each read a chunk; none is skipped."""

    def __init__(self, location: str, split: str, meta: dict, memo_dir: Path):
        self.location, self.split = location, split
        self.sha256 = {chunk["filename"]: chunk["sha256"] for chunk in meta["chunks"][split]}
        self.memo = Path(memo_dir) / "verified" / f"{meta['identity']}-{split}-downloaded.json"
        self._current: tuple[str, str] | None = None  # the chunk this process reads now, checked

    def check(self, filename: str, local: str) -> None:
        if self._current == (filename, local):
            return
        stat = os.stat(local)
        version = [str(Path(local).resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
        try:
            memo = json.loads(self.memo.read_text())
        except (OSError, ValueError):
            memo = {}
        if memo.get(filename) != version:
            if file_sha256(Path(local)) != self.sha256.get(filename):
                Path(local).unlink(missing_ok=True)
                raise PreparedDataError(f"{self.location}/{self.split}/{filename}: its sha256 is not the one meta.json "
                                        "records: the chunk is damaged or was replaced (delete "
                                        f"{self.location} to prepare the data again)")
            memo[filename] = version
            write_memo(self.memo, memo)
        self._current = (filename, local)


def write_memo(path: Path, memo: dict) -> None:
    """A checksum memo in this node's cache, written whole; a full disk is one line naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, memo)
    except OSError as err:
        if is_disk_full(err):
            raise PreparedDataError(f"{path}: no space left on the device to remember which chunks were checked: "
                                    "free some space in the cache (BERT_EXP_CACHE)") from None
        raise

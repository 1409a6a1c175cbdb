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
  again); an object store's chunks are checked by size, and every token id read is checked against the
  vocabulary (:func:`check_token_ids`) wherever the chunk came from.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ...records import write_json
from ..hashing import file_sha256
from .storage import Location, PreparedDataError

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
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    write_json(memo_path, memo)
    return len(todo)


def check_token_ids(ids: np.ndarray, vocab_size: int, where: Callable[[], str]) -> None:
    """Token ids outside the vocabulary mean a damaged chunk (or data prepared with another vocabulary);
    ``where()`` names the chunk (worked out only then)."""
    if ids.size and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        bad = int(ids.max()) if int(ids.max()) >= vocab_size else int(ids.min())
        raise PreparedDataError(f"{where()}: token id {bad} outside the vocabulary of {vocab_size}: the chunk is "
                                "damaged (delete the prepared dataset to prepare it again)")

"""Content hashes that key the on-disk caches."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import OutOfSpace, is_disk_full
from ..records import write_json


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(paths: list[Path], memo_dir: Path | None = None) -> dict[str, str]:
    """Each file's sha256; with ``memo_dir`` (a cache directory), each file is read once per version
    (its resolved path, size and mtime), not on every launch."""
    return {str(p): (remembered_sha256(Path(p), Path(memo_dir)) if memo_dir else file_sha256(p)) for p in paths}


def remembered_sha256(path: Path, memo_dir: Path) -> str:
    """``file_sha256``, remembered under ``memo_dir/file_sha256`` for this version of the file."""
    stat = path.stat()
    resolved = str(path.resolve())
    version = [resolved, stat.st_size, stat.st_mtime_ns]
    memo = memo_dir / "file_sha256" / f"{hashlib.sha256(resolved.encode()).hexdigest()[:32]}.json"
    try:
        saved = json.loads(memo.read_text())
        if saved["version"] == version:
            return saved["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = file_sha256(path)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_json(memo, {"version": version, "sha256": digest})  # whole or absent, whoever else writes it
    except OSError as err:
        if is_disk_full(err):
            raise OutOfSpace(f"{memo.parent}: no space left on the device while remembering the sha256 of {path}: free "
                             "some space in the cache (BERT_EXP_CACHE)") from None
        raise
    return digest


def config_key(*parts) -> str:
    """A short stable hash of JSON-serialisable parts (dicts are key-sorted)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]

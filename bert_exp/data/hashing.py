"""Content hashes that key the on-disk caches."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import OutOfSpace, is_disk_full
from ..records import write_json


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_version(path: Path) -> list[int]:
    """What tells a file changed without reading it, as git's index does: its size, modification and
    change times, and inode. ``touch -r`` after an edit puts the mtime back, never the ctime; a file
    written anew and renamed into place has another inode."""
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def files_sha256(paths: list[Path], memo_dir: Path | None = None) -> dict[str, str]:
    """Each file's sha256; with ``memo_dir`` (a cache directory), each file is read once per version
    (its resolved path and :func:`file_version`), not on every launch."""
    return {str(p): (remembered_sha256(Path(p), Path(memo_dir)) if memo_dir else file_sha256(p)) for p in paths}


def remembered_sha256(path: Path, memo_dir: Path) -> str:
    """``file_sha256``, remembered under ``memo_dir/file_sha256`` for this version of the file."""
    resolved = str(path.resolve())
    version = [resolved, *file_version(path)]
    memo = memo_dir / "file_sha256" / f"{hashlib.sha256(resolved.encode()).hexdigest()[:32]}.json"
    try:
        saved = json.loads(memo.read_text())
        if saved["version"] == version:
            return saved["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = file_sha256(path)
    if [resolved, *file_version(path)] != version:  # changed while it was read: not remembered
        return digest
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_json(memo, {"version": version, "sha256": digest})  # whole or absent, whoever else writes it
    except OSError as err:
        if is_disk_full(err):
            raise OutOfSpace(f"{memo.parent}: no space left on the device while remembering the sha256 of {path}: free "
                             "some space in the cache (BERT_EXP_CACHE)") from None
        raise
    return digest


RECORD = "sha256.json"


def record_sha256(directory: Path) -> None:
    """Writes ``directory/sha256.json``: the sha256 of each file in ``directory``, for
    :func:`read_recorded` to check when the directory is used again."""
    directory = Path(directory)
    digests = {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != RECORD}
    (directory / RECORD).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def read_recorded(directory: Path) -> dict[str, bytes]:
    """The files :func:`record_sha256` recorded in ``directory``, each read once and checked against its
    sha256 (what is returned is what was checked); a ValueError naming the first file that is missing or
    differs, or the record itself."""
    directory = Path(directory)
    try:
        recorded = json.loads((directory / RECORD).read_text(encoding="utf-8"))
        if not isinstance(recorded, dict) or not recorded:
            raise ValueError
    except FileNotFoundError:
        raise ValueError(f"{directory / RECORD}: missing (the sha256 of the files beside it are not known)") from None
    except (OSError, ValueError, UnicodeDecodeError):
        raise ValueError(f"{directory / RECORD}: not a record of the files' sha256") from None
    contents = {}
    for name, digest in recorded.items():
        try:
            data = (directory / name).read_bytes()
        except OSError as err:
            raise ValueError(f"{directory / name}: cannot be read ({err.strerror or err})") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{directory / name}: its sha256 is not the one recorded when it was written")
        contents[name] = data
    return contents


def config_key(*parts) -> str:
    """A short stable hash of JSON-serialisable parts (dicts are key-sorted)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]

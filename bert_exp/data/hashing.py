"""Content hashes that key the on-disk caches."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(paths: list[Path]) -> dict[str, str]:
    return {str(p): file_sha256(p) for p in paths}


def config_key(*parts) -> str:
    """A short stable hash of JSON-serialisable parts (dicts are key-sorted)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]

"""What the vocabulary's and the prepared data's caches are keyed by: the inputs' content and the options
that change what is read of them, never where a file lies or how its path is spelt. Nodes stage s3://
objects into caches at paths of their own and mount a corpus where they will; a key that held a path
gave each node another key for one shared preparation, which then never completed.

And the check that what was read is what the key holds: a file that changed after it was hashed stops
the run before anything is stored under its old hash."""

from __future__ import annotations

from pathlib import Path

from ..hashing import file_version
from .files import CorpusError
from .groups import InstanceSettings


def input_key(files: list[Path], sha256: list[str], settings: InstanceSettings, vocabulary: bool = False) -> list[dict]:
    """One entry per input file, in the order the files are read (the groups follow it): its sha256 and its
    own options: a table's text column, and, unless for the ``vocabulary`` (trained on lines, wherever
    documents start), its own document boundary. The format a file is read as follows from its first
    bytes, which the sha256 covers."""
    columns, boundaries = settings.text_columns or {}, settings.file_boundaries or {}
    entries = []
    for path, digest in zip(files, sha256, strict=True):
        entry = {"sha256": digest}
        if str(path) in columns:
            entry["text_column"] = columns[str(path)]
        if not vocabulary and str(path) in boundaries:
            entry["doc_boundary"] = list(boundaries[str(path)])
        entries.append(entry)
    return entries


def instance_key(settings: InstanceSettings) -> dict:
    """The settings as the prepared data's key holds them: the files' own options are in their entries of
    :func:`input_key` (here they are held by path, for the readers to look up)."""
    fields = dict(settings.__dict__)
    del fields["file_boundaries"], fields["text_columns"]
    return fields


def check_unchanged(versions: dict[str, list] | None, files) -> None:
    """Each of ``files`` (read by now) is the version it was when hashed (:func:`..hashing.file_version`);
    one line naming the first that is not."""
    for path in files:
        recorded = (versions or {}).get(str(path))
        if recorded is None:
            continue
        try:
            now = file_version(path)
        except OSError:
            now = None
        if now != recorded:
            raise CorpusError(f"{path}: changed since it was hashed (its size, times or inode are not those it had): "
                              "nothing is kept of what was read; run again to use the file as it is now")

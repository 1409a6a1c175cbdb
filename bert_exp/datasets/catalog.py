"""The catalog of public data sets: where each is downloaded from, its checksums, and the files it
provides under the data directory (the layout the DataModules read). One YAML file per data set in
``catalog/``; ``$BERT_EXP_CATALOG`` adds files or folders of more (a mirror, a private corpus), and an
entry there replaces the packaged one of the same name.

An entry with no ``downloads`` and a ``manual`` text describes a data set this tool cannot fetch (e.g.
derived files shared on a machine): ``download NAME`` and a missing input print that text, which says
where the data comes from and how to put it in place."""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import yaml
from platformdirs import user_cache_dir

from ..errors import UserError

PACKAGED = Path(__file__).with_name("catalog")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CatalogError(UserError, ValueError):
    """A catalog entry that cannot be used; the message names its file."""


def default_data_dir() -> Path:
    """``$BERT_EXP_DATA``, else the user cache (``~/.cache/bert_exp/data`` on Linux), as in conf/paths."""
    env = os.environ.get("BERT_EXP_DATA")
    return Path(env).expanduser() if env else Path(user_cache_dir("bert_exp", appauthor=False)) / "data"


@dataclass(frozen=True)
class Download:
    url: str
    sha256: str | None
    path: str | None = None  # a plain file: where it goes, relative to the data directory
    unpack: dict[str, str] | None = None  # an archive: member (prefix ending in /) -> destination

    @property
    def filename(self) -> str:
        return PurePosixPath(urlparse(self.url).path).name

    def destination(self, member: str) -> str | None:
        """Where an archive member goes (relative to the data directory); None: not extracted.
        The longest matching key wins; a key ending in / maps a folder."""
        best = None
        for source, target in (self.unpack or {}).items():
            matches = member == source or (source.endswith("/") and member.startswith(source))
            if matches and (best is None or len(source) > len(best[0])):
                best = (source, target)
        if best is None:
            return None
        source, target = best
        return target if member == source else target + member[len(source):]

    def provides(self, rel: str) -> bool:
        """Whether this download yields the file ``rel`` (relative to the data directory)."""
        if self.path:
            return self.path == rel
        return any(rel == t or (t.endswith("/") and rel.startswith(t)) for t in self.unpack.values())


@dataclass(frozen=True)
class DataSource:
    name: str
    description: str
    downloads: list[Download]
    files: dict[str, str | None]  # relative path -> sha256 (None: recorded at download)
    origin: Path = field(compare=False)
    manual: str | None = None  # not downloadable: where the data comes from and how to install it

    def provides(self, pattern: str) -> str | None:
        """The data directory under which ``pattern`` (a path or glob) names files of this data set."""
        pattern = pattern.replace(os.sep, "/")
        for rel in self.files:
            top = rel.split("/", 1)[0]
            for match in re.finditer(rf"(^|/){re.escape(top)}/", pattern):
                root = pattern[: match.start()] if match.group(1) else ""
                candidate = f"{root}/{rel}" if root else rel
                if fnmatch.fnmatchcase(candidate, pattern):
                    return root or "."
        return None


def _load_entry(path: Path) -> DataSource:
    def fail(message: str):
        raise CatalogError(f"{path}: {message}")

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        fail(f"cannot be read: {err}")
    if not isinstance(raw, dict) or not isinstance(raw.get("downloads"), list) or not isinstance(raw.get("files"), dict):
        fail("expected a mapping with 'downloads' (a list) and 'files' (path: sha256)")
    unknown = set(raw) - {"description", "downloads", "files", "manual"}
    if unknown:
        fail(f"unknown keys {sorted(unknown)}")
    files = {str(k): (str(v) if v else None) for k, v in raw["files"].items()}
    for rel, digest in files.items():
        if digest is not None and not _SHA256.match(digest):
            fail(f"files.{rel}: {digest!r} is not a sha256 (64 lower-case hex digits, quoted if all are digits)")
        if rel.startswith("/") or ".." in PurePosixPath(rel).parts:
            fail(f"files.{rel}: must be a relative path inside the data directory")
    downloads = []
    for i, item in enumerate(raw["downloads"]):
        where = f"downloads[{i}]"
        if not isinstance(item, dict) or "url" not in item or "sha256" not in item:
            fail(f"{where}: needs 'url' and 'sha256' (null only when every file it provides has one)")
        if set(item) - {"url", "sha256", "path", "unpack"}:
            fail(f"{where}: unknown keys {sorted(set(item) - {'url', 'sha256', 'path', 'unpack'})}")
        if (item.get("path") is None) == (item.get("unpack") is None):
            fail(f"{where}: give exactly one of 'path' (a plain file) or 'unpack' (a zip archive)")
        digest = item["sha256"]
        if digest is not None and not _SHA256.match(str(digest)):
            fail(f"{where}.sha256: {digest!r} is not a sha256 (64 lower-case hex digits, quoted if all are digits)")
        download = Download(str(item["url"]), digest, item.get("path"), item.get("unpack"))
        if digest is None:  # then the files it provides must carry the checksums
            unchecked = [rel for rel in files if files[rel] is None and download.provides(rel)]
            if unchecked or (download.path and download.path not in files):
                fail(f"{where}: sha256 is null, so every file it provides needs a sha256 under 'files'")
        downloads.append(download)
    manual = raw.get("manual")
    if manual is not None and (not isinstance(manual, str) or not manual.strip()):
        fail("'manual' must be a text saying where the data comes from")
    if not downloads and manual is None:
        fail("no downloads: give 'manual' (where to get the data and how to put it in place)")
    return DataSource(path.stem, str(raw.get("description", "")), downloads, files, path,
                      " ".join(manual.split()) if manual else None)


def catalog_paths() -> list[Path]:
    paths = sorted(PACKAGED.glob("*.yaml"))
    for item in filter(None, os.environ.get("BERT_EXP_CATALOG", "").split(os.pathsep)):
        item = Path(item).expanduser()
        if item.is_dir():
            paths.extend(sorted(item.glob("*.yaml")))
        elif item.is_file():
            paths.append(item)
        else:
            raise CatalogError(f"$BERT_EXP_CATALOG: {item} does not exist")
    return paths


def load_catalog() -> dict[str, DataSource]:
    catalog: dict[str, DataSource] = {}
    for path in catalog_paths():
        entry = _load_entry(path)
        catalog[entry.name] = entry  # later files replace earlier ones of the same name
    return catalog


def get_source(name: str, catalog: dict[str, DataSource] | None = None) -> DataSource:
    catalog = load_catalog() if catalog is None else catalog
    if name not in catalog:
        raise CatalogError(f"unknown data set {name!r}; known: {', '.join(sorted(catalog))}")
    return catalog[name]

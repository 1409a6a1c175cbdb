"""Fetching catalog data sets into the data directory, and telling what is there.

pooch does the verified, atomic part (download to a temporary name, check the sha256, rename; a
mismatch leaves nothing). It has no resumable HTTP downloader, so ``ResumableDownloader`` is ours:
bytes go to ``.downloads/NAME.part`` and a later attempt asks for the rest with an HTTP Range request.
Archives are unpacked into a staging folder, checked member by member, then moved into place."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..records import dumps
from .catalog import DataSource, Download, default_data_dir, load_catalog
from ..data.hashing import file_sha256
from ..data.loading import DataMissingError, input_present

DOWNLOADS = ".downloads"  # partial downloads and archives, inside the data directory
RECORD = ".bert_exp-checksums.json"  # sha256 of files whose catalog entry has none, taken when verified

class DownloadError(UserError, OSError):
    """A download or unpacking that failed; the message names the URL or file and what to do."""

class ManualDataError(DataMissingError):
    """A data set that this tool cannot download (its catalog entry says where it comes from)."""


def manual_message(source: DataSource, data_dir: Path) -> str:
    missing = [rel for rel in source.files if not (data_dir / rel).is_file()]
    return (f"{source.name}: cannot be downloaded by this tool ({len(missing)} of {len(source.files)} files missing "
            f"under {data_dir}, e.g. {missing[0] if missing else '-'}). {source.manual}")


# -- downloading -----------------------------------------------------------------------------------

class ResumableDownloader:
    """A pooch downloader that keeps partial bytes in ``partial`` and resumes with a Range request."""

    def __init__(self, partial: Path, progress: bool = True, timeout: float = 60.0, chunk_size: int = 1 << 16):
        self.partial, self.progress, self.timeout, self.chunk_size = partial, progress, timeout, chunk_size

    def __call__(self, url: str, output_file, pooch, check_only: bool = False):
        import requests
        from tqdm.auto import tqdm

        self.partial.parent.mkdir(parents=True, exist_ok=True)
        have = self.partial.stat().st_size if self.partial.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            response = requests.get(url, headers=headers, stream=True, timeout=self.timeout)
            if have and response.status_code == 416:  # the partial file is already whole (or stale)
                response.close()
                self.partial.unlink()
                return self(url, output_file, pooch)
            response.raise_for_status()
            resumed = have > 0 and response.status_code == 206 and \
                response.headers.get("Content-Range", "").startswith(f"bytes {have}-")
            if not resumed:
                have = 0  # the server sent the whole file
            length = response.headers.get("Content-Length")
            total = have + int(length) if length is not None else None
            with response, open(self.partial, "ab" if resumed else "wb") as out, tqdm(
                total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                desc=self.partial.name.removesuffix(".part"), disable=not self.progress, leave=False,
            ) as bar:
                for block in response.iter_content(self.chunk_size):
                    out.write(block)
                    bar.update(len(block))
        except requests.RequestException as err:
            got = self.partial.stat().st_size if self.partial.exists() else 0
            if not got:
                self.partial.unlink(missing_ok=True)
                raise DownloadError(f"could not download {url} ({type(err).__name__}: {err})") from err
            raise DownloadError(
                f"download of {url} stopped after {got:,} bytes ({type(err).__name__}: {err}); run the same "
                f"command again to resume from {self.partial}"
            ) from err
        size = self.partial.stat().st_size
        if total is not None and size != total:
            raise DownloadError(f"download of {url} ended at {size:,} of {total:,} bytes; run the same command "
                                f"again to resume from {self.partial}")
        os.replace(self.partial, output_file)

def _retrieve(download: Download, target: Path, data_dir: Path, progress: bool) -> Path:
    """Downloads ``download`` to ``target`` (verified against its sha256, atomically) unless it is there."""
    import pooch

    partial = data_dir / DOWNLOADS / f"{download.filename}.part"
    pooch.get_logger().setLevel("WARNING")  # our progress bar and messages say what happens
    try:
        return Path(pooch.retrieve(
            download.url, f"sha256:{download.sha256}" if download.sha256 else None, fname=target.name,
            path=target.parent, downloader=ResumableDownloader(partial, progress),
        ))
    except ValueError as err:  # pooch: the sha256 did not match; the temporary file is already gone
        raise DownloadError(f"{download.url}: {err} The file was deleted; check the URL and catalog entry.") from err

# -- unpacking -------------------------------------------------------------------------------------

def _unpack(archive: Path, download: Download, source: DataSource, staging: Path) -> dict[str, str]:
    """Extracts the mapped members into ``staging``; returns their sha256 by relative path."""
    hashes: dict[str, str] = {}
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                rel = download.destination(info.filename)
                if info.is_dir() or rel is None:
                    continue
                if rel.startswith("/") or ".." in Path(rel).parts:
                    raise DownloadError(f"{archive}: member {info.filename!r} would land outside the data directory")
                dest = staging / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with zf.open(info) as src, open(dest, "wb") as out:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
                hashes[rel] = digest.hexdigest()
                expected = source.files.get(rel)
                if expected and hashes[rel] != expected:
                    raise DownloadError(f"{archive}: member {info.filename} has sha256 {hashes[rel]}, not the "
                                        f"expected {expected} ({source.origin}); the archive was deleted")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as err:
        if isinstance(err, DownloadError):
            raise
        raise DownloadError(f"{archive}: not a readable zip archive ({err}); it was deleted, run the download "
                            f"again (or check the URL in {source.origin})") from err
    return hashes

# -- what is there ---------------------------------------------------------------------------------

@dataclass
class FileStatus:
    rel: str
    path: Path
    state: str  # ok | missing | corrupt | unverified (no checksum known or recorded)
    size: int = 0

def _recorded(data_dir: Path) -> dict[str, str]:
    try:
        return json.loads((data_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}

def _record(data_dir: Path, hashes: dict[str, str]) -> None:
    record = {**_recorded(data_dir), **hashes}
    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=".record-")
    with os.fdopen(fd, "w") as out:
        out.write(dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, data_dir / RECORD)

def file_status(source: DataSource, data_dir: Path) -> list[FileStatus]:
    recorded = _recorded(data_dir)
    out = []
    for rel, expected in source.files.items():
        path = data_dir / rel
        if not path.is_file():
            out.append(FileStatus(rel, path, "missing"))
            continue
        expected = expected or recorded.get(rel)
        state = "unverified" if expected is None else ("ok" if file_sha256(path) == expected else "corrupt")
        out.append(FileStatus(rel, path, state, path.stat().st_size))
    return out

def summarize(statuses: list[FileStatus]) -> str:
    states = {s.state for s in statuses}
    if "corrupt" in states:
        return "corrupt"
    if states == {"missing"}:
        return "missing"
    if "missing" in states:
        return "incomplete"
    return "unverified" if "unverified" in states else "present"

# -- fetching --------------------------------------------------------------------------------------

def fetch(source: DataSource, data_dir: str | Path | None = None, force: bool = False, progress: bool = True) -> str:
    """Makes every file of ``source`` present and verified under ``data_dir``; returns what it did."""
    data_dir = Path(data_dir).expanduser() if data_dir else default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    before = file_status(source, data_dir)
    if not force and all(s.state in ("ok", "unverified") for s in before):
        return "already present"
    if source.manual is not None and not source.downloads:
        if all(s.state in ("ok", "unverified") for s in before):
            return "already present (not downloadable: --force cannot fetch it again)"
        raise ManualDataError(manual_message(source, data_dir))
    todo = {s.rel for s in before if force or s.state in ("missing", "corrupt")}
    hashes: dict[str, str] = {}
    for download in source.downloads:
        if download.path:
            if download.path not in todo:
                continue
            target = data_dir / download.path
            target.unlink(missing_ok=True)  # present but corrupt (or --force): fetch it again
            _retrieve(download, target, data_dir, progress)
            expected = source.files.get(download.path)
            if expected == download.sha256:  # pooch has checked exactly this
                continue
            hashes[download.path] = file_sha256(target)
            if expected and hashes[download.path] != expected:
                target.unlink()
                raise DownloadError(f"{download.url}: sha256 {hashes[download.path]} is not the expected {expected} "
                                    f"for {download.path} ({source.origin}); the file was deleted")
            continue
        if not any(rel in todo for rel in source.files if download.provides(rel)):
            continue
        archive = data_dir / DOWNLOADS / download.filename
        _retrieve(download, archive, data_dir, progress)
        staging = Path(tempfile.mkdtemp(dir=data_dir, prefix=".unpack-"))
        try:
            try:
                unpacked = _unpack(archive, download, source, staging)
            except DownloadError:
                archive.unlink(missing_ok=True)
                raise
            for rel in unpacked:  # move into place, one atomic rename per file
                (data_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / rel, data_dir / rel)
            hashes.update(unpacked)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        archive.unlink()  # unpacked and verified; the files keep their checksums in the record
    unchecked = {rel: digest for rel, digest in hashes.items() if source.files.get(rel) is None}
    if unchecked:
        _record(data_dir, unchecked)
    # everything written was verified on the way in; only a file no download provided can be absent
    missing = [rel for rel in source.files if not (data_dir / rel).is_file()]
    if missing:
        raise DownloadError(f"{source.name}: the downloads did not provide {', '.join(missing)} "
                            f"(check the unpack mapping in {source.origin})")
    return "downloaded"

# -- what DataModules call -------------------------------------------------------------------------

def require_inputs(specs: list[str], download: bool = True, wait: bool = False, timeout: float = 3600.0) -> None:
    """Makes sure every input path or glob exists. Missing ones that a catalog data set provides are
    downloaded when ``download`` is on; otherwise one error names each file, where it is expected and
    the command that fetches it. With ``wait`` (ranks other than 0) it waits for another process to
    fetch them instead."""
    missing = [str(s) for s in specs if not input_present(s)]
    if not missing:
        return
    if wait:
        deadline = time.monotonic() + timeout
        while missing and time.monotonic() < deadline:
            time.sleep(2.0)
            missing = [s for s in missing if not input_present(s)]
        if not missing:
            return
        download = False
    catalog = load_catalog()
    plan: dict[tuple[str, str], DataSource] = {}
    unknown = []
    for spec in missing:
        hit = next(((s, root) for s in catalog.values() if (root := s.provides(spec)) is not None), None)
        if hit is None:
            unknown.append(spec)
        else:
            plan[(hit[0].name, hit[1])] = hit[0]
    if unknown:
        raise DataMissingError("\n".join(
            [f"missing input: {spec} (no data set in the catalog provides it; put the file there or point "
             f"the data config at it)" for spec in unknown]))
    manual = {key: source for key, source in plan.items() if source.manual is not None and not source.downloads}
    if manual:
        raise ManualDataError("\n".join(
            [f"missing input: {spec}" for spec in missing]
            + [manual_message(source, Path(root).resolve()) for (_, root), source in manual.items()]))
    if download:
        for (_, root), source in plan.items():
            try:
                fetch(source, root)
            except DownloadError as err:
                raise DownloadError(f"{err}\nWithout internet access, copy the files of {source.name!r} into "
                                    f"{Path(root).resolve()} ('python -m bert_exp.data list' shows what is "
                                    f"expected), or set data.download=false to be told instead.") from err
        missing = [s for s in missing if not input_present(s)]
        if not missing:
            return
    lines = [f"missing input: {spec}" for spec in missing]
    for name, root in plan:
        lines.append(f"  data set {name!r} is expected under {Path(root).resolve()}; fetch it with:\n"
                     f"    python -m bert_exp.data download {name} --data-dir {Path(root).resolve()}")
    if not download:
        lines.append("(downloads are off: data.download=false; or copy the files there by hand)")
    raise DataMissingError("\n".join(lines))

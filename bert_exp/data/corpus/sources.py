"""Corpus inputs that are not local files, staged into the node's cache before the preparation reads them.

- ``s3://bucket/key``, ``s3://bucket/prefix/`` (every corpus file below) or ``s3://bucket/prefix/*.txt.xz``:
  each object is downloaded once into ``$BERT_EXP_CACHE/inputs/s3/BUCKET/KEY`` and downloaded again only
  when its ETag or size changes (boto3; ``AWS_ENDPOINT_URL`` for other S3-compatible stores).
- ``{dataset: ID, name: CONFIG, split: train, text_column: text, revision: null}``: a corpus that
  ``datasets.load_dataset`` opens (a Hub id such as ``wikimedia/wikipedia``, or a local folder of
  Parquet / JSON Lines / CSV files), streamed: its rows' text column is written, one Parquet file per
  shard of the dataset, into ``$BERT_EXP_CACHE/inputs/datasets/...``; nothing else of the dataset is kept.
  A Hub dataset is staged per commit (its revision resolved first); offline, the newest staged copy.

From there the files are local table or text files like any other: the same groups, vocabulary, key
(the staged files' sha256) and preparation. Each node stages its own copy; the processes of one node
take turns through a file lock, so one downloads and the others find it done."""

from __future__ import annotations

import fnmatch
import glob
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ..hashing import config_key
from .files import CorpusError, is_corpus_file
from ..hub_datasets import HubDatasetError, HubSplit, hub_commit, local_version, lock, open_streaming
from .storage import Location, describe_s3_error

log = logging.getLogger("bert_exp.data")

DATASET_KEYS = {"dataset", "name", "split", "revision", "text_column"}
_SHARD_ROWS = 10_000  # rows per Parquet row group of a staged shard


@dataclass(frozen=True)
class DatasetSource(HubSplit):
    """A ``datasets`` corpus named in ``data.files``: a split and the column its text is in."""

    text_column: str = "text"

    @classmethod
    def from_entry(cls, entry: dict) -> DatasetSource:
        unknown = set(entry) - DATASET_KEYS
        if unknown:
            raise CorpusError(f"data.files entry {entry}: a datasets corpus takes {', '.join(sorted(DATASET_KEYS))} "
                              f"(unknown: {', '.join(sorted(unknown))})")
        return cls(**{k: (str(v) if v is not None else None) for k, v in entry.items()})


def stage_inputs(spec, cache_dir: Path) -> str | list[str]:
    """``spec`` as local paths: an s3:// URL or a :class:`DatasetSource` staged into ``cache_dir/inputs``; a
    local path, directory or glob as it is."""
    if isinstance(spec, DatasetSource):
        return [str(p) for p in stage_dataset(spec, cache_dir / "inputs" / "datasets")]
    if str(spec).startswith("s3://"):
        return [str(p) for p in stage_s3(str(spec), cache_dir / "inputs" / "s3")]
    return spec


def is_remote(spec) -> bool:
    return isinstance(spec, DatasetSource) or str(spec).startswith("s3://")


# -- s3 ----------------------------------------------------------------------------------------------



def _s3_objects(url: str) -> list[dict]:
    """The objects ``url`` names: one key, every corpus object under a prefix ending in '/', or a glob."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    client = Location(f"s3://{bucket}")._s3()
    try:
        if glob.has_magic(key) or key == "" or key.endswith("/"):
            prefix = key[: min((key.index(c) for c in "*?[" if c in key), default=len(key))]
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            found = [o for page in pages for o in page.get("Contents", [])]
            if glob.has_magic(key):
                found = [o for o in found if fnmatch.fnmatchcase(o["Key"], key)]
            else:
                found = [o for o in found if not o["Key"].endswith("/") and is_corpus_file(Path(o["Key"]))]
            if not found:
                raise CorpusError(f"corpus input {url!r} matches no objects")
            return [{"Bucket": bucket, "Key": o["Key"], "ETag": o["ETag"], "Size": o["Size"]} for o in found]
        head = client.head_object(Bucket=bucket, Key=key)
        return [{"Bucket": bucket, "Key": key, "ETag": head["ETag"], "Size": head["ContentLength"]}]
    except CorpusError:
        raise
    except Exception as err:  # noqa: BLE001  botocore's ClientError, NoCredentialsError, EndpointConnectionError
        code = str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchKey"):
            try:
                client.head_bucket(Bucket=bucket)
            except Exception as bucket_err:  # noqa: BLE001
                raise CorpusError(f"corpus input {url}: {describe_s3_error(bucket, bucket_err)}") from None
            raise CorpusError(f"corpus input {url!r} does not exist") from None
        raise CorpusError(f"corpus input {url}: {describe_s3_error(bucket, err)}") from None


def stage_s3(url: str, root: Path) -> list[Path]:
    """Each object of ``url`` as a local file, downloaded when it is not there with the same ETag and size."""
    objects = _s3_objects(url)
    client = Location(f"s3://{objects[0]['Bucket']}")._s3()
    local = []
    for obj in objects:
        path = root / obj["Bucket"] / obj["Key"]
        stamp = path.with_name(f".{path.name}.etag")
        version = json.dumps({"etag": obj["ETag"], "size": obj["Size"]})
        with _lock(path.with_name(f".{path.name}")):
            current = path.is_file() and stamp.is_file() and stamp.read_text() == version \
                and path.stat().st_size == obj["Size"]
            if not current:
                log.info("downloading s3://%s/%s (%.1f MB)", obj["Bucket"], obj["Key"], obj["Size"] / 2**20)
                partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
                try:
                    client.download_file(obj["Bucket"], obj["Key"], str(partial))
                    os.replace(partial, path)
                finally:
                    partial.unlink(missing_ok=True)
                stamp.write_text(version)
        local.append(path)
    return sorted(local)


# -- datasets ----------------------------------------------------------------------------------------




def _lock(path: Path):
    return lock(path)


def _hub_commit(source: DatasetSource) -> tuple[str | None, str]:
    try:
        return hub_commit(source)
    except HubDatasetError as err:
        raise CorpusError(str(err)) from None


def _open_streaming(source: DatasetSource, commit: str | None):
    try:
        return open_streaming(source, commit)
    except HubDatasetError as err:
        raise CorpusError(str(err)) from None


def _staged_prefix(source: DatasetSource) -> str:
    return source.dataset.strip("/").replace("/", "--").replace("~", "")


def _newest_staged(source: DatasetSource, root: Path) -> Path | None:
    """The most recently staged copy of ``source`` (any commit), for a run without the Hub; folders being
    written (``.NAME.PID.partial``) are not copies."""
    copies = []
    for done in root.glob(f"{glob.escape(_staged_prefix(source))}-*/staged.json"):
        record = json.loads(done.read_text())
        if all(record.get(k) == v for k, v in asdict(source).items()):
            copies.append((done.stat().st_mtime_ns, done.parent))
    return max(copies)[1] if copies else None


def stage_dataset(source: DatasetSource, root: Path) -> list[Path]:
    """The text of ``source``, one Parquet file per shard of the streamed dataset (staged once per node).

    A local folder is staged again when its files change. A Hub dataset is staged per commit: its
    revision is resolved to a commit first, the rows are streamed from that commit (a push during the
    streaming changes nothing), and a new commit on the branch is staged anew. Without the Hub (offline,
    or unreachable) the newest staged copy is used, and said so."""
    local = local_version(source.dataset)
    commit = None
    if local is None:
        commit, unreachable = _hub_commit(source)
        if commit is None:
            staged = _newest_staged(source, root)
            if staged is None:
                raise CorpusError(f"data.files: {source}: the Hub cannot be reached ({unreachable}) and no copy is "
                                  f"staged in {root}: run once with the Hub reachable")
            recorded = json.loads((staged / "staged.json").read_text()).get("commit") or "an unknown commit"
            log.warning("%s: the Hub cannot be reached (%s): using the copy staged from commit %s", source,
                        unreachable, recorded)
            return sorted(staged.glob("shard-*.parquet"))
    key = config_key(asdict(source), local if commit is None else commit)
    target = root / f"{_staged_prefix(source)}-{key[:16]}"
    done = target / "staged.json"
    if not done.is_file():
        with _lock(target):
            if not done.is_file():
                _stream_to_parquet(source, target, commit)
    return sorted(target.glob("shard-*.parquet"))




def _stream_to_parquet(source: DatasetSource, target: Path, commit: str | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tqdm.auto import tqdm

    dataset = _open_streaming(source, commit)
    columns = dataset.column_names
    if columns is not None and source.text_column not in columns:
        raise CorpusError(f"data.files: {source}: no column {source.text_column!r} (columns: {', '.join(columns)}); "
                          "name the text column with text_column")
    dataset = dataset.select_columns([source.text_column])
    shards = dataset.num_shards
    building = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    schema = pa.schema([("text", pa.string())])
    rows = 0
    try:
        with tqdm(desc=f"streaming {source}", unit=" rows", disable=None) as bar:
            for index in range(shards):
                with pq.ParquetWriter(building / f"shard-{index:05d}.parquet", schema) as writer:
                    batch = []
                    for row in dataset.shard(num_shards=shards, index=index):
                        batch.append(row[source.text_column])
                        if len(batch) == _SHARD_ROWS:
                            writer.write_table(pa.table({"text": batch}, schema=schema))
                            rows, batch = rows + len(batch), []
                            bar.update(_SHARD_ROWS)
                    if batch:
                        writer.write_table(pa.table({"text": batch}, schema=schema))
                        rows += len(batch)
                        bar.update(len(batch))
        record = {**asdict(source), "commit": commit, "shards": shards, "rows": rows}
        (building / "staged.json").write_text(json.dumps(record, indent=1))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log.info("staged %s%s: %d rows in %d Parquet files under %s", source, f" at commit {commit}" if commit else "",
             rows, shards, target)

"""Where prepared data is kept: a local directory, or an object store (``s3://bucket/prefix``, through boto3,
which reads the endpoint from ``AWS_ENDPOINT_URL`` and the credentials from the usual places).

Nothing here deletes a dataset another run may be reading or writing: an object store is only ever added
to (a dataset's files are the same bytes whoever writes them: :mod:`bert_exp.data.corpus.preparation`), and a
local directory is built beside its final place and renamed into it."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from ...errors import UserError, is_disk_full


class PreparedDataError(UserError, ValueError):
    """A prepared dataset that cannot be read or written: a missing or damaged chunk or index, an
    unreachable store, a full disk; names it."""


class Location:
    """A prepared dataset's place: a local directory or an ``s3://`` URL."""

    def __init__(self, url: str):
        self.url = str(url).rstrip("/")
        self.remote = "://" in self.url
        if self.remote and not self.url.startswith("s3://"):
            raise PreparedDataError(f"data.prepare.dir={url}: a local directory or an s3:// URL")

    def __str__(self) -> str:
        return self.url

    def join(self, *parts: str) -> str:
        return "/".join([self.url, *parts]) if self.remote else str(Path(self.url, *parts))

    def child(self, *parts: str) -> Location:
        return Location(self.join(*parts))

    # object stores
    def _s3(self):
        return _s3_client(*(os.environ.get(name) for name in _S3_ENVIRONMENT))

    def _bucket_key(self, name: str) -> tuple[str, str]:
        bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
        return bucket, "/".join(p for p in (prefix, name) if p)

    def check_reachable(self) -> None:
        """Before any work: the bucket exists and the credentials may read it (an object store), or the
        directory can be made and written (a local one); one line naming the place otherwise."""
        if not self.remote:
            path = Path(self.url)
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise PreparedDataError(f"data.prepare.dir: {path} cannot be made ({err.strerror or err})") from None
            if not os.access(path, os.W_OK):
                raise PreparedDataError(f"data.prepare.dir: {path} is not writable")
            return
        bucket, prefix = self._bucket_key("")
        try:
            client = self._s3()
            client.head_bucket(Bucket=bucket)
            client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except Exception as err:  # noqa: BLE001  botocore's ClientError, NoCredentialsError, EndpointConnectionError
            raise PreparedDataError(f"data.prepare.dir={self.url}: {describe_s3_error(bucket, err)}") from None

    def read_text(self, name: str) -> str | None:
        if not self.remote:
            try:
                return Path(self.url, name).read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
        bucket, key = self._bucket_key(name)
        try:
            return self._s3().get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
        except Exception as err:  # noqa: BLE001  botocore's NoSuchKey / ClientError
            if "NoSuchKey" in type(err).__name__ or "404" in str(err) or "NoSuchKey" in str(err):
                return None
            raise PreparedDataError(f"{self.join(name)}: cannot be read ({err})") from None

    def write_text(self, name: str, text: str) -> None:
        """Whole or not at all: a local file is written beside and renamed, an object put in one request. A
        full disk is one line naming the file, with nothing half-written left."""
        if not self.remote:
            path = Path(self.url, name)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, path)
            except OSError as err:
                if is_disk_full(err):
                    raise PreparedDataError(f"{path}: no space left on the device while writing it: free some space, "
                                            "or set data.prepare.dir") from None
                raise
            finally:
                tmp.unlink(missing_ok=True)
            return
        bucket, key = self._bucket_key(name)
        self._s3().put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))

    def put_file(self, local: Path, name: str) -> None:
        """Moves a finished local file to ``name`` here (renamed locally, uploaded to an object store)."""
        if not self.remote:
            target = Path(self.url, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, target)
            return
        bucket, key = self._bucket_key(name)
        self._s3().upload_file(str(local), bucket, key)
        Path(local).unlink()

    def sizes(self, split: str) -> dict[str, int]:
        """The files of ``split`` and their sizes."""
        if not self.remote:
            directory = Path(self.url, split)
            return {p.name: p.stat().st_size for p in directory.iterdir()} if directory.is_dir() else {}
        bucket, prefix = self._bucket_key(split)
        found = {}
        for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            for entry in page.get("Contents", []):
                found[entry["Key"].rsplit("/", 1)[-1]] = entry["Size"]
        return found

    def free_bytes(self) -> int | None:
        """Free space where this local directory is (or would be made); None for an object store."""
        if self.remote:
            return None
        path = Path(self.url)
        while not path.exists() and path != path.parent:
            path = path.parent
        return shutil.disk_usage(path).free


# what a client is made from: a change (another endpoint, other credentials) makes a new one
_S3_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                   "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                   "AWS_DEFAULT_REGION")


@functools.lru_cache(maxsize=4)
def _s3_client(*environment):
    """An S3 client of a session of its own: boto3's default session keeps the credentials it first found
    for the life of the process."""
    import boto3

    return boto3.session.Session().client("s3")


def describe_s3_error(bucket: str, err: Exception) -> str:
    name = type(err).__name__
    code = str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))
    if name == "NoCredentialsError":
        return "no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile)"
    if code in ("404", "NoSuchBucket"):
        return f"no bucket named {bucket!r} (create it, or fix the URL)"
    if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"access to bucket {bucket!r} denied ({code}): check the credentials"
    if name in ("EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError"):
        return f"the object store cannot be reached ({err})"
    return f"cannot be used ({name}: {err})"

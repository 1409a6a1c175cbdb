"""Prepared pre-training data: a corpus's instances cut once, stored in Lightning's litdata chunk format,
and streamed from there in training, from a local directory or an object store (``s3://bucket/prefix``).

**Preparation** (:func:`prepare`). The input files are dealt, in sorted order, into groups of about
``data.prepare.group_bytes`` of text (whole files; :func:`plan_groups`), and ``litdata.optimize`` runs
:class:`GroupItems` on the groups in worker processes (``data.prepare.num_workers``): each reads a group's
documents, holds out validation documents, tokenizes, cuts the instances (:func:`corpus.cut_group`:
NotNext segments come from the same group) and yields them shuffled, each as its token ids and
``[uid, where B starts, label]``. The uid (group << 32 | the instance's number in its group) keys the
instance's masks, whatever chunk it lands in. Two passes, one a split: the validation pass tokenizes
only the held-out documents. Across machines (``data.prepare.across_nodes``, with ``data.prepare.dir``
on a file system or object store they share), each node prepares its share of the groups into a part
of its own and the first process merges the parts with ``litdata.merge_datasets``.

A prepared dataset, ``<data.prepare.dir>/<key>`` (the key: a hash of the input files' contents, the
vocabulary and every setting that changes instances)::

    train/      index.json and chunk-*.bin (litdata): the training instances
    val/        the same, for the held-out documents
    meta.json   settings, input files and their sha256, the vocabulary's sha256, counts, the data
                report; written last: a dataset without it is incomplete, and is prepared again

A local dataset is built in a temporary directory beside it and renamed into place, so concurrent
builders (each node with ``dir`` on a shared file system) cannot leave a half-written one. optimize()
runs in a process of its own: it sets the start method of multiprocessing and a SIGINT handler that
exits at once, for the process that calls it.

**Training** streams ``train/`` with :class:`StreamedInstances` (litdata's ``StreamingDataset``: its
chunks are shuffled each epoch and shared out among the ranks and their loader workers); validation
reads ``val/`` by index (:class:`PreparedInstances`), so each example is seen exactly once across ranks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import litdata
import litdata.helpers
import numpy as np
import torch
from litdata import StreamingDataset

from ..errors import UserError
from ..records import write_json
from .corpus import GroupReport, InstanceSettings, assemble, cut_group, data_report, warn_about_losses
from .overlap import Overlap
from .text import CorpusError, detect_format

log = logging.getLogger("bert_exp.data")

# litdata 0.2.44 asks pypi.org for a newer release (waiting up to 30 s) whenever a dataset or an optimize()
# starts; later releases ask only when LITDATA_CHECK_UPDATES is set. Its answer would only be a warning.
litdata.helpers._get_newer_version = lambda current_version: None

FORMAT = "litdata-instances-1"  # what an item holds (part of the key)
SPLITS = ("val", "train")
_COMPRESSED_RATIO = 4  # text bytes per compressed byte, to size groups of compressed files (xz, gzip: 3-5)


class PreparedDataError(UserError, ValueError):
    """A prepared dataset that cannot be read: a missing or damaged chunk or index; names it."""


def parse_bytes(value: int | str) -> int:
    """``32MB``, ``512KB``, ``1GB`` (powers of 1024) or a number of bytes."""
    if isinstance(value, int):
        return value
    text = str(value).strip().upper().removesuffix("B")
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(float(text[:-1]) * factor)
    return int(text)


@dataclass(frozen=True)
class PrepareSettings:
    """How the instances are prepared and where they are kept (``data.prepare``). Only ``group_bytes``
    changes the instances (NotNext segments come from the same group): it is part of the key."""

    dir: str | None = None  # a local directory or s3://bucket/prefix; None: $BERT_EXP_CACHE/prepared
    num_workers: int | None = None  # worker processes; None: one per CPU, at most one per group
    group_bytes: int | str = "32MB"  # text per group (a compressed file counts 4x its size)
    chunk_bytes: int | str = "1MB"  # per litdata chunk; smaller chunks mix the corpus better when streamed
    across_nodes: bool = False  # each node prepares a part of the groups into `dir`, which they share
    # evaluation sets (SQuAD JSON, or text files) that no pre-training document should share a paragraph
    # with: checked while preparing, named in the data report (those absent here are skipped)
    evaluation_sets: list[str] | None = None

    def overlap(self) -> Overlap | None:
        present = [p for p in self.evaluation_sets or [] if Path(p).is_file()]
        return Overlap.of_files(present) if present else None

    def __post_init__(self):
        if self.evaluation_sets is not None:  # a plain list (the config gives a ListConfig)
            object.__setattr__(self, "evaluation_sets", [str(p) for p in self.evaluation_sets])
        for name in ("group_bytes", "chunk_bytes"):
            try:
                if parse_bytes(getattr(self, name)) <= 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"data.prepare.{name}={getattr(self, name)!r}: a size such as 32MB") from None


# -- where: a local directory or an object store -----------------------------------------------------------

class Location:
    """A prepared dataset's place: a local directory, or an ``s3://`` URL (through boto3, which reads the
    endpoint from ``AWS_ENDPOINT_URL`` and the credentials from the usual places)."""

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
        import boto3

        return boto3.client("s3")

    def _bucket_key(self, name: str) -> tuple[str, str]:
        bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
        return bucket, "/".join(p for p in (prefix, name) if p)

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
        if not self.remote:
            path = Path(self.url, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".partial")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
            return
        bucket, key = self._bucket_key(name)
        self._s3().put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))

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

    def copy_to(self, other: Location) -> None:
        """Every file under this place, copied under ``other`` (an object store copies in place)."""
        if not self.remote:
            shutil.copytree(self.url, other.url, dirs_exist_ok=True)
            return
        bucket, prefix = self._bucket_key("")
        target_bucket, target_prefix = other._bucket_key("")
        client = self._s3()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            for entry in page.get("Contents", []):
                name = entry["Key"][len(prefix) + 1:]
                client.copy_object(Bucket=target_bucket, Key=f"{target_prefix}/{name}",
                                   CopySource={"Bucket": bucket, "Key": entry["Key"]})

    def remove(self) -> None:
        if not self.remote:
            shutil.rmtree(self.url, ignore_errors=True)
            return
        bucket, prefix = self._bucket_key("")
        client = self._s3()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            keys = [{"Key": entry["Key"]} for entry in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})


def read_meta(location: Location) -> dict | None:
    """The dataset's ``meta.json``; None while it is incomplete (being prepared, or prepared no further)."""
    text = location.read_text("meta.json")
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PreparedDataError(f"{location.join('meta.json')}: not valid JSON ({err.msg}, line {err.lineno}); "
                                "delete the prepared dataset to prepare it again") from None


def check_chunks(location: Location) -> None:
    """Every chunk each split's index names is there, with the size the index gives: a missing, cut or
    grown chunk (or a damaged index) stops here, named, instead of deep inside a loader worker."""
    for split in SPLITS:
        name = f"{split}/index.json"
        text = location.read_text(name)
        if text is None:
            raise PreparedDataError(f"{location.join(name)}: missing (the prepared dataset is damaged; delete "
                                    f"{location} to prepare it again)")
        try:
            chunks = json.loads(text)["chunks"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise PreparedDataError(f"{location.join(name)}: not a litdata index (delete {location} to prepare "
                                    "it again)") from None
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


def fingerprint(location: Location) -> str:
    """What identifies the prepared data a run reads: its meta.json and both indexes (chunk names, sizes,
    item counts), hashed; equal on every rank of a run."""
    digest = hashlib.sha256()
    for name in ("meta.json", "val/index.json", "train/index.json"):
        text = location.read_text(name) or ""
        if name.endswith("index.json") and text:
            text = json.dumps({k: v for k, v in json.loads(text).items() if k != "updated_at"}, sort_keys=True)
        digest.update(text.encode())
    return digest.hexdigest()


# -- preparation ---------------------------------------------------------------------------------------------

def plan_groups(files: list[Path], group_bytes: int) -> list[list[str]]:
    """The input files (sorted) dealt into consecutive groups of about ``group_bytes`` of text; a file is
    never split; a last group smaller than half the size joins the one before."""
    target = parse_bytes(group_bytes)
    groups, current, size = [], [], 0
    for path in files:
        weight = os.path.getsize(path) * (1 if detect_format(Path(path)) == "plain" else _COMPRESSED_RATIO)
        if current and size >= target:
            groups.append(current)
            current, size = [], 0
        current.append(str(path))
        size += weight
    if current:
        if groups and size < target / 2:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


class GroupItems:
    """What litdata's optimize() runs in its workers: one group's instances of one split, as items
    ``{"input_ids": [CLS] A [SEP] (B [SEP]), "info": [uid, where B starts, label]}``, shuffled (as the
    original shuffled each output file's instances). Reports each group's counts to ``report_dir``, and a
    mistake in the input (a corrupt file) to ``report_dir/error.txt``, for the preparing process to name."""

    def __init__(self, groups: list[list[str]], tokenizer_json: str, settings: InstanceSettings, split: str,
                 report_dir: str, token_dtype: str, overlap: Overlap | None = None):
        self.groups, self.tokenizer_json, self.settings = groups, tokenizer_json, settings
        self.split, self.report_dir, self.token_dtype, self.overlap = split, report_dir, token_dtype, overlap
        self._tokenizer = None

    def __call__(self, group: int):
        from tokenizers import Tokenizer

        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_str(self.tokenizer_json)
        cls_id, sep_id = self._tokenizer.token_to_id("[CLS]"), self._tokenizer.token_to_id("[SEP]")
        try:
            cut = cut_group([Path(f) for f in self.groups[group]], self._tokenizer, self.settings, group, self.split,
                            self.overlap)
        except UserError as err:
            Path(self.report_dir, "error.txt").write_text(str(err), encoding="utf-8")
            raise
        write_json(Path(self.report_dir, f"{self.split}-{group:06d}.json"), cut.report.as_dict())
        order = np.random.default_rng([self.settings.seed, group, SPLITS.index(self.split)]).permutation(
            len(cut.instances))
        for number in order:
            ids, b_start, label = assemble(cut.tokens, cut.doc_starts, cut.instances[number], cls_id, sep_id)
            yield {"input_ids": ids.astype(self.token_dtype),
                   "info": np.array([group << 32 | int(number), b_start, label], dtype=np.int64)}


@dataclass
class _Job:
    """What the preparing process is given: the groups to prepare, and where."""

    groups: list[list[str]]
    mine: list[int]
    tokenizer_json: str
    settings: InstanceSettings
    output: str  # Location url: <output>/val, <output>/train
    report_dir: str
    workers: int
    chunk_bytes: int
    token_dtype: str
    overlap: Overlap | None = None


def _optimize_splits(job: _Job) -> None:
    """In a process of its own: litdata's optimize() over the groups, one pass a split. litdata's scratch
    folders (which it empties at the start) are this preparation's own; what it prints (and its workers,
    which inherit the descriptors) goes to ``litdata.log`` there, shown if it fails. The process leads a
    process group of its own, so whatever litdata leaves running (a failed worker's uploader) goes with it."""
    os.setpgrp()
    log_file = os.open(Path(job.report_dir, "litdata.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_file, 1)
    os.dup2(log_file, 2)
    scratch = Path(job.report_dir, "litdata")
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = str(scratch / "chunks")
    os.environ["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = str(scratch / "data")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one group per worker process
    for split in SPLITS:
        items = GroupItems(job.groups, job.tokenizer_json, job.settings, split, job.report_dir, job.token_dtype,
                           job.overlap)
        litdata.optimize(fn=items,
                 inputs=job.mine, output_dir=Location(job.output).join(split), num_workers=job.workers,
                 chunk_bytes=job.chunk_bytes, reorder_files=False, mode="overwrite", start_method="fork")
    Path(job.report_dir, "done").touch()


def _run_optimize(job: _Job) -> None:
    """Runs :func:`_optimize_splits` in a spawned process, with a progress bar of the groups done; a
    mistake in an input is raised here as the one line the worker met."""
    from tqdm import tqdm

    process = multiprocessing.get_context("spawn").Process(target=_optimize_splits, args=(job,), daemon=False)
    total = len(SPLITS) * len(job.mine)
    process.start()
    try:
        with tqdm(total=total, desc="preparing groups (train, then val)", unit=" groups", disable=total < 4) as bar:
            while process.is_alive():
                process.join(0.5)
                bar.update(len(list(Path(job.report_dir).glob("[tv][ra]*-*.json"))) - bar.n)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what is left of it, if anything
        except (ProcessLookupError, PermissionError):
            pass
        process.join(30)
    error = Path(job.report_dir, "error.txt")
    if error.exists():
        raise CorpusError(error.read_text(encoding="utf-8"))
    if process.exitcode != 0 or not Path(job.report_dir, "done").exists():
        printed = Path(job.report_dir, "litdata.log")
        tail = printed.read_text(errors="replace").strip().splitlines()[-15:] if printed.exists() else []
        raise RuntimeError(f"data preparation stopped (exit code {process.exitcode}) before it finished; its output "
                           "is discarded, and the next run prepares the data again. It printed:\n" + "\n".join(tail))
    for split in SPLITS:  # litdata writes an empty index when every worker failed to start
        if job.mine and not _read_reports(job.report_dir, split):
            raise RuntimeError(f"data preparation wrote no {split} instances")


def _read_reports(report_dir: str, split: str) -> list[GroupReport]:
    return [GroupReport.from_dict(json.loads(p.read_text())) for p in sorted(Path(report_dir).glob(f"{split}-*.json"))]


def _token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= np.iinfo(np.uint16).max + 1 else "int32"


def default_workers(num_groups: int, configured: int | None) -> int:
    if configured is not None:
        return max(1, min(configured, num_groups))
    return max(1, min(os.cpu_count() or 1, num_groups))


def prepare(location: Location, files: list[Path], tokenizer_json: str, vocab_size: int, settings: InstanceSettings,
            options: PrepareSettings, meta: dict, node_rank: int = 0, num_nodes: int = 1) -> dict | None:
    """Prepares the dataset at ``location`` unless it is complete; returns its meta.json (None for a node's
    part, which :func:`finish_parts` merges). ``meta``: what to record besides the counts (settings,
    inputs, vocabulary). With ``num_nodes`` > 1 (``across_nodes``) this node prepares its contiguous
    share of the groups into ``<location>.parts/node<rank>``."""
    done = read_meta(location)
    if done is not None:
        return done
    groups = plan_groups(files, options.group_bytes)
    share = np.array_split(np.arange(len(groups)), num_nodes)[node_rank].tolist()
    output = location if num_nodes == 1 else Location(f"{location.url}.parts").child(f"node{node_rank}")
    if num_nodes > 1 and output.read_text("report.json") is not None:
        return None  # this node's part is ready (an earlier attempt)
    if not share:  # more nodes than groups: this one has none
        output.write_text("report.json", json.dumps({**GroupReport().as_dict(), "groups": 0}))
        return None
    workers = default_workers(len(share), options.num_workers)
    log.info("preparing %d group(s) of %d input file(s)%s with %d worker process(es) into %s", len(share), len(files),
             f" (node {node_rank} of {num_nodes})" if num_nodes > 1 else "", workers, location)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bert_exp-prepare-") as scratch, _built_in_place(output) as build:
        overlap = options.overlap()
        _run_optimize(_Job(groups, share, tokenizer_json, settings, build.url, scratch, workers,
                           parse_bytes(options.chunk_bytes), _token_dtype(vocab_size), overlap))
        report = GroupReport()
        for split in SPLITS:
            for part in _read_reports(scratch, split):
                report.add(part)
        if num_nodes > 1:
            build.write_text("report.json", json.dumps({**report.as_dict(), "groups": len(share)}))
            return None
        return _finish(build, files, report, time.perf_counter() - started, settings, meta, overlap)


@contextlib.contextmanager
def _built_in_place(final: Location):
    """Yields where to build ``final``: a local one is built in a directory beside it and renamed into it
    when the block ends without an error (a killed build leaves nothing read as complete), and removed
    otherwise; a remote one is written in place (meta.json, written last, marks it complete)."""
    if final.remote:
        yield final
        return
    build = Location(_build_directory(Path(final.url)))
    try:
        yield build
        _rename_into_place(Path(build.url), Path(final.url))
    finally:
        if Path(build.url).exists():
            shutil.rmtree(build.url, ignore_errors=True)


def _finish(location: Location, files: list[Path], report: GroupReport, seconds: float, settings: InstanceSettings,
            meta: dict, overlap: Overlap | None = None) -> dict:
    """Writes meta.json (last: it marks the dataset complete) and logs what was made and lost."""
    summary = data_report(report, files, seconds, overlap)
    warn_about_losses(summary, settings.max_seq_length)
    counts = {split: json.loads(location.read_text(f"{split}/index.json") or '{"chunks": []}')["chunks"]
              for split in SPLITS}
    record = {**meta, "format": FORMAT,
              "splits": {split: {"instances": sum(c["chunk_size"] for c in chunks), "chunks": len(chunks)}
                         for split, chunks in counts.items()},
              "report": summary}
    log.info("prepared %d documents, %d tokens in %.1f s (%.0f tokens/s): %d training and %d validation instances; "
             "%d tokens (%.2f%%) dropped by truncation", summary["documents"], summary["tokens"], seconds,
             summary["tokens_per_second"] or 0, record["splits"]["train"]["instances"],
             record["splits"]["val"]["instances"], summary["tokens_dropped"], 100 * summary["tokens_dropped_fraction"])
    location.write_text("meta.json", json.dumps(record, indent=1, sort_keys=True))
    return record


def _build_directory(final: Path) -> str:
    """A new directory beside ``final`` to build it in, named after this host and process; the ones of
    this host's processes that are gone (a preparation killed half-way) are removed first."""
    final.parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for stale in final.parent.glob(f".{final.name}.{host}-*"):
        pid = stale.name[len(f".{final.name}.{host}-"):].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f".{final.name}.{host}-{os.getpid()}.", dir=final.parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rename_into_place(build: Path, final: Path) -> None:
    try:
        os.rename(build, final)
    except OSError:
        if not final.exists():  # another builder's identical copy is in place: ours is discarded
            raise


def finish_parts(location: Location, files: list[Path], num_nodes: int, settings: InstanceSettings, meta: dict,
                 overlap: Overlap | None = None) -> dict:
    """Merges the nodes' parts into the dataset (``litdata.merge_datasets``), then writes meta.json; run
    by one process once every node has prepared its part."""
    done = read_meta(location)
    if done is not None:
        return done
    started = time.perf_counter()
    parts, report = [], GroupReport()
    for node in range(num_nodes):
        part = Location(f"{location.url}.parts").child(f"node{node}")
        text = part.read_text("report.json")
        if text is None:
            raise PreparedDataError(f"{part}: this node's part of the data preparation is missing or incomplete")
        data = json.loads(text)
        report.add(GroupReport.from_dict(data))
        if data.get("groups"):
            parts.append(part)
    with _built_in_place(location) as build:
        for split in SPLITS:
            if len(parts) == 1:  # one node had every group: its part is the dataset
                parts[0].child(split).copy_to(build.child(split))
            else:
                litdata.merge_datasets([part.join(split) for part in parts], build.join(split))
        record = _finish(build, files, report, time.perf_counter() - started, settings, meta, overlap)
    Location(f"{location.url}.parts").remove()
    return record


# -- reading ---------------------------------------------------------------------------------------------

def to_sample(item: dict, mask_seed: int, epoch: int | None) -> dict:
    """A stored item as the collator takes it: token ids and types, the NSP label (-100: none) and the
    seed of its masks, from (the run's seed, the item's uid) and, for dynamic masks, the epoch."""
    ids = np.asarray(item["input_ids"], dtype=np.int64)
    uid, b_start, label = (int(x) for x in item["info"])
    token_type_ids = np.zeros_like(ids)
    token_type_ids[b_start:] = 1
    seed = mask_seed * 1_000_003 + uid
    if epoch is not None:
        seed = seed * 1_000_033 + epoch
    return {"input_ids": ids, "token_type_ids": token_type_ids, "next_sentence_label": label if label >= 0 else -100,
            "mask_seed": seed % (1 << 63)}


class StreamedInstances(StreamingDataset):
    """Training instances streamed from a prepared dataset's ``train/`` (local or remote): each epoch its
    chunks are shuffled and shared out among the ranks and their loader workers, and the items of each
    chunk shuffled. Each item becomes a sample whose dynamic masks follow (its uid, the epoch)."""

    def __init__(self, input_dir: str, mask_seed: int, static_masks: bool, shuffle_seed: int,
                 cache_dir: str | None = None):
        super().__init__(input_dir, cache_dir=cache_dir, shuffle=True, drop_last=True, seed=shuffle_seed)
        self.mask_seed, self.static_masks = mask_seed, static_masks

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return to_sample(item, self.mask_seed, None if self.static_masks else self.current_epoch)


class PreparedInstances(torch.utils.data.Dataset):
    """The instances of a prepared split read by index (validation: each rank takes its own indices, every
    example once). litdata's dataset is opened in each process that reads, so loader workers do not
    receive a copy of it."""

    def __init__(self, input_dir: str, mask_seed: int, length: int, cache_dir: str | None = None):
        self.input_dir, self.mask_seed, self.length, self.cache_dir = input_dir, mask_seed, length, cache_dir
        self._dataset = None

    def __getstate__(self):
        return {**self.__dict__, "_dataset": None}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        if self._dataset is None:
            self._dataset = StreamingDataset(self.input_dir, cache_dir=self.cache_dir)
        return to_sample(self._dataset[int(index)], self.mask_seed, 0)


"""A damaged object store and a full disk: an object-store chunk is checked against its sha256 once after
it is downloaded (a chunk replaced by one of the same size stops the run, named), every field of every
item read is checked (a damaged label or segment position stops the run, named, instead of failing deep
in the model or training), and a disk that fills while index.json, meta.json or a checksum memo is
written is one line naming the file, with no temporary file left."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import inject
from bert_exp.data import InstanceSettings, LoaderSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data import hashing
from bert_exp.data.corpus import integrity
from bert_exp.data.corpus.integrity import read_meta
from bert_exp.data.corpus.preparation import PrepareSettings
from bert_exp.data.corpus.storage import PreparedDataError
from bert_exp.errors import UserError
from bert_exp.resources import minilm_dir
from helpers import REPO

SETTINGS = {"group_bytes": "1MB", "chunk_bytes": "16KB", "num_workers": 1}  # one group, several chunks


def corpus(data_dir, cache, **prepare) -> PretrainingDataModule:
    """Thirteen inaugural addresses, MiniLM's vocabulary (nothing to train), instances of 64 tokens."""
    return PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "19[0-4]*.txt")],
                                 tokenizer=TokenizerSpec(vocab_file=str(minilm_dir() / "vocab.txt")),
                                 cache_dir=str(cache), loader=LoaderSettings(batch_size=8),
                                 instances=InstanceSettings(val_fraction=0.2, max_seq_length=64),
                                 prepare=PrepareSettings(**{**SETTINGS, **prepare}))


@pytest.fixture(scope="module")
def prepared(data_dir, tmp_path_factory) -> Path:
    """The corpus prepared once into a cache of its own; tests copy it."""
    cache = tmp_path_factory.mktemp("prepared_cache")
    corpus(data_dir, cache).prepare_data()
    return cache


def copy_of(prepared: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the prepared cache, its dataset directory)."""
    cache = tmp_path / "cache"
    shutil.copytree(prepared, cache)
    (dataset,) = [p for p in (cache / "prepared").iterdir() if not p.name.startswith(".")]
    return cache, dataset


def items(chunk: bytes):
    """Where each item's fields lie in a litdata chunk: (token ids' offset, their count, info's offset)."""
    count = int(np.frombuffer(chunk[:4], dtype=np.uint32)[0])
    offsets = np.frombuffer(chunk[4:8 + 4 * count], dtype=np.uint32)
    for start in offsets[:-1]:
        ids_bytes = int(np.frombuffer(chunk[start:start + 4], dtype=np.uint32)[0])
        yield start + 8, ids_bytes // 2, start + 8 + ids_bytes  # after the two fields' sizes; uint16 ids


def no_partial_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith(".partial") or p.name.startswith(".tmp")]


# -- item 5: an object store's chunks, and every field of every item ---------------------------------------

def upload(directory: Path, bucket_url: str) -> str:
    """A prepared dataset put into the object store at ``bucket_url``/its key; returns its URL."""
    import boto3

    client = boto3.session.Session().client("s3")
    bucket, _, prefix = bucket_url.removeprefix("s3://").partition("/")
    for path in directory.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{directory.name}/{path.relative_to(directory)}")
    return f"{bucket_url}/{directory.name}"


def test_an_object_store_chunk_is_checked_once_after_download_and_a_same_size_replacement_stops(
        data_dir, tmp_path, prepared, s3_server, monkeypatch):
    """The chunks downloaded into the stream cache are read for their sha256 once (not again in the next
    epoch); a chunk replaced in the store by another of the same size (two token ids swapped: every item
    still looks right) stops the run when it is downloaded, with one line naming it, and the bad download
    is removed."""
    import boto3

    cache, dataset = copy_of(prepared, tmp_path)
    url = upload(dataset, s3_server)
    hashed = []
    monkeypatch.setattr(integrity, "file_sha256", lambda path: hashed.append(Path(path).name) or
                        hashing.file_sha256(path))
    dm = corpus(data_dir, cache, dir=s3_server)
    dm.setup("fit")
    assert dm.prepared_location.url == url  # the same key: nothing prepared again
    chunks = sorted(c["filename"] for c in dm.meta["chunks"]["train"])
    assert len(chunks) >= 3
    for _ in dm.train_dataloader():
        pass
    assert sorted(hashed) == chunks  # each chunk once, after its download
    for _ in dm.train_dataloader():
        pass
    assert sorted(hashed) == chunks  # kept in the stream cache: not read again

    # a same-size chunk in the store; the node's copy evicted (as litdata does when its cache is full)
    name = chunks[1]
    data = bytearray((dataset / "train" / name).read_bytes())
    for ids, count, _ in items(bytes(data)):
        if count > 4 and data[ids + 2:ids + 4] != data[ids + 4:ids + 6]:
            data[ids + 2:ids + 4], data[ids + 4:ids + 6] = data[ids + 4:ids + 6], data[ids + 2:ids + 4]
            break
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    boto3.session.Session().client("s3").put_object(Bucket=bucket, Key=f"{prefix}/train/{name}", Body=bytes(data))
    (downloaded,) = (cache / "stream").rglob(name)
    downloaded.unlink()
    again = corpus(data_dir, cache, dir=s3_server)
    again.setup("fit")  # sizes agree: only the content tells
    with pytest.raises(PreparedDataError) as caught:
        for _ in again.train_dataloader():
            pass
    message = str(caught.value)
    assert message.startswith(f"{url}/train/{name}: its sha256 is not the one meta.json records"), message
    assert "\n" not in message
    assert not downloaded.exists()  # the next run downloads it again
    assert no_partial_files(cache) == []


def damage_every_train_item(dataset: Path, damage) -> None:
    """Rewrites every training item's info [uid, b_start, label] as ``damage(info, its token count)``, and
    records the damaged chunks' sha256 in meta.json: bytes the checksum does not catch (a chunk prepared
    so), found as the items are read."""
    meta = json.loads((dataset / "meta.json").read_text())
    for chunk in meta["chunks"]["train"]:
        path = dataset / "train" / chunk["filename"]
        data = bytearray(path.read_bytes())
        for _, count, info in items(bytes(data)):
            fields = np.frombuffer(bytes(data[info:info + 24]), dtype=np.int64).tolist()
            data[info:info + 24] = np.array(damage(fields, count), dtype=np.int64).tobytes()
        path.write_bytes(bytes(data))
        chunk["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (dataset / "meta.json").write_text(json.dumps(meta))


AFTER_SEP = r"\(after a \[SEP\], before the end\)"


@pytest.mark.parametrize("damage, problem", [
    (lambda info, count: [info[0], info[1], 7], r"next-sentence label 7 \(0 or 1\)"),
    (lambda info, count: [info[0], count + 5, info[2]], rf"segment B starting at \d+ in \d+ tokens {AFTER_SEP}"),
    (lambda info, count: [info[0], info[1] - 1, info[2]], rf"segment B starting at \d+ in \d+ tokens {AFTER_SEP}"),
], ids=["label", "b_start_outside", "b_start_moved"])
def test_a_damaged_label_or_segment_position_stops_the_run_naming_the_chunk(data_dir, tmp_path, prepared, damage,
                                                                            problem):
    """Before: a label of 7 reached the NSP loss (an IndexError deep in the model), a segment B moved
    trained with the wrong token types. Now the first item read stops the run, one line naming the chunk."""
    cache, dataset = copy_of(prepared, tmp_path)
    damage_every_train_item(dataset, damage)
    dm = corpus(data_dir, cache)
    dm.setup("fit")
    with pytest.raises(PreparedDataError, match=rf"^{dataset / 'train'}/chunk-\d+-\d+\.bin: {problem}: the chunk is "
                                                r"damaged \(delete the prepared dataset"):
        next(iter(dm.train_dataloader()))


def test_item_rules_name_every_field_that_cannot_be_what_was_prepared():
    from bert_exp.data.corpus.integrity import ItemRules

    pairs = ItemRules(vocab_size=100, max_seq_length=8, pairs=True, cls_id=2, sep_id=3)
    single = ItemRules(vocab_size=100, max_seq_length=8, pairs=False, cls_id=2, sep_id=3)
    ids = np.array([2, 10, 11, 3, 12, 3], dtype=np.uint16)

    def item(ids=ids, info=(5, 4, 1)):
        return {"input_ids": np.asarray(ids), "info": np.asarray(info, dtype=np.int64)}

    assert pairs.problem(item()) is None
    assert single.problem(item(info=(5, 6, -1))) is None
    assert pairs.problem(item(ids=np.r_[ids, [10, 11, 3]])) == "an item of 9 tokens (from 2 to " \
                                                                "data.instances.max_seq_length=8)"
    assert pairs.problem(item(ids=[2])).startswith("an item of 1 tokens")
    assert pairs.problem(item(ids=np.r_[ids[:-1], 100])) == "token id 100 outside the vocabulary of 100"
    assert pairs.problem(item(ids=np.r_[10, ids[1:]])) == "an item that does not start with [CLS] and end with [SEP]"
    assert pairs.problem(item(ids=ids.reshape(2, 3))).startswith("an item of (2, 3) token ids")
    assert pairs.problem(item(info=(5, 4))).startswith("an item of (6,) token ids and (2,) info values")
    assert pairs.problem(item(info=(-1, 4, 1))) == "an item uid -1 below 0"
    assert pairs.problem(item(info=(5, 4, -1))) == "next-sentence label -1 (0 or 1)"
    assert pairs.problem(item(info=(5, 2, 0))) == "segment B starting at 2 in 6 tokens (after a [SEP], before the end)"
    assert single.problem(item(info=(5, 6, 0))) == "next-sentence label 0 where the objective has none (-1)"
    assert single.problem(item(info=(5, 4, -1))) == "segment B starting at 4 in an item of one segment of 6 tokens"


# -- item 7: a full disk while the index, meta.json or a checksum memo is written ------------------------

@pytest.mark.parametrize("name", ["index.json", "meta.json"])
def test_a_disk_that_fills_while_the_index_or_meta_json_is_written_is_one_line(data_dir, tmp_path, name):
    """The groups prepared, the disk fills as ``name`` is written: one line naming the file and the full
    disk (the CLI's exit 2), nothing half-written or half-built left, and the dataset not taken for
    complete."""
    cache = tmp_path / "cache"
    dm = corpus(data_dir, cache)
    dm.tokenizer  # noqa: B018  the vocabulary loaded before the disk fills
    undo = inject.fill_disk_for(name)
    try:
        with pytest.raises(PreparedDataError) as caught:
            dm.prepare_data()
    finally:
        undo()
    message = str(caught.value)
    assert "\n" not in message and f"/{name}: no space left on the device while writing it" in message, message
    assert str(cache / "prepared") in message
    assert no_partial_files(cache) == []
    assert list((cache / "prepared").iterdir()) == []  # the directory it was built in is gone
    assert read_meta(dm.prepared_location) is None


def test_a_full_cache_disk_while_hashing_the_inputs_is_one_line(data_dir, tmp_path):
    """The inputs' sha256 remembered in the cache: a full disk there is one line naming the directory,
    with no temporary file left (before: OSError's traceback, and the memo's temporary file kept)."""
    files = sorted((data_dir / "corpus" / "inaugural").glob("19[0-4]*.txt"))[:2]
    undo = inject.fill_disk_for("file_sha256")
    try:
        with pytest.raises(UserError) as caught:  # the CLI's one line, exit 2
            hashing.files_sha256(files, tmp_path / "cache")
    finally:
        undo()
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'cache' / 'file_sha256'}: no space left on the device while remembering "
                              f"the sha256 of {files[0]}"), message
    assert "\n" not in message
    assert no_partial_files(tmp_path) == []


def test_a_full_cache_disk_while_remembering_checked_chunks_is_one_line(data_dir, tmp_path, prepared):
    cache, dataset = copy_of(prepared, tmp_path)
    shutil.rmtree(cache / "verified", ignore_errors=True)
    dm = corpus(data_dir, cache)
    undo = inject.fill_disk_for(str(cache / "verified"))
    try:
        with pytest.raises(PreparedDataError, match=rf"^{cache / 'verified'}/\w+\.json: no space left on the device"):
            dm.setup("fit")
    finally:
        undo()
    assert no_partial_files(cache) == []


# -- through the command line ---------------------------------------------------------------------------

def run_cli(cache: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """BERT-tiny pre-training on the corpus above (one step), tests/faults/inject.py importable."""
    env = {**os.environ, "BERT_EXP_CACHE": str(cache), "WANDB_MODE": "offline",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "faults")])}
    args = ["+experiment=pretrain_tiny", "data.files=['${paths.data_dir}/corpus/inaugural/19[0-4]*.txt']",
            f"data.tokenizer.vocab_file={minilm_dir() / 'vocab.txt'}", "data.prepare.num_workers=1",
            "data.prepare.evaluation_sets=null", "trainer.max_steps=1", "trainer.val_check_interval=1",
            "trainer.limit_val_batches=1", *extra, f"hydra.run.dir={run_dir}"]
    return subprocess.run([sys.executable, "-m", "bert_exp", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return line


@pytest.mark.slow
def test_a_chunk_replaced_in_the_object_store_ends_the_run_in_one_line(data_dir, tmp_path, s3_server):
    """Prepared into the store by a first run; every training chunk then replaced there by one of the same
    size and the node's downloads cleared: the next run stops at its first item, exit 2, one line."""
    import boto3

    cache, store = tmp_path / "cache", ["data.prepare.dir=" + s3_server, "data.prepare.chunk_bytes=16KB"]
    first = run_cli(cache, tmp_path / "first", *store)
    assert first.returncode == 0, first.stderr[-3000:]
    client = boto3.session.Session().client("s3")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="corpora")["Contents"] if "/train/chunk-" in o["Key"]]
    for key in keys:
        data = bytearray(client.get_object(Bucket="corpora", Key=key)["Body"].read())
        ids, _, _ = next(items(bytes(data)))  # two token ids of the first item swapped
        data[ids + 2:ids + 4], data[ids + 4:ids + 6] = data[ids + 4:ids + 6], data[ids + 2:ids + 4]
        client.put_object(Bucket="corpora", Key=key, Body=bytes(data))
    shutil.rmtree(cache / "stream")
    line = one_error_line(run_cli(cache, tmp_path / "second", *store))
    assert re.match(r"error: s3://corpora/prepared/\w+/train/chunk-\d+-\d+\.bin: its sha256 is not the one meta.json "
                    r"records", line), line
    assert no_partial_files(cache) == []


@pytest.mark.slow
def test_a_full_disk_while_meta_json_is_written_ends_the_run_in_one_line(data_dir, tmp_path):
    """Through the command line: exit 2, one line naming meta.json and the full disk, nothing half-written
    or half-built left."""
    cache = tmp_path / "cache"
    line = one_error_line(run_cli(cache, tmp_path / "run", "+callbacks.fault={_target_:inject.DiskFullWriting,"
                                                           "name:meta.json}"))
    assert "/meta.json: no space left on the device while writing it" in line, line
    assert no_partial_files(cache) == [] and list((cache / "prepared").iterdir()) == []

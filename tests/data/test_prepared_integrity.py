"""What makes prepared data the same data everywhere, and what stops a run that would read other data:
the layout depends on the groups alone (not on the workers that made it), the identity on the content
alone, each chunk's sha256 is checked once per file version, a token id outside the vocabulary is named
with its chunk, a resume onto other data or another process layout stops, an unusable object store or
a full disk is one line before the work."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bert_exp.data import InstanceSettings, LoaderSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus import preparation
from bert_exp.data.corpus.integrity import read_meta, verify_checksums
from bert_exp.data.corpus.preparation import PrepareSettings, prepare
from bert_exp.data.corpus.storage import Location, PreparedDataError
from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.errors import UserError
from bert_exp.resources import minilm_dir


def inaugural(data_dir, cache, tokenizer=None, **prepare_options):
    return PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                 tokenizer=tokenizer or TokenizerSpec(vocab_size=2000), cache_dir=str(cache),
                                 loader=LoaderSettings(batch_size=8), instances=InstanceSettings(val_fraction=0.1),
                                 prepare=PrepareSettings(**{"group_bytes": "150KB", **prepare_options}))


def chunk_files(location: Path) -> dict[str, bytes]:
    return {str(p.relative_to(location)): p.read_bytes() for p in sorted(location.glob("*/chunk-*.bin"))}


def test_two_copies_made_with_other_worker_counts_are_the_same_data(data_dir, tmp_path):
    """Node-local copies (two caches) prepared with 1 and with 2 workers: the same chunks, byte for byte,
    the same indexes and the same identity; only the timings differ."""
    one, two = inaugural(data_dir, tmp_path / "a", num_workers=1), inaugural(data_dir, tmp_path / "b", num_workers=2)
    one.setup("fit")
    two.setup("fit")
    assert one.prepared_location.url.rsplit("/", 1)[-1] == two.prepared_location.url.rsplit("/", 1)[-1]
    a, b = Path(one.prepared_location.url), Path(two.prepared_location.url)
    assert one.meta["splits"]["train"]["chunks"] > 2  # several groups, several chunks
    assert chunk_files(a) == chunk_files(b)
    for split in ("train", "val"):
        assert (a / split / "index.json").read_text() == (b / split / "index.json").read_text()
    assert one.meta["identity"] == two.meta["identity"]
    assert "build_seconds" in one.meta["report"] and "build_seconds" in two.meta["report"]  # beside the identity
    # the identity is the content's: another chunk size is another layout, another key and identity
    other = inaugural(data_dir, tmp_path / "a", num_workers=1, chunk_bytes="64KB")
    other.setup("fit")
    assert other.prepared_location.url != one.prepared_location.url
    assert other.meta["identity"] != one.meta["identity"]
    assert other.meta["splits"]["train"]["instances"] == one.meta["splits"]["train"]["instances"]


def test_the_default_chunk_size_is_larger_in_an_object_store(tmp_path):
    options = PrepareSettings()
    assert options.chunk_size(Location(str(tmp_path))) == 1 << 20
    assert options.chunk_size(Location("s3://bucket/prefix")) == 32 << 20
    assert PrepareSettings(chunk_bytes="8MB").chunk_size(Location("s3://b/p")) == 8 << 20
    assert options.shared(Location("s3://b/p")) and not options.shared(Location(str(tmp_path)))
    with pytest.raises(ValueError, match="data.prepare.chunk_bytes='big'"):
        PrepareSettings(chunk_bytes="big")


def test_a_chunk_damaged_in_place_is_named_before_training(data_dir, tmp_path):
    """Random bytes written into a chunk, its size unchanged: the next setup() reads its sha256 against
    meta.json's and stops, naming it. A chunk verified once is not read again until its file changes."""
    dm = inaugural(data_dir, tmp_path / "cache")
    dm.setup("fit")
    location = dm.prepared_location
    assert verify_checksums(location, dm.meta, dm.cache_dir) == 0  # verified by setup(), remembered
    chunk = sorted(Path(location.url, "train").glob("chunk-*.bin"))[1]
    data = bytearray(chunk.read_bytes())
    data[100:8292] = np.random.default_rng(0).integers(0, 256, 8192, dtype=np.uint8).tobytes()
    chunk.write_bytes(bytes(data))
    with pytest.raises(PreparedDataError, match=rf"^{chunk}: its sha256 is not the one meta.json records"):
        inaugural(data_dir, tmp_path / "cache").setup("fit")


def test_a_token_id_outside_the_vocabulary_stops_the_run_naming_the_chunk(data_dir, tmp_path):
    """Where the checksum is not read (an object store's chunk; or, here, a damaged chunk whose file
    version was already verified), every item's token ids are checked as they are read."""
    dm = inaugural(data_dir, tmp_path / "cache")
    dm.setup("fit")
    location = Path(dm.prepared_location.url)
    for chunk in sorted((location / "train").glob("chunk-*.bin")):
        stat = chunk.stat()
        data = bytearray(chunk.read_bytes())
        count = int(np.frombuffer(data[:4], dtype=np.uint32)[0])  # litdata's chunk: items, offsets, items
        offsets = np.frombuffer(bytes(data[4:8 + 4 * count]), dtype=np.uint32)
        for start in offsets[:-1]:  # an item: its fields' sizes, then the token ids and the info
            ids_bytes = int(np.frombuffer(bytes(data[start:start + 4]), dtype=np.uint32)[0])
            data[start + 8:start + 8 + ids_bytes] = b"\xff" * ids_bytes  # token ids 65535, the same size
        chunk.write_bytes(bytes(data))
        os.utime(chunk, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the version remembered as verified
    again = inaugural(data_dir, tmp_path / "cache")
    again.setup("fit")
    with pytest.raises(PreparedDataError, match=rf"{location / 'train'}/chunk-\d+-\d+\.bin: token id 65535 outside "
                                                r"the vocabulary of 2000"):
        next(iter(again.train_dataloader()))


def fake_trainer(world_size=1):
    return SimpleNamespace(world_size=world_size, global_rank=0, local_rank=0)


def test_a_resume_onto_other_data_or_another_process_layout_stops(data_dir, tmp_path):
    dm = inaugural(data_dir, tmp_path / "cache")
    dm.setup("fit")
    dm.trainer = fake_trainer()
    state = {"epoch": 1, "batches_done": 7, "stream": True, "world_size": 1, "num_workers": 0,
             "prepared_identity": dm.meta["identity"]}
    dm.load_state_dict(state)  # the same data and layout: resumes
    assert dm._resume_state == {"epoch": 1, "batches_done": 7}
    with pytest.raises(UserError, match=r"trained on other prepared data \(identity 0123456789ab\)"):
        dm.load_state_dict({**state, "prepared_identity": "0123456789abcdef"})
    with pytest.raises(UserError, match=r"7 batches into an epoch with 2 process\(es\) and "
                                        r"data.loader.num_workers=0; this run has 1 and 0"):
        dm.load_state_dict({**state, "world_size": 2})
    dm.load_state_dict({**state, "world_size": 2, "batches_done": 0})  # at an epoch's start any layout will do


# -- storage faults -----------------------------------------------------------------------------------------

def test_a_missing_bucket_is_one_line_before_the_vocabulary(data_dir, tmp_path, s3_server):
    dm = inaugural(data_dir, tmp_path / "cache", dir="s3://no-such-bucket/prepared")
    with pytest.raises(PreparedDataError, match=r"^data.prepare.dir=s3://no-such-bucket/prepared: no bucket named "
                                                r"'no-such-bucket'"):
        dm.prepare_data()
    assert not (tmp_path / "cache" / "tokenizers").exists()  # found before any vocabulary was trained


def test_absent_credentials_are_one_line_before_the_vocabulary(data_dir, tmp_path, s3_server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    dm = inaugural(data_dir, tmp_path / "cache", dir=s3_server)
    with pytest.raises(PreparedDataError, match=r"^data.prepare.dir=s3://corpora/prepared: no credentials found"):
        dm.check_storage()
    assert not (tmp_path / "cache" / "tokenizers").exists()


def test_two_runs_preparing_one_prefix_write_the_same_objects_and_delete_none(data_dir, tmp_path, s3_server):
    """A second run that started before the first finished writes every object again, with the same
    bytes; nothing the first wrote is removed or changed."""
    import boto3

    client = boto3.session.Session().client("s3")

    def objects():
        pages = client.get_paginator("list_objects_v2").paginate(Bucket="corpora")
        return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}

    first = inaugural(data_dir, tmp_path / "a", dir=s3_server)
    first.prepare_data()
    before = objects()
    meta_key = next(k for k in before if k.endswith("meta.json"))
    client.delete_object(Bucket="corpora", Key=meta_key)  # as if the first were still preparing
    second = inaugural(data_dir, tmp_path / "b", dir=s3_server, num_workers=1)
    second.prepare_data()
    after = objects()
    assert set(after) == set(before)
    assert {k: v for k, v in after.items() if k != meta_key} == {k: v for k, v in before.items() if k != meta_key}
    second.setup("fit")
    assert second.meta["identity"] == json.loads(first.prepared_location.read_text("meta.json"))["identity"]


def test_too_little_disk_is_one_line_before_the_work(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(Location, "free_bytes", lambda self: 1000)
    dm = inaugural(data_dir, tmp_path / "cache")
    with pytest.raises(PreparedDataError, match=r"cache/prepared/\.[^:]+: 1000 bytes free, and preparing the data "
                                                r"needs about \d+\.\d KB there"):
        dm.prepare_data()
    assert [p.name for p in (tmp_path / "cache" / "prepared").iterdir()] == []  # nothing half-built kept


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB file system (tmpfs), where mounting one is permitted (root with CAP_SYS_ADMIN)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3M", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"tmpfs cannot be mounted here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_that_fills_during_preparation_is_one_line_naming_it(data_dir, tmp_path, small_disk, monkeypatch):
    """The estimate let through (a file system that fills while preparing, as a shared one may): the
    error is one line naming the directory, and nothing half-built is kept."""
    monkeypatch.setattr(preparation, "PREPARED_PER_TEXT_BYTE", 0.001)
    tokenizer = load_vocab_file(minilm_dir() / "vocab.txt")
    files = [data_dir / "corpus" / "imdb" / "part00.txt.xz"]  # about 6 MB of text
    location = Location(str(small_disk / "prepared" / "key"))
    with pytest.raises(PreparedDataError) as caught:
        prepare(location, files, tokenizer.to_str(), tokenizer.get_vocab_size(),
                InstanceSettings(doc_boundary="blank_line"),
                PrepareSettings(num_workers=1, group_bytes="4MB"), {})
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{small_disk / 'prepared'}: no space left on the device")
    assert "needs about" in message
    assert list((small_disk / "prepared").iterdir()) == []
    assert read_meta(location) is None


@pytest.mark.parametrize("text, problem", [
    ("{}", r"no identity, chunks, splits, report"),
    ("[1, 2]", r"not an object"),
    ('{"identity": "x", "splits": {}, "report": {}, "chunks": {"train": [{"filename": "a.bin"}], "val": []}}',
     r"chunks.train is not a list of chunks"),
])
def test_a_meta_json_that_parses_but_is_no_record_is_one_line(tmp_path, text, problem):
    (tmp_path / "meta.json").write_text(text)
    with pytest.raises(PreparedDataError, match=rf"meta.json: not a prepared dataset's record \({problem}"):
        read_meta(Location(str(tmp_path)))


def test_built_directories_follow_the_umask_for_a_shared_cache(tmp_path):
    """A prepared dataset and a vocabulary are built in a new directory renamed into the cache: with mode
    0777 less the umask, as mkdir gives (mkdtemp's 0700 kept other users and uids out of a shared cache)."""
    import stat

    from bert_exp.data.tokenizer import atomic_directory

    old = os.umask(0o002)
    try:
        vocabulary = atomic_directory(tmp_path / "tokenizer" / "abc", lambda d: (d / "vocab.txt").write_text("x\n"))
        with preparation._built_in_place(Location(str(tmp_path / "prepared" / "def"))) as build:
            Path(build.url, "meta.json").write_text("{}")
    finally:
        os.umask(old)
    for directory in (vocabulary, tmp_path / "prepared" / "def"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o775, directory

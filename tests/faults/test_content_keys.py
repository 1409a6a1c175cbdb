"""The caches' keys are the content's and the options', and a cache is the content it is keyed by.

- No key depends on where a node keeps its cache or how a path is spelt: two nodes with caches at other
  paths, the corpus given as ``.xz`` objects staged into each, compute the same vocabulary and prepared
  keys, and a prepared copy they share in an object store completes.
- Every option that changes the text read is in every key built from it (a table's ``text_column`` in the
  vocabulary's), and nothing else is (worker counts, paths).
- An input rewritten with its size and mtime kept is hashed again (ctime and inode, as git's index), and
  one that changes after it was hashed stops the run, naming it, before anything is stored under the
  old hash.
- A cached vocabulary (``tokenizer.json``, ``vocab.txt``) is checked against the sha256 recorded when
  it was written: a truncated or edited one is one line naming it, exit 2.

The corpora are made here (a few KB of generated sentences), so nothing needs $BERT_EXP_DATA.
"""

import json
import lzma
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_exp.data import InstanceSettings, LoaderSettings, PretrainingDataModule, TokenizerSpec, hashing
from bert_exp.data.corpus.files import CorpusError
from bert_exp.data.corpus.integrity import read_meta
from bert_exp.data.corpus.preparation import PrepareSettings
from bert_exp.data.tokenizer import VocabularyError
from helpers import REPO, run_cli

WORDS = {
    "sea": "ship sail wave harbour tide anchor storm island coast mast rope deck captain crew gull salt "
           "current reef lighthouse voyage compass chart keel hull oar".split(),
    "town": "street market bakery square church clock bridge lantern window garden baker mayor council "
            "tavern school river mill road carriage merchant festival bell chimney".split(),
}


def sentences(rng: random.Random, words: list[str], count: int) -> list[str]:
    out = []
    for _ in range(count):
        picked = [rng.choice(words) for _ in range(rng.randint(5, 12))]
        out.append(" ".join(picked).capitalize() + ".")
    return out


def text_file(path: Path, seed: int, theme: str = "sea", paragraphs: int = 6) -> Path:
    """Paragraphs of generated sentences, separated by blank lines (about 2 KB)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(" ".join(sentences(rng, WORDS[theme], 4)) for _ in range(paragraphs)) + "\n")
    return path


def corpus(folder: Path, files: int = 6) -> Path:
    for index in range(files):
        text_file(folder / f"part{index:02d}.txt", seed=index, theme="sea" if index % 2 else "town")
    return folder


def small_instances(**settings) -> InstanceSettings:
    """Small instances; a paragraph is a document, so a group of two files holds a dozen."""
    return InstanceSettings(**{"max_seq_length": 32, "val_fraction": 0.2, "doc_boundary": "blank_line", **settings})


def module(files, cache: Path, tokenizer: TokenizerSpec | None = None, instances: InstanceSettings | None = None,
           loader_workers: int = 0, **prepare) -> PretrainingDataModule:
    return PretrainingDataModule(
        files=[str(f) if isinstance(f, Path) else f for f in files], cache_dir=str(cache),
        tokenizer=tokenizer or TokenizerSpec(vocab_size=200),
        instances=instances or small_instances(),
        loader=LoaderSettings(batch_size=4, num_workers=loader_workers),
        prepare=PrepareSettings(**{"group_bytes": "4KB", "num_workers": 1, **prepare}))


def keys(dm: PretrainingDataModule) -> tuple[str, str]:
    """(the vocabulary's key, the prepared data's key)."""
    return dm.tokenizer_dir.name, dm.prepared_location.url.rsplit("/", 1)[-1]


def fake_node(rank: int) -> SimpleNamespace:
    """What the DataModule asks of its trainer, on the first process of node ``rank`` of two."""
    return SimpleNamespace(node_rank=rank, num_nodes=2, is_global_zero=rank == 0, world_size=2, global_rank=rank,
                           local_rank=0, strategy=SimpleNamespace(barrier=lambda name=None: None))


def put_xz_corpus(folder: Path, prefix: str) -> None:
    import boto3

    client = boto3.session.Session().client("s3")
    for path in sorted(corpus(folder).iterdir()):
        client.put_object(Bucket="corpora", Key=f"{prefix}/{path.name}.xz", Body=lzma.compress(path.read_bytes()))


def bucket_keys(prefix: str) -> list[str]:
    import boto3

    client = boto3.session.Session().client("s3")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="corpora", Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


# -- no key depends on where a node keeps its cache ------------------------------------------------------

def test_two_nodes_with_caches_at_other_paths_share_one_prepared_copy_of_xz_objects(tmp_path, s3_server):
    """As on a cluster whose scratch path carries the job id: node 1's cache is elsewhere, the corpus is
    ``.xz`` objects staged into each node's cache (one input with a document boundary of its own), the
    prepared data is shared in the object store. Node 1 receives the vocabulary and the inputs' hashes
    from the first process (the run's hand-off); both compute the same keys, each prepares its share of
    the groups, and the first process completes the copy."""
    put_xz_corpus(tmp_path / "source", "corpus")
    files = ["s3://corpora/corpus/part0[0-3]*.xz", {"path": "s3://corpora/corpus/part0[45]*.xz",
                                                     "doc_boundary": "blank_line"}]
    nodes = [module(files, tmp_path / "node0-cache", dir=s3_server, group_bytes="8KB"),
             module(files, tmp_path / "scratch" / "job-1234" / "cache", dir=s3_server, group_bytes="8KB")]
    nodes[1].use_shared_state(json.loads(json.dumps(nodes[0].shared_state())))
    assert nodes[0].files[0] != nodes[1].files[0]  # staged at other paths
    assert keys(nodes[0]) == keys(nodes[1])
    for rank, dm in enumerate(nodes):
        dm.trainer = fake_node(rank)
        dm.prepare_data()
    nodes[0]._finish_shared()  # the run's first process writes the indexes and meta.json
    meta = read_meta(nodes[1].prepared_location)
    assert meta is not None and meta["splits"]["train"]["instances"] > 0
    assert len({key.split("/")[1] for key in bucket_keys("prepared/")}) == 1  # one dataset, nothing else
    nodes[1].trainer = None
    nodes[1].setup("fit")
    assert nodes[1].meta["identity"] == meta["identity"]


def test_a_node_whose_inputs_are_not_the_first_process_s_is_one_line(tmp_path):
    corpus(tmp_path / "corpus")
    first = module([tmp_path / "corpus"], tmp_path / "a")
    other = module([tmp_path / "corpus" / "part0[0-4]*"], tmp_path / "b")  # five of the six files
    other.use_shared_state(first.shared_state())
    with pytest.raises(CorpusError, match=r"^data.files: this node reads 5 input files, the run's first process 6"):
        other.prepared_key  # noqa: B018


@pytest.mark.slow
def test_two_nodes_of_torchrun_prepare_xz_objects_into_a_shared_prefix(tmp_path, s3_server):
    """The same through the CLI: two "nodes" of torchrun on loopback, their caches at other paths, the
    corpus as ``.xz`` objects, the prepared data in the object store: the run finishes, one dataset."""
    put_xz_corpus(tmp_path / "source", "corpus")
    port = free_port()
    run_dir = tmp_path / "run"
    processes = []
    for node, cache in enumerate((tmp_path / "node0-cache", tmp_path / "scratch" / "job-77" / "node1-cache")):
        env = {**os.environ, "BERT_EXP_CACHE": str(cache), "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                   f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "bert_exp",
                   "+experiment=pretrain_tiny", "hardware=ddp_cpu", "trainer.devices=1", "trainer.num_nodes=2",
                   "data.files=[s3://corpora/corpus/]", "data.tokenizer.vocab_size=200",
                   "data.instances.max_seq_length=32", "data.instances.doc_boundary=blank_line",
                   "global_batch_size=4", f"data.prepare.dir={s3_server}", "data.prepare.group_bytes=8KB",
                   "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
                   "logger=csv", f"hydra.run.dir={run_dir}"]
        processes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
    try:
        errors = [process.communicate(timeout=300)[1] for process in processes]
    finally:  # a node left waiting for the other goes, with its children
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    for node, (process, err) in enumerate(zip(processes, errors)):
        assert process.returncode == 0, f"node {node}:\n{err[-4000:]}"
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 2
    datasets = {key.split("/")[1] for key in bucket_keys("prepared/")}
    assert len(datasets) == 1 and f"prepared/{datasets.pop()}/meta.json" in bucket_keys("prepared/")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- every option that changes the text read, in every key built from it ---------------------------------

def table_corpus(folder: Path) -> list:
    """Two text files of the town and a Parquet file whose columns hold other words (``a``: the town, ``b``:
    the sea)."""
    rng = random.Random(7)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"a": [" ".join(sentences(rng, WORDS["town"], 5)) for _ in range(12)],
                             "b": [" ".join(sentences(rng, WORDS["sea"], 5)) for _ in range(12)]}),
                   folder / "rows.parquet")
    text_file(folder / "one.txt", seed=1, theme="town")
    text_file(folder / "two.txt", seed=2, theme="town")
    return [str(folder / "*.txt"), {"path": str(folder / "rows.parquet"), "text_column": "a"}]


def replace_entry(files: list, **options) -> list:
    return [files[0], {**files[1], **options}]


def change_a_file(files: list) -> list:
    path = Path(files[0].replace("*", "one"))
    path.write_text("Anchor ahoy. " + path.read_text())
    return files


def copy_elsewhere(files: list, tmp: Path) -> list:
    target = tmp / "mounted" / "elsewhere"
    shutil.copytree(Path(files[0]).parent, target)
    return [str(target / "*.txt"), {**files[1], "path": str(target / "rows.parquet")}]


def spelt_otherwise(files: list, tmp: Path) -> list:
    (tmp / "link").symlink_to(Path(files[0]).parent)
    return [str(tmp / "link" / "." / "*.txt"), {**files[1], "path": str(tmp / "link" / ".." / "link" / "rows.parquet")}]


# name, what to change: (files, tmp) -> module arguments; whether the vocabulary's key changes; whether the
# prepared data's key changes (None: not asserted, it follows the trained vocabulary's content)
CASES = [
    ("text_column", lambda f, t: {"files": replace_entry(f, text_column="b")}, True, True),
    ("encoding_fallback", lambda f, t: {"instances": small_instances(encoding_fallback="cp1252")}, True, True),
    ("sample_bytes", lambda f, t: {"tokenizer": TokenizerSpec(vocab_size=200, sample_bytes="2KB")}, True, None),
    ("lowercase", lambda f, t: {"tokenizer": TokenizerSpec(vocab_size=200, lowercase=False)}, True, True),
    ("vocab_size", lambda f, t: {"tokenizer": TokenizerSpec(vocab_size=150)}, True, None),
    ("a file's content", lambda f, t: {"files": change_a_file(f)}, True, True),
    ("inputs' order", lambda f, t: {"files": f[::-1]}, None, True),
    ("an input's doc_boundary", lambda f, t: {"files": [{"path": f[0], "doc_boundary": "file"}, f[1]]}, False, True),
    ("doc_boundary", lambda f, t: {"instances": small_instances(doc_boundary="file")}, False, True),
    ("document_regex", lambda f, t: {"files": [{"path": f[0], "doc_boundary": "regex", "document_regex": "^Ship"},
                                               f[1]]}, False, True),
    ("line_is_sentence", lambda f, t: {"instances": small_instances(line_is_sentence=True)}, False, True),
    ("max_seq_length", lambda f, t: {"instances": small_instances(max_seq_length=48)},
     False, True),
    ("group_bytes", lambda f, t: {"group_bytes": "64KB"}, False, True),
    # what must not change a key
    ("data.prepare.num_workers", lambda f, t: {"num_workers": 2}, False, False),
    ("data.loader.num_workers", lambda f, t: {"loader_workers": 2}, False, False),
    ("data.prepare.wait_minutes", lambda f, t: {"wait_minutes": 5}, False, False),
    ("the cache's path", lambda f, t: {"cache": t / "another" / "cache"}, False, False),
    ("the corpus copied elsewhere", lambda f, t: {"files": copy_elsewhere(f, t)}, False, False),
    ("a path spelt otherwise", lambda f, t: {"files": spelt_otherwise(f, t)}, False, False),
]


@pytest.mark.parametrize("name, change, vocabulary_changes, prepared_changes", CASES, ids=[c[0] for c in CASES])
def test_each_input_option_changes_the_keys_it_should_and_no_other(tmp_path, name, change, vocabulary_changes,
                                                                   prepared_changes):
    files = table_corpus(tmp_path / "corpus")
    before = keys(module(files, tmp_path / "cache"))
    arguments = {"files": files, "cache": tmp_path / "cache", **change(files, tmp_path)}
    after = keys(module(arguments.pop("files"), arguments.pop("cache"), **arguments))
    if vocabulary_changes is not None:
        assert (after[0] != before[0]) == vocabulary_changes, "the vocabulary's key"
    if prepared_changes is not None:
        assert (after[1] != before[1]) == prepared_changes, "the prepared data's key"


def test_evaluation_sets_key_the_prepared_data_by_content(tmp_path):
    files = table_corpus(tmp_path / "corpus")
    here, there = text_file(tmp_path / "squad" / "dev.txt", seed=9), tmp_path / "elsewhere" / "dev.txt"
    there.parent.mkdir()
    shutil.copy(here, there)
    key = keys(module(files, tmp_path / "cache", evaluation_sets=[str(here)]))[1]
    assert keys(module(files, tmp_path / "cache", evaluation_sets=[str(there)]))[1] == key
    there.write_text("Another set.\n")
    assert keys(module(files, tmp_path / "cache", evaluation_sets=[str(there)]))[1] != key


def test_another_column_of_a_table_is_another_vocabulary(tmp_path):
    """The column read is the text: a vocabulary trained on column ``a`` is not reused for ``b``."""
    files = table_corpus(tmp_path / "corpus")
    town = module(files, tmp_path / "cache").tokenizer
    sea = module(replace_entry(files, text_column="b"), tmp_path / "cache").tokenizer
    assert "harbour" in sea.get_vocab() and "harbour" not in town.get_vocab()


# -- a file that changes is read as it is now, or the run stops ------------------------------------------

def rewrite_keeping_size_and_mtime(path: Path) -> None:
    """An edit of the same length, then ``touch -r``: only ctime (and the content) differ. The first
    letter becomes another one."""
    stat = path.stat()
    text = path.read_text()
    with open(path, "r+") as f:  # in place: the same inode
        f.write(("Z" if text[0] != "Z" else "Y") + text[1:])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # a kernel with coarse timestamps (one per timer tick) may give the edit the ctime it had: touch again
    # until it differs, as an edit made a tick later would
    for _ in range(200):
        if path.stat().st_ctime_ns != stat.st_ctime_ns:
            break
        time.sleep(0.01)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert path.stat().st_ctime_ns != stat.st_ctime_ns


def test_a_file_rewritten_with_its_size_and_mtime_kept_is_hashed_again(tmp_path):
    path = text_file(tmp_path / "a.txt", seed=3)
    memo = tmp_path / "cache"
    first = hashing.files_sha256([path], memo)[str(path)]
    original = path.read_text()
    rewrite_keeping_size_and_mtime(path)
    second = hashing.files_sha256([path], memo)[str(path)]
    assert second == hashing.file_sha256(path) != first  # ctime
    stat = path.stat()
    replacement = tmp_path / "new.txt"
    replacement.write_text(original)
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(replacement, path)  # another inode, the same size and mtime
    assert hashing.files_sha256([path], memo)[str(path)] == first


def test_a_file_changed_after_hashing_stops_before_a_vocabulary_is_stored(tmp_path):
    files = corpus(tmp_path / "corpus")
    dm = module([files], tmp_path / "cache")
    vocabulary = dm.tokenizer_dir  # the inputs hashed
    changed = files / "part01.txt"
    rewrite_keeping_size_and_mtime(changed)
    with pytest.raises(CorpusError, match=rf"^{changed}: changed since it was hashed") as caught:
        dm.tokenizer  # noqa: B018
    assert "\n" not in str(caught.value)
    assert not vocabulary.exists() and not list(vocabulary.parent.iterdir())  # nothing under the old hash


def test_a_file_changed_after_hashing_stops_before_prepared_data_is_stored(tmp_path):
    files = corpus(tmp_path / "corpus")
    dm = module([files], tmp_path / "cache")
    dm.tokenizer  # noqa: B018  the inputs hashed, the vocabulary trained on them
    location = Path(dm.prepared_location.url)
    changed = files / "part04.txt"
    rewrite_keeping_size_and_mtime(changed)
    with pytest.raises(CorpusError, match=rf"^{changed}: changed since it was hashed") as caught:
        dm.prepare_data()
    assert "\n" not in str(caught.value)
    assert not location.exists() and not list(location.parent.iterdir())  # nothing under the old hash
    again = module([files], tmp_path / "cache")  # the next run: the file as it is now, under its new hash
    again.setup("fit")
    assert Path(again.prepared_location.url) != location
    assert again.meta["inputs"][str(changed)] == hashing.file_sha256(changed)


# -- the cached vocabulary is checked as chunks are ------------------------------------------------------

def damage(path: Path, how: str) -> None:
    """Cut to half its size, or edited: still a vocabulary, its last token renamed."""
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif path.suffix == ".json":
        tokenizer = json.loads(path.read_text())
        vocab = tokenizer["model"]["vocab"]
        last = max(vocab, key=vocab.get)
        vocab[last + "x"] = vocab.pop(last)
        path.write_text(json.dumps(tokenizer))
    else:
        lines = path.read_text().splitlines()
        path.write_text("\n".join(lines[:-1] + [lines[-1] + "x"]) + "\n")


@pytest.mark.parametrize("name, how", [("tokenizer.json", "truncated"), ("tokenizer.json", "edited"),
                                       ("vocab.txt", "truncated"), ("vocab.txt", "edited")])
def test_a_damaged_cached_vocabulary_is_one_line_naming_the_file(tmp_path, name, how):
    files = corpus(tmp_path / "corpus")
    directory = module([files], tmp_path / "cache").tokenizer_dir
    module([files], tmp_path / "cache").tokenizer  # noqa: B018  trained and cached
    assert module([files], tmp_path / "cache").tokenizer.get_vocab_size() == 200  # reused as recorded
    damage(directory / name, how)
    with pytest.raises(VocabularyError, match=rf"^{directory / name}: its sha256 is not the one recorded") as caught:
        module([files], tmp_path / "cache").tokenizer  # noqa: B018
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_a_truncated_cached_vocabulary_is_one_line_and_exit_2_through_the_cli(tmp_path):
    corpus(tmp_path / "corpus")
    arguments = ["+experiment=pretrain_tiny", f"data.files=[{tmp_path / 'corpus'}]", "data.tokenizer.vocab_size=200",
                 "data.instances.max_seq_length=32", "data.instances.val_fraction=0.2", "global_batch_size=4",
                 "trainer.max_steps=1", "trainer.val_check_interval=1", "trainer.limit_val_batches=1", "logger=csv"]
    env = {"BERT_EXP_CACHE": str(tmp_path / "cache")}
    first = run_cli([*arguments, f"hydra.run.dir={tmp_path / 'first'}"], env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    (cached,) = (tmp_path / "cache" / "tokenizers").glob("*/tokenizer.json")
    damage(cached, "truncated")
    second = run_cli([*arguments, f"hydra.run.dir={tmp_path / 'second'}"], env=env)
    assert second.returncode == 2, second.stderr[-3000:]
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:") or "Traceback" in line]
    assert errors == [f"error: {cached}: its sha256 is not the one recorded when it was written (the cached "
                      f"vocabulary is damaged: delete {cached.parent} to train it again)"]

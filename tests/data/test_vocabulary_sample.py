"""The vocabulary of a corpus larger than ``data.tokenizer.sample_bytes`` is trained on a sample drawn
from every file, the same on every machine; a smaller corpus keeps its whole-corpus vocabulary (and
cache key). Inputs are hashed once per file version. A wait for another process ends in one line."""

import time
from pathlib import Path

import pytest

from bert_exp.data import PretrainingDataModule, TokenizerSpec
from bert_exp.data import hashing
from bert_exp.data.corpus.text import corpus_text_bytes, sample_text_chunks
from bert_exp.waiting import WaitTimeout, wait_for


def module(files, cache, **tokenizer):
    return PretrainingDataModule(files=[str(f) for f in files], tokenizer=TokenizerSpec(vocab_size=1000, **tokenizer),
                                 cache_dir=str(cache))


def test_a_corpus_below_the_sample_size_keeps_its_vocabulary_and_key(data_dir, tmp_path):
    files = sorted((data_dir / "corpus" / "inaugural").glob("*.txt"))
    default, whole = module(files, tmp_path, sample_bytes="1GB"), module(files, tmp_path, sample_bytes=None)
    assert default.vocabulary_sample_bytes is None
    assert default.tokenizer_dir == whole.tokenizer_dir


def test_a_larger_corpus_trains_its_vocabulary_on_a_sample_from_every_file(data_dir, tmp_path):
    files = sorted((data_dir / "corpus" / "inaugural").glob("*.txt"))
    total = corpus_text_bytes(files)
    dm = module(files, tmp_path, sample_bytes="100KB")
    assert dm.vocabulary_sample_bytes == 100 * 1024 < total
    assert dm.tokenizer_dir != module(files, tmp_path, sample_bytes=None).tokenizer_dir
    sample = list(sample_text_chunks(files, 100 * 1024, "latin-1"))
    assert sample == list(sample_text_chunks(files, 100 * 1024, "latin-1"))  # deterministic
    characters = sum(len(text) for text in sample)
    assert 80 * 1024 < characters <= 100 * 1024
    assert len(sample) == len(files)  # every file gives its share (small files: one window each)
    for path, text in zip(files, sample):
        assert text and text.replace("\n", " ").split()[0] in path.read_text(encoding="latin-1")
    assert dm.tokenizer.get_vocab_size() == 1000  # trained on the sample


def test_a_plain_file_is_sampled_through_its_whole_length(data_dir, tmp_path):
    source = data_dir / "corpus" / "tinyshakespeare" / "input.txt"
    size = source.stat().st_size
    sample = "\n".join(sample_text_chunks([source], size // 10, None))
    lines = source.read_text().splitlines()
    assert lines[-1] in sample or lines[-2] in sample  # the last window reaches the file's end
    assert lines[0] in sample  # and the first its start
    assert size // 10 * 0.95 < len(sample.encode()) <= size // 10
    assert all(line in lines for line in sample.splitlines())  # whole lines only


def test_a_compressed_file_gives_its_beginning(data_dir):
    source = data_dir / "corpus" / "imdb" / "part00.txt.xz"
    sample = "".join(sample_text_chunks([source], 300_000, None))
    assert 250_000 < len(sample) < 300_000 + (1 << 20)
    assert sample.startswith(next(iter(sample_text_chunks([source], 1, None)))[:50])


def test_inputs_are_hashed_once_per_file_version(tmp_path, monkeypatch):
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for f in files:
        f.write_text(f"text of {f.name}\n")
    reads = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda path: reads.append(Path(path).name) or real(path))
    first = hashing.files_sha256(files, tmp_path / "cache")
    assert hashing.files_sha256(files, tmp_path / "cache") == first and reads == ["a.txt", "b.txt"]
    time.sleep(0.01)
    files[0].write_text("changed\n")
    changed = hashing.files_sha256(files, tmp_path / "cache")
    assert reads == ["a.txt", "b.txt", "a.txt"] and changed[str(files[0])] == real(files[0]) != first[str(files[0])]


def test_a_wait_that_never_ends_is_one_line_naming_what_was_awaited():
    with pytest.raises(WaitTimeout, match=r"^gave up after 0.0 min waiting for the vocabulary \(RUN/.shared\) "
                                          r"\(data.prepare.wait_minutes sets the limit\)$"):
        wait_for(lambda: False, "the vocabulary (RUN/.shared)", 0.3, poll_s=0.05)
    calls = []
    with pytest.raises(RuntimeError, match="first process failed"):
        wait_for(lambda: False, "x", 30, check=lambda: calls.append(1) or (_ for _ in ()).throw(
            RuntimeError("first process failed")))

"""Compressed corpora read like plain text; bad corpora (corrupt archives, binary files, non-UTF-8 bytes,
text without sentence punctuation) are loud: errors or warnings naming the file, and counts in the report."""

import builtins
import bz2
import gzip
import json
import logging
import lzma
from pathlib import Path

import pytest
from helpers import compose_config

from bert_exp.data import PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus import datamodule as pretraining_module
from bert_exp.datasets.catalog import load_catalog
from bert_exp.data.corpus.groups import InstanceSettings
from bert_exp.data.corpus.preparation import PrepareSettings, prepare
from bert_exp.data.corpus.storage import Location
from bert_exp.data.corpus.files import CorpusError, ReadReport, detect_format, expand_inputs, iter_lines
from bert_exp.data.corpus.text import iter_documents, read_text
from bert_exp.data.tokenizer import tokenizer_from_vocab, train_wordpiece, vocab_list

TEXT = ("The first review is short. It has two sentences.\r\n\r\n"
        "Caf\u00e9 na\u00efve r\u00e9sum\u00e9: the second one!\nIt wraps\nover lines.\n\n"
        "\ufb01nal \u2014 third review.\n\n") * 50
COMPRESSORS = {"xz": lzma.compress, "gzip": gzip.compress, "bz2": bz2.compress}


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def plain(tmp_path) -> Path:
    return write(tmp_path / "plain.txt", TEXT.encode("utf-8"))


@pytest.mark.parametrize("fmt", [*COMPRESSORS, "zstd"])
def test_compressed_reads_equal_the_plain_text(fmt, plain, tmp_path):
    if fmt == "zstd":
        zstandard = pytest.importorskip("zstandard", reason="zstandard is not installed (its missing-module error "
                                                            "is tested below)")
        data = zstandard.ZstdCompressor().compress(TEXT.encode())
    else:
        data = COMPRESSORS[fmt](TEXT.encode())
    packed = write(tmp_path / "corpus.data", data)  # the name says nothing: the magic bytes do
    assert detect_format(packed) == fmt and detect_format(plain) == "plain"
    assert read_text(packed) == read_text(plain)
    assert read_text(packed)[0] == TEXT.replace("\r\n", "\n").removesuffix("\n")  # lines joined: no final newline
    for boundary in ("file", "blank_line"):
        assert list(iter_documents([packed], doc_boundary=boundary)) == list(iter_documents([plain], doc_boundary=boundary))
    assert len(list(iter_documents([packed], doc_boundary="blank_line"))) == 150


def test_zstd_without_the_module_names_the_file_and_the_fix(tmp_path, monkeypatch):
    packed = write(tmp_path / "corpus.txt.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
    real_import = builtins.__import__

    def no_zstandard(name, *args, **kwargs):
        if name == "zstandard":
            raise ImportError("No module named 'zstandard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstandard)
    with pytest.raises(CorpusError, match=r"corpus\.txt\.zst: is zstd-compressed .*pip install zstandard"):
        list(iter_lines(packed))


@pytest.mark.parametrize("fmt", list(COMPRESSORS))
def test_corrupt_or_truncated_archive_is_one_line_naming_the_file(fmt, tmp_path):
    data = COMPRESSORS[fmt](TEXT.encode() * 20)
    truncated = write(tmp_path / f"cut.{fmt}", data[: len(data) // 2])
    corrupt = bytearray(data)
    corrupt[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    corrupted = write(tmp_path / f"bad.{fmt}", bytes(corrupt))
    for path in (truncated, corrupted):
        with pytest.raises(CorpusError) as err:
            list(iter_documents([path]))
        message = str(err.value)
        assert str(path) in message and "corrupt or truncated" in message and "\n" not in message


@pytest.mark.parametrize("data, what", [
    (b"\x89PNG\r\n\x1a\n" + bytes(100), "a PNG image"),
    (b"PK\x03\x04" + bytes(100), "a zip archive"),
    (b"%PDF-1.4\n%binary", "a PDF document"),
    (b"plain words then a NUL \x00 byte", "binary data"),
])
def test_binary_files_are_refused_by_name(data, what, tmp_path):
    path = write(tmp_path / "figure.txt", data)
    with pytest.raises(CorpusError, match=rf"figure\.txt: .*{what}"):
        list(iter_documents([path]))
    inside = write(tmp_path / "packed.txt.gz", gzip.compress(data))  # binary inside a compressed file too
    with pytest.raises(CorpusError, match=rf"packed\.txt\.gz: .*{what}.*gzip"):
        read_text(inside)


def test_latin1_fallback_is_reported_with_the_count(tmp_path, caplog):
    text = "Caf\u00e9 cr\u00e8me, d\u00e9j\u00e0 vu. Still UTF-8: \u00fcber.\n"
    # the first line's accents are Latin-1 bytes (4 of them); the second line is valid UTF-8
    data = "Caf\u00e9 cr\u00e8me, d\u00e9j\u00e0 vu.".encode("latin-1") + " Still UTF-8: \u00fcber.\n".encode()
    path = write(tmp_path / "mixed.txt.xz", lzma.compress(data))
    report = ReadReport()
    with caplog.at_level(logging.WARNING, logger="bert_exp.data"):
        lines = list(iter_lines(path, "latin-1", report))
    assert lines == [text.rstrip("\n")]  # only the invalid bytes took the fallback
    assert report.fallback_decoded == {str(path): 4} and report.formats == {str(path): "xz"}
    warning = [r for r in caplog.records if r.name == "bert_exp.data" and r.levelno == logging.WARNING]
    assert len(warning) == 1 and str(path) in warning[0].getMessage() and " 4 invalid bytes" in warning[0].getMessage()
    with pytest.raises(CorpusError, match=r"mixed\.txt\.xz: not valid UTF-8 at byte 3 "):
        read_text(path, encoding_fallback=None)


def test_directory_expansion_skips_manifest_and_readme(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    for name in ("a.txt.xz", "b.txt.xz"):
        write(folder / name, lzma.compress(b"Some text. More text.\n"))
    for name in ("MANIFEST.jsonl", "meta.json", "README", "README.md", "SHA256SUMS"):
        write(folder / name, b'{"file": "a.txt.xz"}\n')
    assert [p.name for p in expand_inputs(str(folder))] == ["a.txt.xz", "b.txt.xz"]
    (folder / "a.txt.xz").unlink()
    (folder / "b.txt.xz").unlink()
    with pytest.raises(CorpusError, match="holds no corpus files .*skipped as not corpus text"):
        expand_inputs(str(folder))


def _tiny_tokenizer():
    words = ["the", "a", "review", "of", "film", "book", "long", "line", "without", "any", "stop", "here", "and", "then", "more", "words", "it", "is", "good", "bad"]
    return tokenizer_from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *words])


def test_giant_unpunctuated_line_warns_and_is_counted(tmp_path, caplog):
    normal = "".join(f"The review {i} is good. It is a good film. The book is bad.\n\n" for i in range(40))
    giant = " ".join(["a long line without any stop here and then more words"] * 2000)  # 22,000 words
    ok = write(tmp_path / "ok.txt.gz", gzip.compress(normal.encode()))
    bad = write(tmp_path / "bad.txt.xz", lzma.compress((normal + giant + "\n").encode()))
    settings = InstanceSettings(max_seq_length=64, doc_boundary="blank_line", val_fraction=0.1)
    tokenizer = _tiny_tokenizer()
    with caplog.at_level(logging.WARNING, logger="bert_exp.data"):
        meta = prepare(Location(str(tmp_path / "prepared")), [ok, bad], tokenizer.to_str(), tokenizer.get_vocab_size(),
                       settings, PrepareSettings(), {})
    report = meta["report"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(bad) in w and "longer than an instance" in w and "22000" in w for w in warnings), warnings
    assert not any(str(ok) in w for w in warnings)
    # the giant sentence keeps at most one instance's worth (61 tokens); the normal documents lose little
    assert 22_000 - 61 <= report["tokens_dropped"] < 22_000 + 0.1 * (report["tokens"] - 22_000)
    assert report["long_sentences"] == 1 and list(report["truncated_files"]) == [str(bad)]
    assert report["truncated_files"][str(bad)]["longest_sentence"] == 22_000
    assert report["formats"] == {"gzip": 1, "xz": 1} and report["documents"] == 81
    assert report["tokens_per_second"] > 0
    on_disk = json.loads((tmp_path / "prepared" / "meta.json").read_text())
    assert on_disk["report"] == json.loads(json.dumps(report))  # JSON as it is


def test_datamodule_report_and_cache_key_of_compressed_inputs(tmp_path, caplog):
    reviews = "".join(f"Review {i} says the film is good. It is not bad.\n\n" for i in range(60))
    data = "".join(f"Review {i} says the film is good. It is not bad.\n\n" for i in range(60, 70)).encode()
    data += b"Caf\xe9 review. The end.\n"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write(corpus / "part0.txt.xz", lzma.compress(reviews.encode()))
    write(corpus / "part1.txt.gz", gzip.compress(data))
    write(corpus / "MANIFEST.jsonl", b'{"file": "part0.txt.xz"}\n')
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(vocab_list(_tiny_tokenizer()) + ["review", "says", "not", "end", "caf"]))

    def module(**kwargs):
        return PretrainingDataModule(files=[str(corpus)], tokenizer=TokenizerSpec(vocab_file=str(vocab)),
                                     cache_dir=str(tmp_path / "cache"),
                                     instances=InstanceSettings(doc_boundary="blank_line"), **kwargs)

    dm = module()
    assert [p.name for p in dm.files] == ["part0.txt.xz", "part1.txt.gz"]
    assert dm.data_report is None
    dm.prepare_data()
    report = dm.data_report
    assert report["files"] == 2 and report["documents"] == 71 and report["formats"] == {"xz": 1, "gzip": 1}
    assert report["fallback_decoded"] == {str(corpus / "part1.txt.gz"): 1}
    assert report["tokens"] > 0 and report["tokens_dropped"] >= 0 and json.dumps(report)
    first = dm.prepared_location.url
    assert module().prepared_location.url == first
    write(corpus / "part1.txt.gz", gzip.compress(data + b"One more review.\n"))
    assert module().prepared_location.url != first  # the compressed file's content is part of the key


def test_vocabulary_trainer_reads_compressed_files(tmp_path, monkeypatch):
    """The trainer is fed the same decoded text from a .xz file as from the plain file, and gives the same
    vocabulary, token for token and id for id."""
    words = [a + b for a in "bcdfghkl" for b in "aeiou"]  # two-letter words: no sub-word is ambiguous
    text = "\n\n".join(" ".join(words[i:] + words[:i]) + "." for i in range(len(words)))
    folder = {"plain": tmp_path / "plain", "xz": tmp_path / "xz"}
    for kind, directory in folder.items():
        directory.mkdir()
        data = text.encode() if kind == "plain" else lzma.compress(text.encode())
        write(directory / ("corpus.txt" if kind == "plain" else "corpus.txt.xz"), data)
    fed, vocabularies = {}, {}
    for kind, directory in folder.items():
        captured = []

        def capture(texts, *args, captured=captured, **kwargs):
            texts = list(texts())  # a function that gives the text again: it is read twice
            captured.extend(texts)
            return train_wordpiece(texts, *args, **kwargs)

        monkeypatch.setattr(pretraining_module, "train_wordpiece", capture)
        dm = PretrainingDataModule(files=[str(directory)], tokenizer=TokenizerSpec(vocab_size=500, min_frequency=1),
                                   cache_dir=str(tmp_path / f"cache-{kind}"))
        fed[kind] = captured
        vocabularies[kind] = vocab_list(dm.load_tokenizer())
    assert fed["xz"] == fed["plain"] and len(fed["xz"]) == 1 and "ba" in fed["xz"][0]
    assert vocabularies["xz"] == vocabularies["plain"] and set(words) <= set(vocabularies["xz"])


def test_first_reviews_of_the_shared_imdb_corpus(data_dir):
    path = data_dir / "corpus" / "imdb" / "part00.txt.xz"
    assert detect_format(path) == "xz"
    documents = iter_documents([path], doc_boundary="blank_line")
    first = [next(documents) for _ in range(3)]
    documents.close()
    assert first[0][0].startswith("Lina McLaidlaw is a bright, solitary young women")
    assert all(len(review) >= 2 for review in first)  # sentences
    assert not any("<br" in s for review in first for s in review)


@pytest.mark.parametrize("name, folders, boundaries", [
    ("imdb", ["imdb"], {"blank_line"}),
    ("books", ["gutenberg"], {"file"}),
    ("books_imdb", ["gutenberg", "imdb"], {"file", "blank_line"}),
    ("wikipedia", ["wikipedia"], {"blank_line"}),
    ("bert_mix", ["gutenberg", "wikipedia"], {"file", "blank_line"}),
])
def test_presets_compose_and_name_existing_files(name, folders, boundaries, data_dir, tmp_path):
    from hydra.utils import instantiate

    from bert_exp.runner.validation import validate_config

    cfg = compose_config(["+experiment=pretrain_tiny", f"data={name}"], run_dir=tmp_path)
    validate_config(cfg)
    assert cfg.data.instances.max_seq_length == 64 and cfg.data.tokenizer.vocab_size == 2048  # the rest is corpus.yaml's
    dm = instantiate(cfg.data)
    files = dm.files
    assert {p.parent.name for p in files} == set(folders) and all(p.is_file() for p in files)
    assert all(p.name.endswith(".txt.xz") for p in files)  # MANIFEST.jsonl is not read
    assert len([p for p in files if p.parent.name == "imdb"]) == (20 if "imdb" in folders else 0)
    own = dm.settings.file_boundaries or {}
    assert {own.get(str(p), [dm.settings.doc_boundary])[0] for p in files} == boundaries
    assert all(own.get(str(p), [dm.settings.doc_boundary])[0] == "blank_line" for p in files
               if p.parent.name in ("imdb", "wikipedia"))
    assert len([p for p in files if p.parent.name == "wikipedia"]) == (16 if "wikipedia" in folders else 0)


def test_catalog_entries_say_where_the_full_sets_come_from(tmp_path, capsys):
    from bert_exp.data.__main__ import main

    catalog = load_catalog()
    assert "aclImdb_v1.tar.gz" in catalog["imdb"].manual and not catalog["imdb"].downloads
    assert "gutenberg.org" in catalog["books"].manual and not catalog["books"].downloads
    assert "dumps.wikimedia.org" in catalog["wikipedia"].manual and not catalog["wikipedia"].downloads
    assert len(catalog["wikipedia"].files) == 16 and all(len(v) == 64 for v in catalog["wikipedia"].files.values())
    assert len(catalog["imdb"].files) == 20 and all(v for v in catalog["imdb"].files.values())
    assert main(["download", "imdb", "--data-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "imdb: cannot be downloaded by this tool" in err and "ai.stanford.edu/~amaas" in err


import pytest
from helpers import compose_config

from bert_exp.data.corpus.files import CorpusError, expand_inputs
from bert_exp.data.corpus.text import (
    document_sentences, iter_documents, read_text, split_documents, split_sentences,
)


@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith went to Washington. He left.", ["Mr. Smith went to Washington.", "He left."]),
    ('He said "Stop!" Then he ran.', ['He said "Stop!"', "Then he ran."]),
    ("Is it? Yes. No!", ["Is it?", "Yes.", "No!"]),
    ("The U.S. Army is large. J. R. R. Tolkien wrote it.", ["The U.S. Army is large.", "J. R. R. Tolkien wrote it."]),
    ("It cost 5 dollars. 3 people paid, e.g. Anne.", ["It cost 5 dollars.", "3 people paid, e.g. Anne."]),
    ("Wait... What happened?", ["Wait...", "What happened?"]),
    ("A line\nwrapped across\nlines. Next one.", ["A line wrapped across lines.", "Next one."]),
    ("no capital after. so no split", ["no capital after. so no split"]),
    ("(First.) (Second.)", ["(First.)", "(Second.)"]),
    ("", []),
])
def test_sentence_splitter(text, expected):
    assert split_sentences(text) == expected


def test_paragraphs_end_sentences_and_line_mode():
    doc = "First paragraph without a stop\n\nSecond one. Two sentences."
    assert document_sentences(doc) == ["First paragraph without a stop", "Second one.", "Two sentences."]
    assert document_sentences("one. two.\nthree", line_is_sentence=True) == ["one. two.", "three"]


def test_document_boundaries():
    text = "a b.\nc d.\n\ne f.\n\n\n g h."
    assert split_documents(text, "file") == [text]
    assert len(split_documents(text, "blank_line")) == 3
    wiki = " = A = \nx.\n = = sub = = \ny.\n = B = \nz."
    docs = split_documents(wiki, "regex", r"^ = [^=]")
    assert len(docs) == 2 and docs[1].startswith(" = B =")
    with pytest.raises(CorpusError, match="doc_boundary"):
        split_documents(text, "chapter")


def test_encoding_fallback(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("Caf\u00e9 cr\u00e8me.\r\nNext line.".encode("latin-1"))
    text, encoding = read_text(path)
    assert encoding == "latin-1" and text == "Caf\u00e9 cr\u00e8me.\nNext line."
    with pytest.raises(CorpusError, match=r"latin\.txt: not valid UTF-8 at byte 3"):
        read_text(path, encoding_fallback=None)
    utf8 = tmp_path / "utf8.txt"
    utf8.write_text("\ufeffna\u00efve", encoding="utf-8")
    assert read_text(utf8, None) == ("na\u00efve", "utf-8")


def test_shared_latin1_files_are_read(data_dir):
    """The 9 non-UTF-8 files of the shared corpus decode with the fallback and yield sentences."""
    names = ["gutenberg-nltk/shakespeare-caesar.txt", "state_union/1970-Nixon.txt", "inaugural/2005-Bush.txt"]
    files = [data_dir / "corpus" / n for n in names]
    for f in files:
        assert read_text(f)[1] == "latin-1"
    docs = list(iter_documents(files))
    assert len(docs) == 3 and all(len(d) > 50 for d in docs)


def test_expand_inputs(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/a.txt", "d/sub/b.txt", "d/c.md", "e.txt"):
        (tmp_path / name).write_text("x")
    # a directory skips files that are not corpus text (README, *.md, *.json[l], checksums)
    assert [p.name for p in expand_inputs(str(tmp_path / "d"))] == ["a.txt", "b.txt"]
    assert [p.name for p in expand_inputs([str(tmp_path / "d/**/*.txt"), str(tmp_path / "e.txt")])] == ["a.txt", "b.txt", "e.txt"]
    with pytest.raises(CorpusError, match="nothing.txt' does not exist"):
        expand_inputs([str(tmp_path / "nothing.txt")])
    with pytest.raises(CorpusError, match="matches no files"):
        expand_inputs([str(tmp_path / "*.json")])


@pytest.mark.parametrize("name", ["wikitext2", "wikitext103"])
def test_wikitext_configs_split_one_document_per_article(name, data_dir):
    """The configs' heading regex on the WikiText-2 valid split gives its 60 published articles."""
    cfg = compose_config([f"data={name}"])
    assert cfg.data.files[0].endswith(f"corpus/{name.replace('wikitext', 'wikitext-')}-raw/wiki.train.raw")
    text = (data_dir / "corpus/wikitext-2-tokenized/valid.txt").read_text(encoding="utf-8")
    documents = split_documents(text, cfg.data.instances.doc_boundary, cfg.data.instances.document_regex)
    assert len(documents) == 60 and documents[0].strip().startswith("= Homarus gammarus =")

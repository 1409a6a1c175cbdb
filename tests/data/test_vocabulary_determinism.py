"""The same text and settings give the same vocabulary in any process: trained in fresh interpreters with
different hash seeds (``tokenizers`` numbers its "##x" pieces in hash-map order, which changes from
process to process, and breaks ties between merges by those numbers: huggingface/tokenizers issue 1794)."""

import os
import subprocess
import sys

import pytest

from bert_exp.data.corpus.text import iter_text_chunks
from bert_exp.data.tokenizer import SPECIAL_TOKENS, train_wordpiece, vocab_list
from helpers import REPO

TRAIN = """
import sys
from pathlib import Path
from bert_exp.data.corpus.text import iter_text_chunks
from bert_exp.data.tokenizer import save_vocab, train_byte_bpe, train_wordpiece
kind, out, *files = sys.argv[1:]
files = [Path(f) for f in files]
if kind == "wordpiece":
    # a cut alphabet: the text holds more characters than 120, some of them equally rare at the cut
    tokenizer = train_wordpiece(lambda: iter_text_chunks(files), 6000, 2, 120)
else:
    tokenizer = train_byte_bpe(iter_text_chunks(files), 3000, 2)
save_vocab(tokenizer, out)
"""


def corpus_slice(data_dir, tmp_path):
    """About 2.5 MB of text with more characters than the alphabet keeps, many of them equally rare: the
    start of a Wikipedia part (xz) and of a book, and Shakespeare."""
    import lzma

    corpus = data_dir / "corpus"
    with lzma.open(corpus / "wikipedia" / "part00.txt.xz", "rt", encoding="utf-8") as f:
        (tmp_path / "wiki.txt").write_text(f.read(1_500_000), encoding="utf-8")
    book = sorted((corpus / "gutenberg").glob("*.txt.xz"))[0]  # a book (the folder's MANIFEST.jsonl is not one)
    return [tmp_path / "wiki.txt", book, corpus / "tinyshakespeare" / "input.txt"]


def train_in_fresh_process(kind, out, files, hash_seed):
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    result = subprocess.run([sys.executable, "-c", TRAIN, kind, str(out), *map(str, files)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe"])
def test_two_processes_train_the_same_vocabulary(data_dir, tmp_path, kind):
    files = corpus_slice(data_dir, tmp_path)
    first = train_in_fresh_process(kind, tmp_path / "first", files, hash_seed=1)
    second = train_in_fresh_process(kind, tmp_path / "second", files, hash_seed=2)
    names = ["tokenizer.json"] + (["vocab.txt"] if kind == "wordpiece" else [])
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    if kind == "wordpiece":
        tokens = (first / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
        assert len(tokens) == 6000 and tokens[:5] == SPECIAL_TOKENS
        alphabet = [t for t in tokens if len(t) == 1]
        assert len(alphabet) == 120 and alphabet == sorted(alphabet)  # the cut kept 120 characters


def test_the_alphabet_cut_keeps_the_most_frequent_characters_and_the_lower_code_point_on_ties():
    text = ["aaaa bbbb cc dd ee zz"] * 3 + ["y x"]  # c, d, e, z tie at 6; x and y at 1
    tokens = vocab_list(train_wordpiece(text, 100, 1, limit_alphabet=4))
    alphabet = [t for t in tokens[len(SPECIAL_TOKENS):] if len(t) == 1]
    assert alphabet == ["a", "b", "c", "d"]  # a, b the most frequent; then c, d before e, z (code points)
    assert "x" not in tokens and "##z" not in tokens  # a character cut away is gone, its ## piece too


def test_lines_and_documents_train_the_same_vocabulary(data_dir):
    """The vocabulary is trained on the files' lines; documents cut into sentences hold the same words."""
    from bert_exp.data.corpus.text import iter_documents

    files = [data_dir / "corpus" / "inaugural" / name for name in ("1789-Washington.txt", "1861-Lincoln.txt")]
    by_lines = vocab_list(train_wordpiece(lambda: iter_text_chunks(files, chunk_chars=4000), 800))
    by_documents = vocab_list(train_wordpiece([" ".join(d) for d in iter_documents(files)], 800))
    assert by_lines == by_documents

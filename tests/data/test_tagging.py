"""Tagging data: CoNLL and CoNLL-U parsing (malformed lines named by file:line), labels on first
sub-tokens, and windows in which every word is scored exactly once."""

import json
import random

import pytest

from bert_exp.data.loading import DataFileError
from bert_exp.data.tasks.tagging import IGNORE, TaggingDataModule, label_set, read_conll, read_conllu, windows

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "run", "##ning", "in", "paris",
         "new", "york", "."]

CONLL = """-DOCSTART- -X- O O

The\tO
cats\tB-animal
run\tO

New  NNP  B-LOC
York NNP  I-LOC
.    .    O
"""

CONLLU = """# sent_id = 1
# text = The cats don't run.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcats\tcat\tNOUN\tNNS\t_\t4\tnsubj\t_\t_
3-4\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
3\tdo\tdo\tAUX\tVBP\t_\t5\taux\t_\t_
4\tn't\tnot\tPART\tRB\t_\t5\tadvmod\t_\t_
4.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t_\t_
5\trun\trun\tVERB\tVB\t_\t0\troot\t_\t_

# sent_id = 2
1\tParis\tParis\tPROPN\tNNP\t_\t0\troot\t_\t_
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_conll_columns_docstart_and_blank_lines(tmp_path):
    sentences = read_conll(write(tmp_path, "a.conll", CONLL))
    assert [s.words for s in sentences] == [["The", "cats", "run"], ["New", "York", "."]]
    assert [s.labels for s in sentences] == [["O", "B-animal", "O"], ["B-LOC", "I-LOC", "O"]]
    assert sentences[1].lines == [7, 8, 9]
    pos = read_conll(write(tmp_path, "b.conll", CONLL.replace("cats\tB-animal", "cats\tNNS\tB-animal")), label_column=1)
    assert pos[1].labels == ["NNP", "NNP", "."]


def test_conll_malformed_line_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.conll", "The\tO\nlonely\n\n")
    with pytest.raises(DataFileError, match=r"bad\.conll:2: expected at least 2 columns"):
        read_conll(path)


def test_conllu_skips_comments_ranges_and_empty_nodes(tmp_path):
    sentences = read_conllu(write(tmp_path, "a.conllu", CONLLU))
    assert [s.words for s in sentences] == [["The", "cats", "do", "n't", "run"], ["Paris"]]
    assert sentences[0].labels == ["DET", "NOUN", "AUX", "PART", "VERB"]
    assert read_conllu(tmp_path / "a.conllu", label_column=4)[0].labels == ["DT", "NNS", "VBP", "RB", "VB"]


def test_conllu_malformed_line_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.conllu", CONLLU.replace("2\tcats\tcat\tNOUN\tNNS\t_\t4\tnsubj\t_\t_",
                                                        "2\tcats\tcat\tNOUN"))
    with pytest.raises(DataFileError, match=r"bad\.conllu:4: a CoNLL-U line has 10 tab-separated columns, found 4"):
        read_conllu(path)


def datamodule(tmp_path, train_text, val_text=None, fmt="conll", **options):
    train = write(tmp_path, f"train.{fmt}", train_text)
    dev = write(tmp_path, f"dev.{fmt}", val_text or train_text)
    dm = TaggingDataModule(str(train), {"dev": str(dev)}, format=fmt, **options)
    dm.use_vocabulary(VOCAB)
    return dm


def test_labels_on_first_sub_token(tmp_path):
    dm = datamodule(tmp_path, "the O\ncats B-X\nrunning I-X\n")
    dm.setup()
    assert dm.labels == ["O", "B-X", "I-X"]
    (f,) = dm.datasets["dev"].features
    tokens = [VOCAB[i] for i in f["input_ids"]]
    assert tokens == ["[CLS]", "the", "cat", "##s", "run", "##ning", "[SEP]"]
    assert f["labels"] == [IGNORE, 0, 1, IGNORE, 2, IGNORE, IGNORE]
    assert f["word_index"] == [-1, 0, 1, -1, 2, -1, -1]
    dm = datamodule(tmp_path, "the O\ncats B-X\nrunning I-X\n", label_all_subtokens=True)
    dm.setup()
    (f,) = dm.datasets["dev"].features
    assert f["labels"] == [IGNORE, 0, 1, 1, 2, 2, IGNORE]
    assert f["word_index"] == [-1, 0, 1, -1, 2, -1, -1]  # still scored once, on the first sub-token


def test_unknown_label_at_evaluation_names_file_and_line(tmp_path):
    dm = datamodule(tmp_path, "the O\nzzz B-X\n", "the O\nzzz B-Y\n")
    with pytest.raises(DataFileError, match=r"dev\.conll:2: label 'B-Y' is not in the training set's labels"):
        dm.setup()


def test_labels_saved_with_the_vocabulary(tmp_path):
    dm = datamodule(tmp_path, "the O\ncats B-X\n")
    dm.save_vocab(tmp_path)
    assert json.loads((tmp_path / "labels.json").read_text()) == ["O", "B-X"]
    assert dm.module_arguments() == {"labels": ["O", "B-X"]}


@pytest.mark.parametrize("seed", range(20))
def test_windows_score_every_word_once(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 6) for _ in range(rng.randint(1, 80))]
    budget, context = rng.randint(1, 30), rng.randint(0, 8)
    spans = windows(lengths, budget, context)
    scored = [w for first, last, _, _ in spans for w in range(first, last)]
    assert scored == list(range(len(lengths)))
    for first, last, left, right in spans:
        assert left <= first < last <= right
        size = sum(min(n, budget) for n in lengths[left:right])
        assert size <= budget or (last - first == 1 and left == first and right == last)


def test_long_sentence_split_into_windows(tmp_path):
    words = ["the", "cats", "running", "in", "new", "york", "."] * 6
    text = "".join(f"{w} {'B-X' if i % 3 == 0 else 'O'}\n" for i, w in enumerate(words))
    dm = datamodule(tmp_path, text, max_seq_length=10, window_context=2)
    dm.setup()
    features = dm.datasets["dev"].features
    assert len(features) > 1 and all(len(f["input_ids"]) <= 10 for f in features)
    scored = sorted(w for f in features for w in f["word_index"] if w >= 0)
    assert scored == list(range(len(words)))
    batch = dm.collate(features[:3])
    assert batch["labels"].shape == batch["input_ids"].shape == batch["word_index"].shape


def test_real_files_parse_as_documented(data_dir):
    root = data_dir / "tagging"
    wnut = read_conll(root / "wnut17" / "emerging.dev.conll")
    assert (len(wnut), sum(len(s.words) for s in wnut)) == (1009, 15733)
    assert len(label_set(wnut)) == 13
    ewt = read_conllu(root / "ud_english_ewt" / "en_ewt-ud-test.conllu")
    assert (len(ewt), sum(len(s.words) for s in ewt)) == (2077, 25094)
    partut = read_conllu(root / "ud_english_partut" / "en_partut-ud-train.conllu")
    assert (len(partut), sum(len(s.words) for s in partut), len(label_set(partut))) == (1781, 43504, 17)

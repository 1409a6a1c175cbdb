"""python -m bert_exp.tokenize: our WordPiece ids equal BertTokenizerFast's on the same vocabulary (a
hand-built one with bert-base-uncased's ids, and minilm's, which is bert-base-uncased's); pairs show
their segments; SQuAD windows are those training uses."""

import json

import pytest
import transformers

from bert_exp.resources import minilm_dir
from bert_exp.tools.tokenize import main

SENTENCE = "There is my school and I love this place"
BERT_BASE_IDS = [101, 2045, 2003, 2026, 2082, 1998, 1045, 2293, 2023, 2173, 102]


def run(capsys, *args) -> dict:
    assert main([*map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def hand_built_vocab(tmp_path):
    """bert-base-uncased's ids for the sentence's words and the specials, [unused] lines elsewhere."""
    ids = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103, "there": 2045, "is": 2003,
           "my": 2026, "school": 2082, "and": 1998, "i": 1045, "love": 2293, "this": 2023, "place": 2173}
    by_id = {i: t for t, i in ids.items()}
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(by_id.get(i, f"[unused{i}]") for i in range(max(by_id) + 1)) + "\n")
    return path


@pytest.mark.parametrize("vocab", ["hand_built", "minilm"])
def test_ids_equal_bert_tokenizer_fast(capsys, hand_built_vocab, vocab):
    path = hand_built_vocab if vocab == "hand_built" else minilm_dir() / "vocab.txt"
    ours = run(capsys, path, SENTENCE)
    assert ours["ids"] == BERT_BASE_IDS
    theirs = transformers.BertTokenizerFast(vocab=str(path))(SENTENCE)
    assert ours["ids"] == theirs["input_ids"] and ours["token_type_ids"] == theirs["token_type_ids"]
    assert ours["attention_mask"] == theirs["attention_mask"] == [1] * 11
    assert ours["tokens"][1:-1] == SENTENCE.lower().split()


def test_question_and_context_segments_positions_and_windows(capsys):
    question, context = "Who was Jim Henson?", "Jim Henson was a nice puppet"
    ours = run(capsys, minilm_dir(), question, context)
    theirs = transformers.BertTokenizerFast(vocab=str(minilm_dir() / "vocab.txt"))(question, context)
    assert ours["ids"] == theirs["input_ids"] and ours["token_type_ids"] == theirs["token_type_ids"]
    assert ours["tokens"] == ["[CLS]", "who", "was", "jim", "henson", "?", "[SEP]",
                              "jim", "henson", "was", "a", "nice", "puppet", "[SEP]"]
    assert ours["token_type_ids"] == [0] * 7 + [1] * 7
    assert context[slice(*ours["offsets"][8])] == "Henson" and ours["sequence_ids"][8] == 1

    cut = run(capsys, minilm_dir(), question, context, "--max-length", 12, "--pad")
    assert cut["truncated"] == 2 and len(cut["ids"]) == 12
    padded = run(capsys, minilm_dir(), "Who?", "--max-length", 8, "--pad")
    assert padded["attention_mask"] == [1, 1, 1, 1, 0, 0, 0, 0] and padded["ids"][4:] == [0] * 4

    windows = run(capsys, minilm_dir(), question, context, "--max-length", 11, "--doc-stride", 2)
    assert [w["tokens"][7:-1] for w in windows] == [["jim", "henson", "was"], ["was", "a", "nice"],
                                                    ["nice", "puppet"]]
    assert all(w["token_type_ids"] == [0] * 7 + [1] * (len(w["ids"]) - 7) for w in windows)
    # each context token is scored in exactly one window: its max-context one
    scored = [t for w in windows for t, best in zip(w["tokens"], w["max_context"]) if best]
    assert scored == ["jim", "henson", "was", "a", "nice", "puppet"]


def test_table_and_mistakes(capsys, tmp_path):
    assert main([str(minilm_dir() / "vocab.txt"), "Who was Jim Henson?", "Jim Henson was a nice puppet"]) == 0
    out = capsys.readouterr().out
    assert "henson" in out and "27227" in out and "1 B" in out
    assert main([str(tmp_path / "nope.txt"), "hi"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([str(minilm_dir()), "question only", "--doc-stride", "2"]) == 2
    assert "give both texts" in capsys.readouterr().err

import pytest
import torch
import transformers

from bert_exp.data import GlueDataModule, LoaderSettings
from bert_exp.data.tasks.glue import DataFileError, read_tsv
from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.resources import minilm_dir


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, message", [
    ("a\t1\t\tGood one.\nb\t1\tOnly three\n", r"bad.tsv:2: expected 4 tab-separated columns, found 3"),
    ("a\t1\t\tGood one.\nb\t2\t*\tBad label.\n", r"bad.tsv:2: label '2' is not an integer in 0..1"),
    ("a\tyes\t\tBad label.\n", r"bad.tsv:1: label 'yes' is not an integer in 0..1"),
    ("a\t1\t\t \n", r"bad.tsv:1: empty text"),
    ("", r"bad.tsv: no examples"),
])
def test_bad_rows_name_file_and_line(tmp_path, text, message):
    with pytest.raises(DataFileError, match=message):
        read_tsv(write(tmp_path, "bad.tsv", text), [3], 1, 2, num_columns=4)


def test_missing_file(tmp_path):
    with pytest.raises(DataFileError, match="no such file"):
        read_tsv(tmp_path / "nope.tsv", [3], 1, 2)


def test_cola_files_are_read_completely(data_dir):
    raw = data_dir / "cola" / "raw"
    counts = {name: len(read_tsv(raw / f"{name}.tsv", [3], 1, 2, num_columns=4))
              for name in ("in_domain_train", "in_domain_dev", "out_of_domain_dev")}
    assert counts == {"in_domain_train": 8551, "in_domain_dev": 527, "out_of_domain_dev": 516}
    train = read_tsv(raw / "in_domain_train.tsv", [3], 1, 2, num_columns=4)
    assert train[0].texts == ("Our friends won't buy this analysis, let alone the next one we propose.",)
    assert sum(e.label for e in train) == 6023


def test_sst2_with_header(data_dir):
    dev = read_tsv(data_dir / "glue" / "SST-2" / "dev.tsv", [0], 1, 2, num_columns=2, header=True)
    assert len(dev) == 872 and sum(e.label for e in dev) == 444


def test_pairs_and_regression(tmp_path):
    train = write(tmp_path, "train.tsv", "id\ts1\ts2\tscore\n1\tA man walks.\tA person walks.\t4.5\n"
                                         "2\tA dog.\tA cat sat down.\t1.25\n")
    dm = GlueDataModule(str(train), {"dev": str(train)}, text_columns=[1, 2], label_column=3, num_labels=1,
                        header=True, vocab_file=str(minilm_dir() / "vocab.txt"),
                        loader=LoaderSettings(batch_size=2))
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["labels"].dtype == torch.float32 and sorted(batch["labels"].tolist()) == [1.25, 4.5]
    assert (batch["token_type_ids"] == 1).any()


def test_tokenizer_ids_equal_bert_tokenizer_fast_on_all_cola_dev_and_squad_dev(data_dir):
    """Our WordPiece (tokenizers + BERT normaliser) equals BertTokenizerFast on real text."""
    from bert_exp.data.tasks.squad import read_squad
    ours = load_vocab_file(str(minilm_dir() / "vocab.txt"))
    theirs = transformers.BertTokenizerFast.from_pretrained(minilm_dir())
    raw = data_dir / "cola" / "raw"
    texts = [e.texts[0] for name in ("in_domain_dev", "out_of_domain_dev")
             for e in read_tsv(raw / f"{name}.tsv", [3], 1, 2, num_columns=4)]
    squad = read_squad(data_dir / "squad" / "dev-v1.1.json")
    texts += [e.question for e in squad] + list(dict.fromkeys(e.context for e in squad))
    assert len(texts) > 1043 + 10570 + 2000
    expected = theirs(texts, add_special_tokens=True, truncation=False)["input_ids"]
    got = [e.ids for e in ours.encode_batch(texts)]
    mismatches = [t for t, a, b in zip(texts, got, expected) if a != b]
    assert not mismatches, mismatches[:3]


def test_pair_truncation_as_the_original(tmp_path):
    """Budget 9 (12 - [CLS] [SEP] [SEP]) for a pair of 10 and 20 tokens. The original pops from the
    longer, the second on ties: 10/20 -> 10/10 -> then alternately -> 5/4. tokenizers' longest_first
    gives the shorter input half the budget and the odd token to the longer: 4/5."""
    from bert_exp.data.tasks.glue import pop_from_longer

    assert pop_from_longer(10, 20, 9) == (5, 4)
    assert pop_from_longer(20, 3, 9) == (6, 3) and pop_from_longer(3, 4, 9) == (3, 4)
    assert pop_from_longer(7, 7, 9) == (5, 4) and pop_from_longer(8, 2, 9) == (7, 2)
    first = " ".join(["one"] * 10)
    second = " ".join(["two"] * 20)
    train = write(tmp_path, "train.tsv", f"{first}\t{second}\t1\nshort one\tshort two\t0\n")
    lengths = {}
    for mode in ("longest_first", "google"):
        dm = GlueDataModule(str(train), {"dev": str(train)}, text_columns=[0, 1], label_column=2,
                            vocab_file=str(minilm_dir() / "vocab.txt"), max_seq_length=12, pair_truncation=mode)
        dm.setup()
        tok = dm.tokenizer
        one, two = tok.token_to_id("one"), tok.token_to_id("two")
        long_pair, short_pair = dm.datasets["train"][0], dm.datasets["train"][1]
        ids = long_pair["input_ids"]
        assert len(ids) == 12 and ids[0] == tok.token_to_id("[CLS]") and ids[-1] == tok.token_to_id("[SEP]")
        lengths[mode] = (ids.count(one), ids.count(two))
        assert long_pair["token_type_ids"] == [0] * (lengths[mode][0] + 2) + [1] * (lengths[mode][1] + 1)
        assert len(short_pair["input_ids"]) == 7  # an untruncated pair is the same either way
    assert lengths == {"longest_first": (4, 5), "google": (5, 4)}
    with pytest.raises(ValueError, match="data.pair_truncation='tf'"):
        GlueDataModule(str(train), {}, text_columns=[0], label_column=2, pair_truncation="tf")

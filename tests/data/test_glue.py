import pytest
import torch
import transformers

from bert_exp.data import GlueDataModule
from bert_exp.data.glue import DataFileError, read_tsv
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
                        header=True, vocab_file=str(minilm_dir() / "vocab.txt"), batch_size=2)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["labels"].dtype == torch.float32 and sorted(batch["labels"].tolist()) == [1.25, 4.5]
    assert (batch["token_type_ids"] == 1).any()


def test_tokenizer_ids_equal_bert_tokenizer_fast_on_all_cola_dev_and_squad_dev(data_dir):
    """Our WordPiece (tokenizers + BERT normaliser) equals BertTokenizerFast on real text."""
    from bert_exp.data.squad import read_squad
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

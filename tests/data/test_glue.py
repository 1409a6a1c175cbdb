import pytest
import torch
import transformers

from bert_exp.data import GlueDataModule, LoaderSettings
from bert_exp.data.tasks.glue import DataFileError, read_examples
from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.resources import minilm_dir


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, message", [
    ("a\t1\t\tGood one.\nb\t1\tOnly three\n", r"bad.tsv:2: expected 4 tab-separated columns \(data.num_columns\), found 3"),
    ("a\t1\t\tGood one.\nb\t2\t*\tBad label.\n", r"bad.tsv:2: label '2' is not an integer in 0..1"),
    ("a\tyes\t\tBad label.\n", r"bad.tsv:1: label 'yes' is not an integer in 0..1"),
    ("a\t1\t\t \n", r"bad.tsv:1: empty text"),
    ("", r"bad.tsv: no examples"),
])
def test_bad_rows_name_file_and_line(tmp_path, text, message):
    with pytest.raises(DataFileError, match=message):
        read_examples(write(tmp_path, "bad.tsv", text), [3], 1, 2, num_columns=4)


def test_missing_file(tmp_path):
    with pytest.raises(DataFileError, match="no such file"):
        read_examples(tmp_path / "nope.tsv", [3], 1, 2)


def test_cola_files_are_read_completely(data_dir):
    raw = data_dir / "cola" / "raw"
    counts = {name: len(read_examples(raw / f"{name}.tsv", [3], 1, 2, num_columns=4))
              for name in ("in_domain_train", "in_domain_dev", "out_of_domain_dev")}
    assert counts == {"in_domain_train": 8551, "in_domain_dev": 527, "out_of_domain_dev": 516}
    train = read_examples(raw / "in_domain_train.tsv", [3], 1, 2, num_columns=4)
    assert train[0].texts == ("Our friends won't buy this analysis, let alone the next one we propose.",)
    assert sum(e.label for e in train) == 6023


def test_sst2_with_header(data_dir):
    dev = read_examples(data_dir / "glue" / "SST-2" / "dev.tsv", [0], 1, 2, num_columns=2, header=True)
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
             for e in read_examples(raw / f"{name}.tsv", [3], 1, 2, num_columns=4)]
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


# -- every GLUE task: labels as the files spell them, columns by name, dev sets cut from train ------------

GLUE_LOCAL = {  # the rows at hand (see $BERT_EXP_DATA/README): preset -> rows per set
    "glue_rte_minilm_local": {"train": 1244, "dev": 139, "test": 1384},
    "glue_wnli_minilm": {"train": 565, "dev": 70},
    "glue_stsb_minilm_local": {"train": 4249, "dev": 1500},
    "glue_mrpc_minilm_local": {"train": 2168, "dev": 408},
}


@pytest.mark.parametrize("experiment", sorted(GLUE_LOCAL))
def test_each_local_glue_preset_reads_its_rows(data_dir, experiment):
    from helpers import compose_config
    from hydra.utils import instantiate

    cfg = compose_config([f"+experiment={experiment}", f"data.vocab_file={minilm_dir() / 'vocab.txt'}"])
    dm = instantiate(cfg.data)
    dm.setup()
    assert {name: len(rows) for name, rows in dm.datasets.items()} == GLUE_LOCAL[experiment]
    assert list(cfg.task.module.val_sets) == list(dm.val_files)
    labels = [row["label"] for row in dm.datasets["train"]]
    if cfg.data.num_labels == 1:
        assert 0.0 <= min(labels) and max(labels) == 5.0
    else:
        assert set(labels) == {0, 1}


def test_rte_labels_are_mapped_from_their_strings(data_dir):
    rows = read_examples(data_dir / "glue" / "RTE" / "train.tsv", ["sentence1", "sentence2"], "label", 2, 4, True,
                    {"entailment": 0, "not_entailment": 1})
    assert len(rows) == 1244 and sum(1 - e.label for e in rows) == 627  # 627 entailment (the README's count)


def test_mrpc_local_holds_out_its_last_rows(data_dir):
    every = read_examples(data_dir / "glue" / "MRPC" / "train.tsv", [3, 4], 0, 2, 5)
    dm = GlueDataModule(str(data_dir / "glue" / "MRPC" / "train.tsv"), {"dev": str(data_dir / "glue" / "MRPC" / "train.tsv")},
                        [3, 4], 0, num_columns=5, hold_out={"name": "dev", "last_rows": 408})
    train, dev = dm.train_and_held_out()
    assert train == every[:-408] and dev == every[-408:]


MNLI_TRAIN = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
              "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
              "0\t1\t1e\tgov\t(x)\t(y)\t(X)\t(Y)\tThe cat sat.\tA cat sat.\tentailment\tentailment\n"
              "1\t2\t2n\tgov\t(x)\t(y)\t(X)\t(Y)\tThe dog ran.\tA dog ran fast.\tneutral\tneutral\n"
              "2\t3\t3c\tgov\t(x)\t(y)\t(X)\t(Y)\tIt rained.\tIt was dry.\tcontradiction\tcontradiction\n")
MNLI_DEV = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
            "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
            "0\t9\t9n\tfiction\t(x)\t(y)\t(X)\t(Y)\tHe left.\tHe went.\tneutral\tneutral\tentailment\tneutral\t"
            "neutral\tneutral\n")


def test_mnli_reads_the_gold_label_by_name_in_train_and_dev(tmp_path):
    """MNLI's train file has 12 columns and its dev files 16: the label is found by its header name."""
    from helpers import compose_config
    from hydra.utils import instantiate

    glue = tmp_path / "glue" / "MNLI"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_text(MNLI_TRAIN)
    (glue / "dev_matched.tsv").write_text(MNLI_DEV)
    (glue / "dev_mismatched.tsv").write_text(MNLI_DEV.replace("fiction", "letters"))
    cfg = compose_config(["+experiment=glue_mnli_minilm", f"paths.data_dir={tmp_path}",
                          f"data.vocab_file={minilm_dir() / 'vocab.txt'}"])
    dm = instantiate(cfg.data)
    dm.setup()
    assert [row["label"] for row in dm.datasets["train"]] == [0, 1, 2]
    assert [row["label"] for row in dm.datasets["dev_mismatched"]] == [1]
    assert cfg.task.monitor == "val/acc" and list(cfg.task.module.val_sets) == ["dev_matched", "dev_mismatched"]


QQP = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n7\t1\t2\tHow old is he?\tWhat is his age?\t1\n"
QNLI = "index\tquestion\tsentence\tlabel\n0\tWho won?\tThe Broncos won.\tentailment\n"


@pytest.mark.parametrize("experiment, folder, text, label", [
    ("glue_qqp_minilm", "QQP", QQP, 1), ("glue_qnli_minilm", "QNLI", QNLI, 0)])
def test_qqp_and_qnli_read_their_formats(tmp_path, experiment, folder, text, label):
    from helpers import compose_config
    from hydra.utils import instantiate

    (tmp_path / "glue" / folder).mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / "glue" / folder / name).write_text(text)
    cfg = compose_config([f"+experiment={experiment}", f"paths.data_dir={tmp_path}",
                          f"data.vocab_file={minilm_dir() / 'vocab.txt'}"])
    dm = instantiate(cfg.data)
    dm.setup()
    assert [row["label"] for row in dm.datasets["dev"]] == [label]
    assert (torch.tensor(dm.datasets["dev"][0]["token_type_ids"]) == 1).any()  # a pair


def test_mrpc_dev_is_the_pairs_glue_lists(tmp_path):
    """GLUE's MRPC dev set: the training pairs whose two sentence ids dev_ids.tsv lists."""
    train = write(tmp_path, "msr_paraphrase_train.txt",
                  "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t10\t11\tA b.\tA c.\n0\t12\t13\tD e.\tF g.\n"
                  "1\t14\t15\tH i.\tH j.\n")
    ids = write(tmp_path, "dev_ids.tsv", "12\t13\n")
    dm = GlueDataModule(str(train), {"dev": str(train)}, ["#1 String", "#2 String"], "Quality", num_columns=5,
                        header=True, hold_out={"name": "dev", "ids_file": str(ids), "id_columns": ["#1 ID", "#2 ID"]})
    train_rows, dev_rows = dm.train_and_held_out()
    assert [e.texts for e in dev_rows] == [("D e.", "F g.")] and len(train_rows) == 2
    write(tmp_path, "dev_ids.tsv", "12\t13\n99\t98\n")
    with pytest.raises(DataFileError, match=r"dev_ids.tsv: 1 of its 2 id rows are not in the training file "
                                            r"\(\S*dev_ids.tsv:2: '99\\t98'\)"):
        dm.train_and_held_out()
    write(tmp_path, "dev_ids.tsv", "12\t13\n12\t13\n")  # once read as "-1 of its 1 id rows"
    with pytest.raises(DataFileError, match=r"dev_ids.tsv:2: ids '12\\t13' again \(first at \S*dev_ids.tsv:1\)"):
        dm.train_and_held_out()
    write(tmp_path, "msr_paraphrase_train.txt", train.read_text() + "1\t12\t13\tD e.\tF g.\n")
    write(tmp_path, "dev_ids.tsv", "12\t13\n")
    with pytest.raises(DataFileError, match=r"dev_ids.tsv:1: ids '12\\t13' are on 2 rows of the training file"):
        dm.train_and_held_out()


@pytest.mark.parametrize("text, kwargs, message", [
    ("index\ts1\ts2\tlabel\n0\tA.\tB.\tentailment\n1\tC.\tD.\tcontradicts\n",
     {"label_map": {"entailment": 0, "not_entailment": 1}},
     r"bad.tsv:3: label 'contradicts' is not in data.label_map \(entailment, not_entailment\)"),
    ("index\ts1\ts2\tlabel\n0\tA.\tB.\tentailment\n1\tC.\tD.\n", {"label_map": {"entailment": 0}},
     r"bad.tsv:3: 3 tab-separated columns, the header \(line 1\) names 4$"),
    ("index\ts1\ts2\n0\tA.\tB.\n", {"label_map": {"entailment": 0}},
     r"bad.tsv:1: no column 'label' for the label \(the header has 'index', 's1', 's2'\)"),
])
def test_bad_glue_rows_name_file_and_line(tmp_path, text, kwargs, message):
    with pytest.raises(DataFileError, match=message):
        read_examples(write(tmp_path, "bad.tsv", text), ["s1", "s2"], "label", 2, 4, header=True, **kwargs)


@pytest.mark.parametrize("text, message", [  # each was misread or misworded before
    ("\tindex\ts1\ts2\tlabel\n0\tA.\tB.\tentailment\n", r"bad.tsv:1: an empty column name in the header"),
    ("s1\ts2\tlabel\n0\tA person moves.\tB.\tentailment\n",
     r"bad.tsv:2: 4 tab-separated columns, the header \(line 1\) names 3 \(the header lacks a name"),
])
def test_a_header_that_does_not_fit_its_rows_is_named(tmp_path, text, message):
    with pytest.raises(DataFileError, match=message):
        read_examples(write(tmp_path, "bad.tsv", text), ["s1", "s2"], "label", 2, header=True,
                 label_map={"entailment": 0, "not_entailment": 1})


@pytest.mark.parametrize("score, message", [
    ("nan", r"bad.tsv:3: label 'nan' is not a finite number"), ("inf", r"bad.tsv:3: label 'inf' is not a finite"),
    ("-Infinity", r"label '-Infinity' is not a finite number"),
    ("7.5", r"bad.tsv:3: label '7.5' is outside data.label_range \[0, 5\]"), ("-1", r"label '-1' is outside"),
])
def test_stsb_scores_are_finite_and_in_range(tmp_path, score, message):
    path = write(tmp_path, "bad.tsv", f"s1\ts2\tscore\nA.\tB.\t5.000\nC.\tD.\t{score}\n")
    with pytest.raises(DataFileError, match=message):
        read_examples(path, ["s1", "s2"], "score", 1, header=True, label_range=(0.0, 5.0))
    assert read_examples(path, ["s1", "s2"], "score", 1, header=True)[0].label == 5.0 if score in ("7.5", "-1") else True


def test_a_byte_order_mark_is_dropped(tmp_path):
    """SentEval's msr_paraphrase_*.txt begin with a UTF-8 byte-order mark (transformers' glue.py skips it)."""
    path = tmp_path / "msr.txt"
    path.write_bytes(b"\xef\xbb\xbfQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA b.\tA c.\n")
    dm = GlueDataModule(str(path), {"dev": str(path)}, ["#1 String", "#2 String"], "Quality", header=True)
    assert [(e.texts, e.label) for e in dm.read(str(path))] == [(("A b.", "A c."), 1)]


def test_a_column_name_without_a_header_is_refused(tmp_path):
    with pytest.raises(DataFileError, match="is a column name, but the file has no header"):
        read_examples(write(tmp_path, "t.tsv", "0\tA.\n"), ["sentence"], 0, 2)


@pytest.mark.parametrize("kwargs, message", [
    ({"label_map": {"entailment": 0, "neutral": 2}}, r"data.label_map: \{'neutral': 2\} not a class in 0..1"),
    ({"label_map": {"high": 1}, "num_labels": 1}, r"a regression task \(num_labels=1\) reads numbers"),
    ({"hold_out": {"name": "dev"}}, r"data.hold_out: give exactly one of last_rows or ids_file"),
    ({"hold_out": {"name": "dev", "ids_file": "ids.tsv"}}, r"name the training file's id_columns"),
    ({"hold_out": {"name": "heldout", "last_rows": 2}}, r"hold_out.name='heldout': list it in data.val_files"),
])
def test_a_wrong_label_map_or_hold_out_is_one_line_before_reading(kwargs, message):
    with pytest.raises(DataFileError, match=message):
        GlueDataModule("train.tsv", {"dev": "train.tsv"}, ["s1", "s2"], "label", header=True, **kwargs)


def test_cola_monitors_glues_dev_set_in_both_forms(data_dir):
    """GLUE's CoLA validation is 1,043 rows (the release's in-domain 527 and out-of-domain 516 dev rows,
    HuggingFace's glue validation split): the preset's monitored set is those rows from the files, and the
    same split by the same name with data.hub."""
    from helpers import compose_config
    from hydra.utils import instantiate

    cfg = compose_config(["+experiment=cola_minilm", f"data.vocab_file={minilm_dir() / 'vocab.txt'}"])
    assert list(cfg.data.val_files)[0] == "dev" and list(cfg.task.module.val_sets)[0] == "dev"
    dm = instantiate(cfg.data, loader=LoaderSettings())
    dm.setup("validate")
    assert {name: len(rows) for name, rows in dm.datasets.items()} == {"dev": 1043}
    assert cfg.data.hub_config.splits.dev == "validation"


def test_stsb_presets_refuse_scores_outside_zero_to_five(tmp_path):
    from helpers import compose_config
    from hydra.utils import instantiate

    folder = tmp_path / "glue" / "STS-B"
    folder.mkdir(parents=True)
    good = "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"
    (folder / "train.tsv").write_text(good + good.replace("5.000", "7.5"))
    (folder / "dev.tsv").write_text(good.replace("5.000", "nan"))
    cfg = compose_config(["+experiment=glue_stsb_minilm_local", f"paths.data_dir={tmp_path}",
                          f"data.vocab_file={minilm_dir() / 'vocab.txt'}"])
    dm = instantiate(cfg.data, loader=LoaderSettings())
    with pytest.raises(DataFileError, match=r"STS-B/dev.tsv:1: label 'nan' is not a finite number"):
        dm.setup("validate")
    with pytest.raises(DataFileError, match=r"STS-B/train.tsv:2: label '7.5' is outside data.label_range \[0, 5\]"):
        dm.setup("fit")


def test_labels_spelt_true_and_false_map_from_an_overrides_booleans(tmp_path):
    """``+data.label_map={False:0,True:1}`` reaches the module with boolean keys (Hydra's grammar reads
    them so); the file's labels are the words, which the map's keys are compared as."""
    from helpers import compose_config

    cfg = compose_config(["+experiment=cola_minilm", "+data.label_map={False:0,True:1}"])
    assert list(cfg.data.label_map) == [False, True]
    path = write(tmp_path, "t.tsv", "sentence\tlabel\nA fine one.\tTrue\nOne a fine.\tFalse\n")
    dm = GlueDataModule(str(path), {"dev": str(path)}, ["sentence"], "label", header=True, label_map=cfg.data.label_map)
    assert [(e.texts, e.label) for e in dm.read(str(path))] == [(("A fine one.",), 1), (("One a fine.",), 0)]

"""GLUE's test sets: read by header names with their ids, never labelled, never mistaken for dev sets; the
test predictions written in GLUE's submission form."""

import zipfile

import pytest
import torch

from bert_exp.data import GlueDataModule
from bert_exp.data.tasks.glue import DataFileError
from bert_exp.errors import UserError
from bert_exp.resources import minilm_dir
from bert_exp.tasks.submission import (GLUE_TEST_SETS, Destination, constant_file, prediction_text,
                                       write_submission, zip_submissions)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def sst2(data_dir, **options):
    glue = data_dir / "glue" / "SST-2"
    settings = dict(train_file=str(glue / "train.tsv"), val_files={"dev": str(glue / "dev.tsv")}, num_columns=2,
                    text_columns=[0], label_column=1, header=True, vocab_file=str(minilm_dir() / "vocab.txt"),
                    test_files={"SST-2": str(glue / "test.tsv")}, test_text_columns=["sentence"])
    return GlueDataModule(**{**settings, **options})


def rte(data_dir, **options):
    glue = data_dir / "glue" / "RTE"
    return GlueDataModule(train_file=str(glue / "train.tsv"), val_files={"dev": str(glue / "dev.tsv")},
                          text_columns=["sentence1", "sentence2"], label_column="label", header=True,
                          label_map={"entailment": 0, "not_entailment": 1}, vocab_file=str(minilm_dir() / "vocab.txt"),
                          **options)


def test_sst2_test_set_read_with_its_ids(data_dir):
    """GLUE's real SST-2 test file (unlabelled, header index/sentence): every row, ids from its index column."""
    rows = sst2(data_dir).read_test("SST-2")
    assert len(rows) == 1821 and [r.index for r in rows[:3]] == ["0", "1", "2"] and rows[-1].index == "1820"
    assert rows[0].texts == ("uneasy mishmash of styles and genres .",)


def test_labelled_file_refused_as_test_set(data_dir):
    """RTE's test.tsv at hand carries labels: as a test file it is one line naming the file and column."""
    module = rte(data_dir, test_files={"RTE": str(data_dir / "glue" / "RTE" / "test.tsv")})
    with pytest.raises(DataFileError, match=r"RTE/test.tsv:1: a 'label' column in a test file"):
        module.read_test("RTE")


def test_positional_label_column_known_by_the_training_header(data_dir, tmp_path):
    """SST-2 names its label by position; the training file's header names it, so a labelled test file is
    still caught, and the unlabelled test file given as a dev set is refused (not read as text '0')."""
    labelled = write(tmp_path, "test.tsv", "index\tsentence\tlabel\n0\tgood .\t1\n")
    with pytest.raises(DataFileError, match="a 'label' column in a test file"):
        sst2(data_dir, test_files={"SST-2": str(labelled)}).read_test("SST-2")
    as_dev = sst2(data_dir, val_files={"dev": str(data_dir / "glue" / "SST-2" / "test.tsv")})
    with pytest.raises(DataFileError, match=r"SST-2/test.tsv:1: no 'label' column: an unlabelled file"):
        as_dev.read(as_dev.val_files["dev"])


def test_mrpc_test_rows_by_position_labels_dropped(tmp_path):
    """GLUE's MRPC test set is the MSRP test file: ids are row positions, its public labels are not read."""
    train = write(tmp_path, "train.txt", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA b.\tA c.\n")
    test = write(tmp_path, "test.txt", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t5\t6\tX.\tY.\n0\t7\t8\tZ.\tW.\n")
    settings = dict(train_file=str(train), val_files={}, text_columns=["#1 String", "#2 String"],
                    label_column="Quality", header=True, test_files={"MRPC": str(test)})
    with pytest.raises(DataFileError, match="a 'Quality' column in a test file"):
        GlueDataModule(**settings).read_test("MRPC")
    rows = GlueDataModule(**settings, test_index_column=None, test_labels="drop").read_test("MRPC")
    assert [(r.index, r.texts, r.label) for r in rows] == [("0", ("X.", "Y."), -1), ("1", ("Z.", "W."), -1)]


def test_qqp_ids_from_its_id_column(tmp_path):
    train = write(tmp_path, "train.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tA?\tB?\t1\n")
    test = write(tmp_path, "test.tsv", "id\tquestion1\tquestion2\n17\tC?\tD?\n3\tE?\tF?\n")
    module = GlueDataModule(train_file=str(train), val_files={}, text_columns=["question1", "question2"],
                            label_column="is_duplicate", header=True, test_files={"QQP": str(test)},
                            test_index_column="id")
    assert [r.index for r in module.read_test("QQP")] == ["17", "3"]
    module.test_index_column = "index"
    with pytest.raises(DataFileError, match=r"test.tsv:1: no column 'index' for the index"):
        module.read_test("QQP")


def test_prediction_text_as_glue_spells_labels():
    names = {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert prediction_text(2, names, regression=False) == "contradiction"
    assert prediction_text(1, {}, regression=False) == "1"
    assert prediction_text(3.14159, {}, regression=True) == "3.142"


class FixedPredictions:
    """A Trainer stand-in: predict() returns the given batches per loader (what write_submission reads)."""

    def __init__(self, outputs):
        self.outputs = outputs

    def predict(self, module, dataloaders, ckpt_path=None):
        assert len(dataloaders) == len(self.outputs)
        return self.outputs if len(self.outputs) > 1 else self.outputs[0]


def mnli_like(tmp_path, names=("nli-m", "nli-ax")):
    """Test files in MNLI's form under names of one's own (GLUE's names hold GLUE's row counts)."""
    train = write(tmp_path, "train.tsv", "sentence1\tsentence2\tgold_label\nA.\tB.\tneutral\n")
    m = write(tmp_path, "m.tsv", "index\tsentence1\tsentence2\n0\tA.\tB.\n1\tC.\tD.\n")
    ax = write(tmp_path, "ax.tsv", "index\tsentence1\tsentence2\n0\tE.\tF.\n")
    module = GlueDataModule(train_file=str(train), val_files={}, text_columns=["sentence1", "sentence2"],
                            label_column="gold_label", header=True, num_labels=3,
                            label_map={"entailment": 0, "neutral": 1, "contradiction": 2},
                            vocab_file=str(minilm_dir() / "vocab.txt"), test_files={names[0]: str(m), names[1]: str(ax)})
    return module


def test_submission_files_and_zip(tmp_path):
    module = mnli_like(tmp_path)
    trainer = FixedPredictions([[torch.tensor([2, 0])], [torch.tensor([1])]])
    files = write_submission(trainer, None, module, tmp_path / "out")
    assert [f.name for f in files] == ["nli-m.tsv", "nli-ax.tsv"]
    assert files[0].read_text() == "index\tprediction\n0\tcontradiction\n1\tentailment\n"
    assert files[1].read_text() == "index\tprediction\n0\tneutral\n"
    with zipfile.ZipFile(tmp_path / "out" / "submission.zip") as archive:
        assert sorted(archive.namelist()) == ["nli-ax.tsv", "nli-m.tsv"]
        assert archive.read("nli-ax.tsv").decode() == files[1].read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ax.tsv", "m.tsv", "out", "train.tsv"]  # no partial left


def test_submission_refuses_a_used_directory_and_leaves_nothing_on_failure(tmp_path):
    module = mnli_like(tmp_path)
    used = tmp_path / "used"
    used.mkdir()
    (used / "RTE.tsv").write_text("x")
    with pytest.raises(UserError, match="used: exists and is not an empty directory"):
        write_submission(FixedPredictions([[torch.tensor([0, 0])], [torch.tensor([0])]]), None, module, used)
    with pytest.raises(RuntimeError, match="nli-m: 1 predictions for 2 rows"):
        write_submission(FixedPredictions([[torch.tensor([0])], [torch.tensor([0])]]), None, module, tmp_path / "new")
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new.partial-*"))


def test_one_zip_of_every_task_refuses_a_name_twice(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for folder in (a, b):
        (folder / "RTE.tsv").write_text("index\tprediction\n")
    (a / "CoLA.tsv").write_text("index\tprediction\n0\t1\n")
    target = zip_submissions([a / "CoLA.tsv", a / "RTE.tsv"], tmp_path / "glue.zip")
    with zipfile.ZipFile(target) as archive:
        assert sorted(archive.namelist()) == ["CoLA.tsv", "RTE.tsv"]
    with pytest.raises(UserError, match="RTE.tsv: predicted by two runs"):
        zip_submissions([a / "RTE.tsv", b / "RTE.tsv"], tmp_path / "twice.zip")
    assert not (tmp_path / "twice.zip").exists()
    import subprocess

    child = subprocess.Popen(["true"])  # what a zip writer killed by SIGKILL left: its partial zip
    child.wait()
    (tmp_path / f".glue.zip.partial-{child.pid}-zip").write_bytes(b"PK")
    zip_submissions([a / "CoLA.tsv"], tmp_path / "glue.zip")
    assert not list(tmp_path.glob(".glue.zip.partial-*"))


def test_scoring_encodes_the_dev_sets_only(data_dir):
    """setup("validate") (python -m bert_exp.score) does not tokenize the training set; fitting does."""
    module = sst2(data_dir)
    module.setup("validate")
    assert list(module.datasets) == ["dev"] and len(module.datasets["dev"]) == 872
    module.setup("fit")
    assert list(module.datasets) == ["train", "dev"] and len(module.datasets["train"]) == 67349


def test_glue_names_hold_glues_row_counts(tmp_path):
    """A file under one of GLUE's names with another row count is refused before predicting (the server
    needs every row): MNLI-m's 9,796."""
    module = mnli_like(tmp_path, names=("MNLI-m", "AX"))
    with pytest.raises(UserError, match=r"m.tsv: 2 rows, GLUE's MNLI-m test set has 9,796"):
        write_submission(FixedPredictions([]), None, module, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("text, message", [
    ("index\tsentence\n0\tA.\n0\tB.\n", r"test.tsv: id '0' on rows 1 and 2"),
    ("index\tsentence\n0\tA.\n\tB.\n", r"test.tsv: row 2 has an empty 'index'"),
])
def test_test_ids_are_present_and_unique(data_dir, tmp_path, text, message):
    module = sst2(data_dir, test_files={"SST-2": str(write(tmp_path, "test.tsv", text))})
    with pytest.raises(DataFileError, match=message):
        module.read_test("SST-2")


def test_placeholders_are_glues_files_in_glues_spelling():
    for name, test_set in GLUE_TEST_SETS.items():
        lines = constant_file(name).splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == test_set.rows + 1
        assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(test_set.rows)]
        value = lines[1].split("\t")[1]
        assert value in test_set.labels if test_set.labels else 0 <= float(value) <= 5
    assert constant_file("WNLI", "0").splitlines()[1:3] == ["0\t0", "1\t0"]


def test_a_destination_is_claimed_before_the_work(tmp_path, monkeypatch):
    """Each is one line before any prediction, and leaves nothing: a second writer while the first lives, a
    directory inside a file, a full disk; a link to an empty directory writes there; a killed writer's lock
    and staging directory are removed by the next."""
    import json
    import shutil
    import socket
    import subprocess

    first = Destination(tmp_path / "sub")
    with pytest.raises(UserError, match=r"sub: another process \(pid \d+ on .*\) is writing test predictions"):
        Destination(tmp_path / "sub")
    first.abandon()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"file/sub: cannot create its directory"):
        Destination(tmp_path / "file" / "sub")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1000))
    with pytest.raises(UserError, match=r"sub: the disk is full \(1,000 bytes free\)"):
        Destination(tmp_path / "sub")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert Destination(tmp_path / "link").write({"SST-2": "index\tprediction\n"})[0] == tmp_path / "link" / "SST-2.tsv"
    assert (tmp_path / "empty" / "SST-2.tsv").is_file() and (tmp_path / "link").is_symlink()
    child = subprocess.Popen(["true"])  # a pid that has exited: a killed writer's
    child.wait()
    (tmp_path / ".again.lock").write_text(json.dumps({"pid": child.pid, "host": socket.gethostname()}))
    (tmp_path / f".again.partial-{child.pid}-abc").mkdir()
    Destination(tmp_path / "again").write({"RTE": "index\tprediction\n"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "empty", "file", "link"]

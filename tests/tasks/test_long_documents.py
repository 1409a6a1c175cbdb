"""Long-document windows (data.windows): a text longer than max_seq_length is read in overlapping windows,
every window trains with its document's label, and a document is scored once, from its windows' logits."""

from functools import partial

import lightning as L
import pytest
import torch

from bert_exp.data.loading import DataFileError, LoaderSettings
from bert_exp.data.tasks.glue import GlueDataModule
from bert_exp.model import BertConfig
from bert_exp.resources import minilm_dir
from bert_exp.tasks import ClassificationModule
from bert_exp.tasks.classification import aggregate_windows, row_predictions
from bert_exp.tasks.optim import OptimSettings

WORDS = "the cat sat on the mat while a dog ran past the old red barn and into the field".split()


def documents(tmp_path, count=6):
    """Documents of 20 to 70 words (longer than the 24-token window), labelled by their parity."""
    rows = ["sentence\tlabel"] + [f"{' '.join(WORDS[(i + k) % len(WORDS)] for k in range(20 + 10 * i))}\t{i % 2}"
                                  for i in range(count)]
    path = tmp_path / "docs.tsv"
    path.write_text("\n".join(rows) + "\n")
    return path


def datamodule(path, **windows):
    dm = GlueDataModule(str(path), {"dev": str(path)}, ["sentence"], "label", header=True, max_seq_length=24,
                        vocab_file=str(minilm_dir() / "vocab.txt"), loader=LoaderSettings(batch_size=4, eval_batch_size=3),
                        windows={"overlap": 8, **windows})
    dm.setup("fit")
    return dm


def test_every_window_fits_overlaps_the_last_and_keeps_its_documents_label(tmp_path):
    dm = datamodule(documents(tmp_path))
    features = list(dm.datasets["train"])
    assert {f["doc"] for f in features} == set(range(6)) and len(features) > 6
    for doc in range(6):
        mine = [f for f in features if f["doc"] == doc]
        assert [f["window"] for f in mine] == list(range(len(mine)))
        assert all(len(f["input_ids"]) <= 24 and f["label"] == doc % 2 for f in mine)
        for before, after in zip(mine, mine[1:]):  # 8 text tokens shared, [CLS] ... [SEP] around each
            assert before["input_ids"][-9:-1] == after["input_ids"][1:9]
    batch = dm.collate(features[:3])
    assert batch["doc"].tolist() == [f["doc"] for f in features[:3]]


def test_aggregates_are_the_mean_max_or_first_window():
    docs, windows = torch.tensor([1, 0, 1, 0, 1]), torch.tensor([0, 0, 1, 1, 2])
    values = torch.tensor([[1.0, 0.0], [2.0, 2.0], [3.0, 6.0], [4.0, 0.0], [5.0, 3.0]])
    torch.testing.assert_close(aggregate_windows(docs, windows, values, "mean"), torch.tensor([[3.0, 1.0], [3.0, 3.0]]))
    torch.testing.assert_close(aggregate_windows(docs, windows, values, "max"), torch.tensor([[4.0, 2.0], [5.0, 6.0]]))
    torch.testing.assert_close(aggregate_windows(docs, windows, values, "first"), torch.tensor([[2.0, 2.0], [1.0, 0.0]]))


@pytest.mark.parametrize("aggregate", ["mean", "max", "first"])
def test_validation_scores_each_document_once_from_its_windows(tmp_path, aggregate):
    torch.manual_seed(0)
    dm = datamodule(documents(tmp_path), aggregate=aggregate)
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    module = ClassificationModule(config, OptimSettings(partial(torch.optim.AdamW)), metrics=["acc"]).eval()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                        enable_model_summary=False)
    logged = trainer.validate(module, datamodule=dm, verbose=False)[0]
    features = list(dm.datasets["dev"])
    with torch.no_grad():
        logits = torch.cat([module(dm.collate([f])) for f in features])
    per_doc = aggregate_windows(torch.tensor([f["doc"] for f in features]), torch.tensor([f["window"] for f in features]),
                                logits, aggregate)
    expected = (per_doc.argmax(-1) == torch.tensor([d % 2 for d in range(6)])).float().mean().item()
    assert logged["val/acc"] == pytest.approx(expected)  # over the 6 documents, not the windows
    assert row_predictions(trainer.predict(module, dm.val_dataloader()[0]), False, aggregate) == \
        per_doc.argmax(-1).float().tolist()


def test_windows_refuse_pairs_and_bad_settings(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\tlabel\nA.\tB.\t1\n")
    dm = GlueDataModule(str(path), {"dev": str(path)}, ["a", "b"], "label", header=True,
                        vocab_file=str(minilm_dir() / "vocab.txt"), windows={"overlap": 8})
    with pytest.raises(DataFileError, match=r"data.windows: long-document windows read one text a row"):
        dm.setup("fit")
    with pytest.raises(DataFileError, match=r"data.windows.aggregate='vote': expected mean, max, first"):
        GlueDataModule(str(path), {"dev": str(path)}, ["a"], "label", windows={"aggregate": "vote"})
    with pytest.raises(DataFileError, match=r"data.windows.overlap=126: at least 0 and less than a window's 126"):
        GlueDataModule(str(path), {"dev": str(path)}, ["a"], "label", windows={"overlap": 126})
    with pytest.raises(DataFileError, match=r"data.windows=\{'stride': 8\}: its keys are overlap and aggregate"):
        GlueDataModule(str(path), {"dev": str(path)}, ["a"], "label", windows={"stride": 8})

"""task.module.class_weights: one weight per class in the training loss, or balanced (scikit-learn's
formula, computed from the training rows); the validation metrics and the checkpoint's weights unchanged."""

from functools import partial
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from bert_exp.model import BertConfig
from bert_exp.tasks import ClassificationModule
from bert_exp.tasks.classification import balanced_weights
from bert_exp.tasks.optim import OptimSettings

TINY = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32)


def module(**kwargs):
    return ClassificationModule(BertConfig(**TINY), OptimSettings(partial(torch.optim.AdamW)), **kwargs)


def test_balanced_is_scikit_learns_formula():
    # 6 rows: 4 of class 0, 2 of class 1, 0 of class 2 -> n / (k * count)
    assert balanced_weights([0, 0, 0, 0, 1, 1], 2) == pytest.approx([6 / (2 * 4), 6 / (2 * 2)])
    with pytest.raises(ValueError, match="class_weights=balanced: class 2 has no training rows"):
        balanced_weights([0, 0, 1], 3)


def test_the_weighted_loss_is_torchs_weighted_cross_entropy():
    logits, labels = torch.randn(5, 2), torch.tensor([0, 1, 1, 0, 1])
    weighted = module(class_weights=[1.0, 3.0])
    expected = (F.cross_entropy(logits, labels, reduction="none") * torch.tensor([1.0, 3.0])[labels]).sum() \
        / torch.tensor([1.0, 3.0])[labels].sum()
    torch.testing.assert_close(weighted.loss(logits, labels), expected)
    torch.testing.assert_close(module().loss(logits, labels), F.cross_entropy(logits, labels))
    assert "loss_weight" not in weighted.state_dict()  # the checkpoint holds the model's weights alone


def test_balanced_weights_are_read_from_the_training_rows_at_setup():
    balanced = module(class_weights="balanced")
    rows = [{"label": label} for label in (0, 0, 0, 1)]
    balanced.trainer = SimpleNamespace(datamodule=SimpleNamespace(datasets={"train": rows}))
    balanced.setup("fit")
    torch.testing.assert_close(balanced.loss_weight, torch.tensor([4 / 6, 4 / 2]))


@pytest.mark.parametrize("kwargs, message", [
    ({"class_weights": [1.0]}, r"class_weights=\[1.0\]: 2 positive weights, one per class"),
    ({"class_weights": [1.0, 0.0]}, r"2 positive weights"),
    ({"class_weights": "inverse"}, r"class_weights='inverse': a list of 2 weights, or balanced"),
    ({"class_weights": "balanced", "num_labels": 1}, r"a regression task \(num_labels=1\) has no classes"),
])
def test_bad_class_weights_are_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        module(**kwargs)

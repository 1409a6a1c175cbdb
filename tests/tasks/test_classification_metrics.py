"""The GLUE metrics the classification module logs, against hand-counted values."""

import pytest
import torch

from bert_exp.tasks.classification import build_metrics


def test_f1_is_the_positive_class_f1_as_glue_scores_mrpc_and_qqp():
    # predictions (argmax of the logits) 1 1 1 0 0 0 against labels 1 0 1 1 0 0:
    # TP 2, FP 1, FN 1 -> precision 2/3, recall 2/3, F1 2/3; accuracy 4/6
    logits = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    labels = torch.tensor([1, 0, 1, 1, 0, 0])
    metrics = build_metrics(["f1", "acc"], 2)
    metrics.update(logits, labels)
    values = metrics.compute()
    assert values["f1"].item() == pytest.approx(2 / 3) and values["acc"].item() == pytest.approx(4 / 6)


def test_f1_of_a_model_that_never_predicts_the_positive_class_is_zero():
    metrics = build_metrics(["f1"], 2)
    metrics.update(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([1, 0]))
    assert metrics.compute()["f1"].item() == 0.0


def test_f1_needs_a_binary_task():
    with pytest.raises(ValueError, match="f1 is the positive class's F1 of a binary task, not of 3 labels"):
        build_metrics(["f1", "acc"], 3)

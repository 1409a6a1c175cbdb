"""Sequence classification (and regression, with one label) on the pooled [CLS]."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassMatthewsCorrCoef
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from ..errors import ConfigError
from ..model import BertConfig, BertForSequenceClassification
from .base import BertTask, Vocabulary
from .optim import OptimSettings
from .base import gather_objects

log = logging.getLogger(__name__)


class PositiveClassF1(MulticlassF1Score):
    """F1 of the positive class (label 1), as GLUE scores MRPC and QQP (scikit-learn's ``f1_score``)."""

    def __init__(self, **kwargs):
        super().__init__(num_classes=2, average=None, **kwargs)

    def compute(self):
        return super().compute()[1]


def build_metrics(names: list[str], num_labels: int) -> MetricCollection:
    if "f1" in names and num_labels != 2:
        raise ValueError(f"task.module.metrics: f1 is the positive class's F1 of a binary task, not of {num_labels} labels")
    factories = {
        "acc": lambda: MulticlassAccuracy(num_classes=num_labels, average="micro"),
        "f1": PositiveClassF1,
        "mcc": lambda: MulticlassMatthewsCorrCoef(num_classes=num_labels),
        "pearson": PearsonCorrCoef,
        "spearman": SpearmanCorrCoef,
    }
    unknown = set(names) - set(factories)
    if unknown:
        raise ValueError(f"task.module.metrics: unknown {sorted(unknown)}; choose from {sorted(factories)}")
    return MetricCollection({name: factories[name]() for name in names})


def classification_loss(logits, labels, num_labels: int, weight: torch.Tensor | None = None):
    """Cross-entropy (each class's term times ``weight``, averaged over the batch's weights, as torch's
    weighted cross-entropy does), or mean squared error for regression (``num_labels == 1``), in fp32."""
    if num_labels == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels, weight=weight)


def balanced_weights(labels: list[int], num_labels: int) -> list[float]:
    """scikit-learn's ``class_weight="balanced"``: rows / (classes x the class's rows), so each class weighs
    as much in the loss as the others together would at its share."""
    counts = torch.bincount(torch.tensor(labels, dtype=torch.long), minlength=num_labels)
    if (counts == 0).any():
        empty = [i for i, c in enumerate(counts.tolist()) if c == 0]
        raise ConfigError(f"task.module.class_weights=balanced: class {empty[0]} has no training rows")
    return (len(labels) / (num_labels * counts.double())).tolist()


def aggregate_windows(docs: torch.Tensor, windows: torch.Tensor, values: torch.Tensor, how: str) -> torch.Tensor:
    """Each document's value [D, ...] (documents 0..D-1, in order) from its windows' ``values``: their
    ``mean``, their ``max`` (elementwise), or the ``first`` window's (``windows == 0``)."""
    count = int(docs.max()) + 1 if len(docs) else 0
    shape = (count, *values.shape[1:])
    index = docs.view(-1, *[1] * (values.dim() - 1)).expand_as(values)
    if how == "first":
        return torch.zeros(shape, dtype=values.dtype).index_copy_(0, docs[windows == 0], values[windows == 0])
    if how == "max":
        return torch.full(shape, float("-inf"), dtype=values.dtype).scatter_reduce_(0, index, values, "amax")
    totals = torch.zeros(shape, dtype=values.dtype).scatter_add_(0, index, values)
    counts = torch.zeros(count, dtype=values.dtype).scatter_add_(0, docs, torch.ones_like(docs, dtype=values.dtype))
    return totals / counts.view(-1, *[1] * (values.dim() - 1))


def row_predictions(batches: list, regression: bool, aggregate: str | None = None) -> list[float]:
    """predict_step's batches as one prediction a row: with long-document windows each row's windows
    aggregated as ``data.windows.aggregate`` says, then its class (or its value for a regression)."""
    if batches and isinstance(batches[0], dict):
        logits = aggregate_windows(torch.cat([b["doc"] for b in batches]), torch.cat([b["window"] for b in batches]),
                                   torch.cat([b["logits"] for b in batches]), aggregate or "mean")
        values = logits.squeeze(-1) if regression else logits.argmax(-1)
        return [float(v) for v in values.tolist()]
    return [float(v) for batch in batches for v in batch.tolist()]


class ClassificationModule(BertTask):
    """Cross-entropy over ``num_labels`` classes, or MSE when ``num_labels == 1``. Metrics are computed
    on every validation set and logged as ``val/<set>/<metric>``; the first set is also ``val/<metric>``."""

    head = "classification"
    head_prefixes = ("classifier.", "head.", "mix_")

    def __init__(
        self,
        model_config: BertConfig,
        optim: OptimSettings,
        vocabulary: Vocabulary | None = None,
        num_labels: int = 2,
        classifier_dropout: float | None = None,
        metrics: list[str] = ["acc"],
        val_sets: list[str] = ["dev"],
        encoder: str = "finetune",
        layers: str = "last",
        pooling: str = "cls",
        class_weights: list[float] | str | None = None,
    ):
        """``encoder=frozen`` trains only the classifier, on the features ``layers`` chooses (the
        feature-based approach; :mod:`bert_exp.model.features`). ``class_weights``: one weight per class
        in the training loss, or ``balanced`` (computed from the training rows: :func:`balanced_weights`)."""
        super().__init__(optim, vocabulary)
        self.config = model_config
        self.num_labels = num_labels
        if class_weights is not None:
            if num_labels == 1:
                raise ConfigError("task.module.class_weights: a regression task (num_labels=1) has no classes")
            if isinstance(class_weights, str) and class_weights != "balanced":
                raise ConfigError(f"task.module.class_weights={class_weights!r}: a list of {num_labels} weights, "
                                 "or balanced")
            if not isinstance(class_weights, str) and (len(class_weights) != num_labels
                                                       or not all(float(w) > 0 for w in class_weights)):
                raise ConfigError(f"task.module.class_weights={list(class_weights)}: {num_labels} positive weights, "
                                 "one per class")
        self.class_weights = class_weights if isinstance(class_weights, str) or class_weights is None \
            else [float(w) for w in class_weights]
        # the loss's weights (not saved: a checkpoint's weights are the model's alone)
        self.register_buffer("loss_weight", None if self.class_weights in (None, "balanced")
                             else torch.tensor(self.class_weights), persistent=False)
        self.model = BertForSequenceClassification(model_config, num_labels, classifier_dropout, layers, pooling)
        self.use_encoder(encoder)
        self.val_sets = list(val_sets)
        self.val_metrics = nn.ModuleList(build_metrics(list(metrics), num_labels) for _ in self.val_sets)

    def forward(self, batch):
        return self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.class_weights == "balanced" and self.loss_weight is None and stage == "fit":  # the loss's alone
            labels = [int(f["label"]) for f in self.trainer.datamodule.datasets["train"]]
            self.loss_weight = torch.tensor(balanced_weights(labels, self.num_labels), device=self.device)
            log.info("class weights (balanced, from %d training rows): %s", len(labels),
                     ", ".join(f"{w:.4g}" for w in self.loss_weight.tolist()))

    def loss(self, logits, labels):
        weight = None if self.loss_weight is None else self.loss_weight.to(logits.device, torch.float32)
        return classification_loss(logits, labels, self.num_labels, weight)

    def training_step(self, batch, batch_idx):
        loss = self.loss(self(batch), batch["labels"])
        self.log("train/loss", loss)  # the progress bar reads it when it refreshes
        self.log_lr()
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        logits = self(batch).float()
        preds = logits.squeeze(-1) if self.num_labels == 1 else logits
        if "doc" in batch:  # long-document windows: scored per document at the epoch's end
            self.window_outputs.setdefault(dataloader_idx, []).append(
                (batch["doc"], batch["window"], preds.detach(), batch["labels"]))
            return
        self.val_metrics[dataloader_idx].update(preds, batch["labels"])

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0):
        """The class index of each example, or its value for a regression head (test-set predictions); with
        long-document windows each window's logits, for :func:`row_predictions` to aggregate."""
        logits = self(batch).float()
        if "doc" in batch:
            return {"doc": batch["doc"].cpu(), "window": batch["window"].cpu(), "logits": logits.cpu()}
        return logits.squeeze(-1) if self.num_labels == 1 else logits.argmax(-1)

    def on_validation_epoch_start(self):
        self.window_outputs: dict[int, list] = {}

    def _score_documents(self) -> None:
        """The windows' predictions of every process, aggregated per document; each process then updates its
        metrics with its share of the documents, which the metrics' own sync at compute() adds up."""
        windows = getattr(self.trainer.datamodule, "windows", None)
        if windows is None:
            return
        outputs, self.window_outputs = getattr(self, "window_outputs", {}), {}
        for index, metrics in enumerate(self.val_metrics):  # every set on every process: the gathers pair up
            local = [(d, w, p, l) for docs, wins, preds, labels in outputs.get(index, [])
                     for d, w, p, l in zip(docs.tolist(), wins.tolist(), preds.cpu(), labels.tolist())]
            everything = gather_objects(local)
            if not everything:
                continue
            docs, wins = torch.tensor([e[0] for e in everything]), torch.tensor([e[1] for e in everything])
            preds, labels = torch.stack([e[2] for e in everything]), torch.tensor([e[3] for e in everything])
            per_doc = aggregate_windows(docs, wins, preds, windows.aggregate)
            truth = aggregate_windows(docs, wins, labels, "first")
            mine = torch.arange(len(per_doc)) % self.trainer.world_size == self.global_rank
            if mine.any():
                metrics.update(per_doc[mine].to(self.device), truth[mine].to(self.device))

    def on_validation_epoch_end(self):
        self._score_documents()
        for index, (name, metrics) in enumerate(zip(self.val_sets, self.val_metrics)):
            values = {key: value.float() for key, value in metrics.compute().items()}
            for key, value in values.items():
                self.log(f"val/{name}/{key}", value, prog_bar=False)
                if index == 0:
                    self.log(f"val/{key}", value, prog_bar=True)
            metrics.reset()

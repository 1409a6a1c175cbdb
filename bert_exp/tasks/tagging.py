"""Token classification (NER, POS): a label for every word, predicted on its first sub-token."""

from __future__ import annotations

import dataclasses
import logging

import torch
import torch.nn.functional as F

from ..metrics.tagging import SCHEMES, entity_scores, word_accuracy
from ..model import BertConfig, BertForTokenClassification
from ..model.hf import Checkpoint
from ..model.modeling import LAYER_CHOICES
from .base import BertTask, Vocabulary
from .optim import OptimSettings

log = logging.getLogger(__name__)
METRICS = ("entity_f1", "accuracy")


class TokenClassificationModule(BertTask):
    """Cross-entropy on the labelled sub-tokens. Validation maps predictions back to words and scores
    every set: ``metric=entity_f1`` logs ``val/<set>/precision|recall|f1`` and ``val/<set>/<type>/...``
    (CoNLL entity rules), ``metric=accuracy`` logs ``val/<set>/accuracy`` (words); the first set is
    also logged without its name (``val/f1``, ``val/accuracy``).

    ``encoder=frozen`` trains only the head (feature-based use), on the features ``layers`` chooses;
    ``head_type=bilstm`` puts the paper's two-layer BiLSTM under the linear layer."""

    head = "token_classification"
    head_prefixes = ("classifier.", "head.", "mix_", "lstm.")

    def __init__(
        self,
        model_config: BertConfig,
        optim: OptimSettings,
        vocabulary: Vocabulary | None = None,
        labels: list[str] | None = None,
        metric: str = "entity_f1",
        scheme: str = "conll",
        classifier_dropout: float | None = None,
        encoder: str = "finetune",
        layers: str = "last",
        head_type: str = "linear",
        lstm_size: int | None = None,
        val_sets: list[str] = ["dev"],
    ):
        super().__init__(optim, vocabulary)
        if not labels:
            raise ValueError("TokenClassificationModule needs the label names (the data module's labels)")
        if metric not in METRICS:
            raise ValueError(f"task.module.metric: {metric!r} is not one of {METRICS}")
        if scheme not in SCHEMES:
            raise ValueError(f"task.module.scheme: {scheme!r} is not one of {SCHEMES}")
        if layers not in LAYER_CHOICES:
            raise ValueError(f"task.module.layers: {layers!r} is not one of {LAYER_CHOICES}")
        self.config = model_config
        self.labels = list(labels)
        self.metric, self.scheme = metric, scheme
        self.model = BertForTokenClassification(model_config, len(self.labels), classifier_dropout, layers,
                                                head_type, lstm_size)
        self.use_encoder(encoder)
        self.val_sets = list(val_sets)
        self._outputs: list[dict] = []

    def forward(self, batch):
        return self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])

    def training_step(self, batch, batch_idx):
        logits = self(batch)
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
        self.log("train/loss", loss)  # the progress bar reads it when it refreshes
        self.log_lr()
        return loss

    # -- evaluation: predictions per word ---------------------------------------------------------

    def on_validation_epoch_start(self):
        self._outputs = [dict() for _ in self.val_sets]

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        preds = self(batch).argmax(-1)
        scored = batch["word_index"] >= 0
        rows = scored.nonzero(as_tuple=True)[0]
        sentences = batch["sentence"][rows].tolist()
        words = batch["word_index"][scored].tolist()
        gold, pred = batch["labels"][scored].tolist(), preds[scored].tolist()
        out = self._outputs[dataloader_idx]
        for key in zip(sentences, words, gold, pred):
            out[key[:2]] = key[2:]

    def _gathered(self, out: dict) -> dict:
        if self.trainer is not None and self.trainer.world_size > 1 and torch.distributed.is_initialized():
            parts = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, out)
            return {k: v for part in parts for k, v in part.items()}
        return out

    def sequences(self, out: dict) -> tuple[list[list[str]], list[list[str]]]:
        """(gold, predicted) label names per sentence, words in order."""
        by_sentence: dict[int, list] = {}
        for (sentence, word), (gold, pred) in sorted(out.items()):
            by_sentence.setdefault(sentence, []).append((gold, pred))
        gold = [[self.labels[g] for g, _ in pairs] for pairs in by_sentence.values()]
        pred = [[self.labels[p] for _, p in pairs] for pairs in by_sentence.values()]
        return gold, pred

    def scores(self, gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
        if self.metric == "accuracy":
            return {"accuracy": word_accuracy(gold, pred)}
        return entity_scores(gold, pred, self.scheme)

    def on_validation_epoch_end(self):
        main = ("accuracy",) if self.metric == "accuracy" else ("precision", "recall", "f1")
        for index, (name, out) in enumerate(zip(self.val_sets, self._outputs)):
            gold, pred = self.sequences(self._gathered(out))
            for key, value in self.scores(gold, pred).items():
                value = torch.tensor(value, dtype=torch.float32)
                self.log(f"val/{name}/{key}", value, sync_dist=False)
                if index == 0 and key in main:
                    self.log(f"val/{key}", value, prog_bar=True, sync_dist=False)
        self._outputs = []

    # -- starting weights -------------------------------------------------------------------------

    def initialise_from(self, ckpt: Checkpoint) -> None:
        """A token-classification checkpoint with other labels (or none recorded) keeps its encoder;
        its head rows are reused for the labels both share, the rest start fresh."""
        weight, bias = ckpt.state_dict.get("classifier.weight"), ckpt.state_dict.get("classifier.bias")
        if ckpt.head != "token_classification" or weight is None or weight.ndim != 2:
            return super().initialise_from(ckpt)
        own_weight = self.model.classifier.weight
        theirs = ckpt.labels or ([f"LABEL_{i}" for i in range(weight.shape[0])])
        if theirs == self.labels and weight.shape == own_weight.shape:
            return super().initialise_from(ckpt)
        state = {k: v for k, v in ckpt.state_dict.items() if not k.startswith("classifier.")}
        super().initialise_from(dataclasses.replace(ckpt, state_dict=state))
        shared = [label for label in self.labels if label in theirs]
        if weight.shape[1] == own_weight.shape[1] and shared:
            with torch.no_grad():
                for label in shared:
                    self.model.classifier.weight[self.labels.index(label)] = weight[theirs.index(label)]
                    if bias is not None:
                        self.model.classifier.bias[self.labels.index(label)] = bias[theirs.index(label)]
        log.warning("%s has labels %s; this task's are %s: head rows taken for %d shared labels, the rest fresh",
                    ckpt.source, theirs, self.labels, len(shared))

"""MLM + NSP pre-training."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from ..data.masking import IGNORE_INDEX
from ..model import BertConfig, BertForPreTraining
from .base import BertTask
from .optim import DEFAULT_NO_DECAY, OptimizerFactory, SchedulerFactory


def mlm_nsp_losses(mlm_logits, nsp_logits, masked_lm_labels, next_sentence_label, nsp: bool = True):
    """(masked-LM cross-entropy over the scored positions, next-sentence cross-entropy or 0), in fp32."""
    mlm_loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), masked_lm_labels.flatten(), ignore_index=IGNORE_INDEX)
    nsp_loss = (F.cross_entropy(nsp_logits.float(), next_sentence_label)
                if nsp else torch.zeros((), device=mlm_loss.device))
    return mlm_loss, nsp_loss


class PretrainingModule(BertTask):
    """Loss = masked-LM cross-entropy over the masked positions + next-sentence cross-entropy."""

    head = "pretraining"
    head_prefixes = ("cls.",)

    def __init__(
        self,
        model_config: BertConfig,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        no_decay: list[str] = list(DEFAULT_NO_DECAY),
        vocab: list[str] | None = None,
        lowercase: bool = True,
        nsp: bool = True,
    ):
        super().__init__(optimizer, scheduler, no_decay, vocab, lowercase)
        self.config = model_config
        self.nsp = nsp
        self.model = BertForPreTraining(model_config)
        self.val_mlm_loss = MeanMetric()
        self.val_mlm_acc = MeanMetric()
        self.val_nsp_acc = MulticlassAccuracy(num_classes=2, average="micro")

    def forward(self, batch: dict[str, torch.Tensor]):
        return self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                          batch["masked_lm_positions"])

    def _losses(self, batch):
        mlm_logits, nsp_logits = self(batch)
        mlm_loss, nsp_loss = mlm_nsp_losses(mlm_logits, nsp_logits, batch["masked_lm_labels"],
                                            batch["next_sentence_label"], self.nsp)
        return mlm_logits, nsp_logits, mlm_loss, nsp_loss

    def training_step(self, batch, batch_idx):
        _, _, mlm_loss, nsp_loss = self._losses(batch)
        loss = mlm_loss + nsp_loss
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/mlm_loss", mlm_loss)
        if self.nsp:
            self.log("train/nsp_loss", nsp_loss)
        self.log_lr()
        return loss

    def validation_step(self, batch, batch_idx):
        mlm_logits, nsp_logits, mlm_loss, _ = self._losses(batch)
        labels = batch["masked_lm_labels"]
        selected = labels != IGNORE_INDEX
        count = selected.sum()
        correct = (mlm_logits.argmax(-1) == labels) & selected
        # weighted by the masked tokens, so the epoch value is the mean over all of them
        self.val_mlm_loss.update(mlm_loss, weight=count)
        self.val_mlm_acc.update(correct.sum() / count.clamp(min=1), weight=count)
        if self.nsp:
            self.val_nsp_acc.update(nsp_logits, batch["next_sentence_label"])

    def on_validation_epoch_end(self):
        loss = self.val_mlm_loss.compute()
        self.log("val/mlm_loss", loss, prog_bar=True)
        self.log("val/mlm_ppl", torch.exp(loss.clamp(max=math.log(1e30))))
        self.log("val/mlm_acc", self.val_mlm_acc.compute())
        self.val_mlm_loss.reset()
        self.val_mlm_acc.reset()
        if self.nsp:
            self.log("val/nsp_acc", self.val_nsp_acc.compute())
            self.val_nsp_acc.reset()

"""Pre-training: BERT's MLM + NSP, and the other objectives of the ``objective`` config group.

* ``mlm_nsp``: masked LM + next-sentence prediction (BERT);
* ``mlm``: masked LM alone (RoBERTa), on one of its four input formats or ``token_blocks`` (``data.packing``);
* ``mlm_sop``: masked LM + sentence-order prediction (ALBERT), on the NSP head (label 1 = swapped);
* ``clm``: left-to-right LM on a causal model (``model.causal``), every next token predicted;
* ``electra``: a small generator's masked LM + ``rtd_weight`` x replaced-token detection by the
  discriminator (ELECTRA), which is the encoder fine-tuning starts from.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from ..data import IGNORE_INDEX
from ..metrics.mean import WeightedMean
from ..model import BertConfig, BertForPreTraining, ElectraForPreTraining
from .base import BertTask, Vocabulary
from .optim import OptimSettings


def mlm_nsp_losses(mlm_logits, nsp_logits, masked_lm_labels, next_sentence_label, nsp: bool = True):
    """(masked-LM cross-entropy over the scored positions, next-sentence cross-entropy or 0), in fp32."""
    mlm_loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), masked_lm_labels.flatten(), ignore_index=IGNORE_INDEX)
    nsp_loss = (F.cross_entropy(nsp_logits.float(), next_sentence_label)
                if nsp else torch.zeros((), device=mlm_loss.device))
    return mlm_loss, nsp_loss


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: position t predicts the token at t + 1 (``labels`` are the input ids,
    -100 at padding), in fp32. ``logits`` [batch, seq, vocab]."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX)


def original_ids(masked_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The batch before masking: the labels written back at their positions."""
    selected = labels != IGNORE_INDEX
    current = masked_ids.gather(1, positions)
    return masked_ids.scatter(1, positions, torch.where(selected, labels, current))


def replace_tokens(masked_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor,
                   sampled: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ELECTRA's corruption: the generator's samples at the masked positions, the original tokens
    elsewhere. Returns (discriminator input, replaced-token labels [batch, seq]: 1 where the token differs
    from the original, 0 where it is the original (a sample equal to the original counts as original),
    -100 at padding)."""
    original = original_ids(masked_ids, positions, labels)
    selected = labels != IGNORE_INDEX
    corrupted = original.scatter(1, positions, torch.where(selected, sampled, original.gather(1, positions)))
    rtd_labels = (corrupted != original).long().masked_fill(attention_mask == 0, IGNORE_INDEX)
    return corrupted, rtd_labels


def rtd_loss(logits: torch.Tensor, rtd_labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the replaced-token logits over the non-padding tokens, in fp32."""
    valid = rtd_labels != IGNORE_INDEX
    return F.binary_cross_entropy_with_logits(logits[valid].float(), rtd_labels[valid].float())


SENTENCE_TASKS = {"mlm_nsp": "nsp", "mlm_sop": "sop"}  # the objectives with a sentence-pair head

# Where the validation MLM loss is also split by position: [0, 64), [64, 128), [128, 256), [256, ...).
# A second phase at a longer length (BERT's, §A.2) starts with the positions past the first phase's
# untrained; the overall loss hides that, these ranges show it (logged where two or more hold masks).
POSITION_RANGE_STARTS = (0, 64, 128, 256)


def position_range_names(starts=POSITION_RANGE_STARTS) -> list[str]:
    ends = [f"{end - 1}" for end in starts[1:]] + ["end"]
    return [f"{start}-{end}" for start, end in zip(starts, ends)]


def loss_by_position_range(token_losses: torch.Tensor, positions: torch.Tensor, selected: torch.Tensor,
                           starts=POSITION_RANGE_STARTS) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the losses, number of masked tokens) per position range; ``token_losses``, ``positions``
    and ``selected`` are [batch, predictions]."""
    # fixed shapes throughout (no boolean indexing, bucketize or bincount): one compiled graph on XLA
    index = sum((positions >= start).long() for start in starts[1:])
    weight = selected.float()
    sums = torch.zeros(len(starts), dtype=torch.float32, device=token_losses.device).index_add_(
        0, index.flatten(), (token_losses.float() * weight).flatten())
    counts = torch.zeros(len(starts), dtype=torch.float32, device=token_losses.device).index_add_(
        0, index.flatten(), weight.flatten())
    return sums, counts


class PretrainingModule(BertTask):
    """Loss = masked-LM cross-entropy over the masked positions + next-sentence cross-entropy (BERT),
    or the loss of another ``objective`` (see the module docstring)."""

    head = "pretraining"
    head_prefixes = ("cls.",)

    def __init__(
        self,
        model_config: BertConfig,
        optim: OptimSettings,
        vocabulary: Vocabulary | None = None,
        nsp: bool = True,
        objective: str = "mlm_nsp",
        generator_size: float = 0.25,
        rtd_weight: float = 50.0,
    ):
        """``nsp=False`` with ``objective="mlm_nsp"`` is the older spelling of ``objective="mlm"``;
        ``generator_size`` (ELECTRA's generator hidden size as a fraction of the model's) and
        ``rtd_weight`` (the weight of replaced-token detection) apply to ``objective="electra"``."""
        super().__init__(optim, vocabulary)
        objectives = ("mlm_nsp", "mlm", "mlm_sop", "clm", "electra")
        if objective not in objectives:
            raise ValueError(f"task.module.objective={objective!r}: expected one of {', '.join(objectives)}")
        if not nsp and objective != "mlm_nsp":
            raise ValueError(f"data.nsp=false is the older spelling of objective=mlm; with objective={objective} "
                             "leave it at true")
        objective = objective if nsp else "mlm"
        if (objective == "clm") != model_config.causal:
            raise ValueError(f"objective={objective} with model.causal={model_config.causal}: a left-to-right LM "
                             "needs model.causal=true, and the masked objectives a bidirectional model")
        if objective in SENTENCE_TASKS and model_config.classifier_head != "pooler":
            raise ValueError(f"objective={objective} reads the pooler, which model.classifier_head="
                             f"{model_config.classifier_head} leaves out: choose objective=mlm")
        if objective == "electra" and not 0 < generator_size <= 1:
            raise ValueError(f"task.module.generator_size={generator_size}: expected a fraction in (0, 1]")
        self.config = model_config
        self.objective = objective
        self.sentence_task = SENTENCE_TASKS.get(objective)  # nsp, sop or None
        self.nsp = self.sentence_task is not None
        self.rtd_weight = rtd_weight
        if objective == "electra":
            self.head = None  # what is kept is the discriminator: exported as a plain BertModel
            # started from a BERT checkpoint, the generator and the detection head start fresh
            self.head_prefixes = ("cls.", "generator.", "discriminator_predictions.")
            self.model = ElectraForPreTraining(model_config, generator_size)
        else:
            self.model = BertForPreTraining(model_config)
        self.freeze_parameters(self.unreached_prefixes())
        # metrics that never read the device in an update (no host sync per batch; one graph on XLA)
        self.val_mlm_loss = WeightedMean()
        self.val_mlm_acc = WeightedMean()
        self.val_nsp_acc = MulticlassAccuracy(num_classes=2, average="micro", validate_args=False)
        self.val_rtd_loss = WeightedMean()
        self.val_rtd_acc = WeightedMean()
        self.val_position_loss = torch.nn.ModuleList(WeightedMean() for _ in POSITION_RANGE_STARTS)

    def unreached_prefixes(self) -> tuple[str, ...]:
        """Parameters no loss of this objective reaches: the pooler, and the NSP head where there is no
        sentence task (mlm, clm), or ELECTRA's discriminator pooler."""
        if self.objective == "electra":
            return ("bert.pooler.",)
        return () if self.nsp else ("bert.pooler.", "cls.seq_relationship.")

    def forward(self, batch: dict[str, torch.Tensor]):
        return self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                          batch["masked_lm_positions"])

    def _losses(self, batch):
        mlm_logits, nsp_logits = self(batch)
        mlm_loss, nsp_loss = mlm_nsp_losses(mlm_logits, nsp_logits, batch["masked_lm_labels"],
                                            batch["next_sentence_label"], self.nsp)
        return mlm_logits, nsp_logits, mlm_loss, nsp_loss

    def _clm(self, batch):
        logits, _ = self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        return logits, causal_lm_loss(logits, batch["labels"])

    def _electra(self, batch):
        """(generator logits, RTD logits, RTD labels, MLM loss, RTD loss). The generator's samples (from
        its softmax, without gradient) replace the masked tokens for the discriminator."""
        ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        positions, labels = batch["masked_lm_positions"], batch["masked_lm_labels"]
        mlm_logits = self.model.generate(ids, types, mask, positions)
        mlm_loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
        with torch.no_grad():
            probs = torch.softmax(mlm_logits.detach().float(), dim=-1)
            sampled = torch.multinomial(probs.flatten(0, 1), 1).view(labels.shape)
        corrupted, rtd_labels = replace_tokens(ids, positions, labels, sampled, mask)
        rtd_logits = self.model.discriminate(corrupted, types, mask)
        return mlm_logits, rtd_logits, rtd_labels, mlm_loss, rtd_loss(rtd_logits, rtd_labels)

    def training_step(self, batch, batch_idx):
        loss = self.training_loss(batch)
        if self.ramped_accumulation is None:
            return loss
        self.ramped_accumulation.train_on(self, loss)  # the batch ramp: this module steps the optimizer
        return loss.detach()

    def training_loss(self, batch):
        if self.objective == "clm":
            _, lm_loss = self._clm(batch)
            self.log("train/loss", lm_loss)
            self.log("train/lm_loss", lm_loss)
            self.log_lr()
            return lm_loss
        if self.objective == "electra":
            _, _, _, mlm_loss, rtd = self._electra(batch)
            loss = mlm_loss + self.rtd_weight * rtd
            self.log("train/loss", loss)  # the progress bar reads it when it refreshes
            self.log("train/mlm_loss", mlm_loss)
            self.log("train/rtd_loss", rtd)
            self.log_lr()
            return loss
        _, _, mlm_loss, nsp_loss = self._losses(batch)
        loss = mlm_loss + nsp_loss
        self.log("train/loss", loss)  # the progress bar reads it when it refreshes
        self.log("train/mlm_loss", mlm_loss)
        if self.nsp:
            self.log(f"train/{self.sentence_task}_loss", nsp_loss)
        self.log_lr()
        return loss

    def validation_step(self, batch, batch_idx):
        if self.objective == "clm":
            logits, lm_loss = self._clm(batch)
            labels = batch["labels"][:, 1:]
            selected = labels != IGNORE_INDEX
            count = selected.sum()
            correct = (logits[:, :-1].argmax(-1) == labels) & selected
            self.val_mlm_loss.update(lm_loss, weight=count)
            self.val_mlm_acc.update(correct.sum() / count.clamp(min=1), weight=count)
            return
        if self.objective == "electra":
            mlm_logits, rtd_logits, rtd_labels, mlm_loss, rtd = self._electra(batch)
            valid = rtd_labels != IGNORE_INDEX
            tokens = valid.sum()
            rtd_correct = ((rtd_logits > 0).long() == rtd_labels) & valid
            self.val_rtd_loss.update(rtd, weight=tokens)
            self.val_rtd_acc.update(rtd_correct.sum() / tokens.clamp(min=1), weight=tokens)
        else:
            mlm_logits, nsp_logits, mlm_loss, _ = self._losses(batch)
        labels = batch["masked_lm_labels"]
        selected = labels != IGNORE_INDEX
        count = selected.sum()
        correct = (mlm_logits.argmax(-1) == labels) & selected
        # weighted by the masked tokens, so the epoch value is the mean over all of them
        self.val_mlm_loss.update(mlm_loss, weight=count)
        self.val_mlm_acc.update(correct.sum() / count.clamp(min=1), weight=count)
        token_losses = F.cross_entropy(mlm_logits.flatten(0, 1).float(), labels.flatten(), reduction="none",
                                       ignore_index=IGNORE_INDEX).view(labels.shape)
        sums, counts = loss_by_position_range(token_losses, batch["masked_lm_positions"], selected)
        for metric, total, n in zip(self.val_position_loss, sums, counts):
            metric.update(total / n.clamp(min=1), weight=n)  # an empty range adds nothing
        if self.nsp:
            self.val_nsp_acc.update(nsp_logits, batch["next_sentence_label"])

    def _log_position_ranges(self, name: str) -> None:
        values = [metric.compute() for metric in self.val_position_loss]  # NaN where no mask fell
        for metric in self.val_position_loss:
            metric.reset()
        if sum(bool(torch.isfinite(v)) for v in values) >= 2:
            for label, value in zip(position_range_names(), values):
                if torch.isfinite(value):
                    self.log(f"val/{name}_loss_by_position/{label}", value)

    def on_validation_epoch_end(self):
        loss = self.val_mlm_loss.compute()
        name = "lm" if self.objective == "clm" else "mlm"  # next-token or masked-token
        self.log(f"val/{name}_loss", loss, prog_bar=True)
        self.log(f"val/{name}_ppl", torch.exp(loss.clamp(max=math.log(1e30))))
        self.log(f"val/{name}_acc", self.val_mlm_acc.compute())
        self.val_mlm_loss.reset()
        self.val_mlm_acc.reset()
        if self.objective != "clm":
            self._log_position_ranges(name)
        if self.nsp:
            self.log(f"val/{self.sentence_task}_acc", self.val_nsp_acc.compute())
            self.val_nsp_acc.reset()
        if self.objective == "electra":
            rtd = self.val_rtd_loss.compute()
            self.log("val/rtd_loss", rtd)
            self.log("val/rtd_acc", self.val_rtd_acc.compute())
            self.log("val/loss", loss + self.rtd_weight * rtd)
            self.val_rtd_loss.reset()
            self.val_rtd_acc.reset()

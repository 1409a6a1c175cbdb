"""Extractive question answering (SQuAD): a linear span head; evaluation with the official metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch.nn.functional as F

from ..metrics.squad import v2_summary
from ..model import BertConfig, BertForQuestionAnswering
from ..records import write_json
from .base import BertTask, Vocabulary, gather_objects
from .optim import OptimSettings


def span_loss(start_logits, end_logits, start_positions, end_positions):
    """Mean of the start and end cross-entropies, in fp32; positions outside the sequence are ignored,
    as HuggingFace does."""
    length = start_logits.shape[1]
    start_positions, end_positions = start_positions.clamp(0, length), end_positions.clamp(0, length)
    return (F.cross_entropy(start_logits.float(), start_positions, ignore_index=length)
            + F.cross_entropy(end_logits.float(), end_positions, ignore_index=length)) / 2


class QuestionAnsweringModule(BertTask):
    """Loss = mean of the start and end cross-entropies. At the end of validation the logits of all
    features (from every rank, each feature once) are post-processed into answers per question, scored
    as the official scripts do, logged as ``val/exact_match`` and ``val/f1``, and written to
    ``predictions.json`` (and ``null_odds.json`` for v2.0) in the run directory."""

    head = "question_answering"
    head_prefixes = ("qa_outputs.", "head.", "mix_")

    def __init__(
        self,
        model_config: BertConfig,
        optim: OptimSettings,
        vocabulary: Vocabulary | None = None,
        encoder: str = "finetune",
        layers: str = "last",
    ):
        """``encoder=frozen`` trains only the span head, on the features ``layers`` chooses (the
        feature-based approach; :mod:`bert_exp.model.features`)."""
        super().__init__(optim, vocabulary)
        self.config = model_config
        self.model = BertForQuestionAnswering(model_config, layers)
        self.use_encoder(encoder)
        self._outputs: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.evaluator = None  # handed over by the runner: bert_exp.data.tasks.squad.SquadEvaluator

    def closing_lines(self, metrics: dict) -> list[str]:
        """SQuAD 2.0: F1 and EM at the threshold in use, overall, HasAns and NoAns, and best_f1 apart."""
        if self.evaluator is None or not self.evaluator.version_2:
            return []
        line = v2_summary(metrics, self.evaluator.selection.null_score_diff_threshold)
        return [line] if line else []

    def use_evaluator(self, evaluator) -> None:
        """The validation questions and how to score them (examples, features, answer selection)."""
        self.evaluator = evaluator

    def forward(self, batch):
        return self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])

    def training_step(self, batch, batch_idx):
        start, end = self(batch)
        loss = span_loss(start, end, batch["start_positions"], batch["end_positions"])
        self.log("train/loss", loss)  # the progress bar reads it when it refreshes
        self.log_lr()
        return loss

    def validation_step(self, batch, batch_idx):
        start, end = self(batch)
        lengths = batch["attention_mask"].sum(1).tolist()
        for index, s, e, n in zip(batch["feature_index"].tolist(), start.float().cpu().numpy(),
                                  end.float().cpu().numpy(), lengths):
            self._outputs.append((index, s[:n], e[:n]))

    def on_validation_epoch_end(self):
        outputs, self._outputs = gather_objects(self._outputs), []
        if self.trainer.sanity_checking:
            return
        evaluator = self.evaluator
        if evaluator is None:
            raise RuntimeError("QuestionAnsweringModule needs an evaluator: call use_evaluator() before fitting")
        by_index = {index: (s, e) for index, s, e in outputs}  # a feature repeated by a sampler counts once
        if len(by_index) != len(evaluator.scored_features):
            raise RuntimeError(f"validation produced logits for {len(by_index)} of "
                               f"{len(evaluator.scored_features)} features")
        starts = [by_index[i][0] for i in range(len(by_index))]
        ends = [by_index[i][1] for i in range(len(by_index))]
        predictions, null_odds, metrics = evaluator.evaluate(starts, ends)
        for key, value in metrics.items():
            # every rank gathered every feature, so every rank logs the same values (checkpointing reads them)
            self.log(f"val/{key}", float(value), prog_bar=key in ("exact_match", "f1"))
        if self.trainer.is_global_zero:
            out = Path(self.trainer.default_root_dir)
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / "predictions.json", predictions, indent=1, ensure_ascii=False)
            if evaluator.version_2:
                write_json(out / "null_odds.json", null_odds, indent=1)

"""Metrics torchmetrics lacks: SQuAD EM/F1 as the official evaluation scripts define them."""

from .squad import evaluate_v1, evaluate_v2, normalize_answer

__all__ = ["evaluate_v1", "evaluate_v2", "normalize_answer"]

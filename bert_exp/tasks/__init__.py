"""LightningModules for pre-training and the downstream tasks, and the optimisation recipe."""

from .base import BertTask, Vocabulary
from .classification import ClassificationModule
from .optim import OptimSettings, linear_warmup_decay, parameter_groups
from .pretraining import PretrainingModule
from .question_answering import QuestionAnsweringModule
from .tagging import TokenClassificationModule

__all__ = ["BertTask", "ClassificationModule", "OptimSettings", "PretrainingModule", "QuestionAnsweringModule", "TokenClassificationModule", "Vocabulary", "linear_warmup_decay", "parameter_groups"]

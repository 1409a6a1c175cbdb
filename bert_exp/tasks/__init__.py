"""LightningModules for pre-training and the downstream tasks, and the optimisation recipe."""

from .base import BertTask, Vocabulary
from .classification import ClassificationModule
from .lamb import Lamb
from .optim import OptimSettings, linear_warmup_decay, parameter_groups, warmup_stable_decay
from .pretraining import PretrainingModule
from .question_answering import QuestionAnsweringModule
from .tagging import TokenClassificationModule

__all__ = ["BertTask", "ClassificationModule", "OptimSettings", "PretrainingModule", "QuestionAnsweringModule", "TokenClassificationModule", "Vocabulary", "Lamb", "linear_warmup_decay", "parameter_groups", "warmup_stable_decay"]

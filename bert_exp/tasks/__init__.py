"""LightningModules for pre-training and the downstream tasks, and the optimisation recipe."""

from .base import BertTask, resolve_checkpoint
from .optim import linear_warmup_decay, parameter_groups
from .pretraining import PretrainingModule

__all__ = ["BertTask", "PretrainingModule", "linear_warmup_decay", "parameter_groups", "resolve_checkpoint"]

"""Data: tokenizer, corpus reading, instance creation, masking, and the DataModules."""

from .masking import PretrainingCollator, SpecialIds, mask_tokens
from .pretraining import PretrainingDataModule, TokenizerSpec

__all__ = ["PretrainingCollator", "PretrainingDataModule", "SpecialIds", "TokenizerSpec", "mask_tokens"]

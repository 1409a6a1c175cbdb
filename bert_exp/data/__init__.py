"""Data: tokenizer, corpus reading, instance creation, masking, and the DataModules."""

from .glue import GlueDataModule
from .masking import PretrainingCollator, SpecialIds, mask_tokens
from .pretraining import PretrainingDataModule, TokenizerSpec
from .squad import SquadDataModule

__all__ = ["GlueDataModule", "PretrainingCollator", "PretrainingDataModule", "SpecialIds", "SquadDataModule", "TokenizerSpec",
           "mask_tokens"]

"""Data: tokenizer, corpus reading, instance creation, masking, and the DataModules."""

from .glue import GlueDataModule
from .masking import PretrainingCollator, SpecialIds, mask_tokens
from .pretraining import PretrainingDataModule, TokenizerSpec
from .squad import SquadDataModule
from .tagging import TaggingDataModule

__all__ = ["GlueDataModule", "PretrainingCollator", "PretrainingDataModule", "SpecialIds", "SquadDataModule", "TaggingDataModule", "TokenizerSpec",
           "mask_tokens"]

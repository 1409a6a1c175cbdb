"""Data: tokenizer, corpus reading, instance creation, masking, and the DataModules."""

from .corpus import InstanceSettings
from .glue import GlueDataModule
from .loading import LoaderSettings
from .masking import MaskingSettings, PretrainingCollator, SpecialIds, mask_tokens
from .pretraining import PretrainingDataModule, TokenizerSpec
from .squad import SquadDataModule
from .tagging import TaggingDataModule

__all__ = ["GlueDataModule", "InstanceSettings", "LoaderSettings", "MaskingSettings", "PretrainingCollator", "PretrainingDataModule", "SpecialIds", "SquadDataModule", "TaggingDataModule", "TokenizerSpec",
           "mask_tokens"]

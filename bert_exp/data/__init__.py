"""Data: tokenizer, corpus reading, instance creation, masking, and the DataModules.

The names below are imported when first used, so a process that needs one algorithm (a data
preparation worker) does not import Lightning with the DataModules."""

from importlib import import_module

_WHERE = {
    "GlueDataModule": ".glue", "InstanceSettings": ".corpus", "LoaderSettings": ".loading",
    "MaskingSettings": ".masking", "PretrainingCollator": ".masking", "PretrainingDataModule": ".pretraining",
    "SpecialIds": ".masking", "SquadDataModule": ".squad", "TaggingDataModule": ".tagging",
    "TokenizerSpec": ".pretraining", "mask_tokens": ".masking",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_WHERE)

"""Data, in two flows and the parts they share.

- ``corpus/``: the pre-training path: read corpus files -> tokenize (train the vocabulary) -> instances
  -> prepare (litdata chunks) -> stream, and the pre-training DataModule.
- ``tasks/``: the fine-tuning data sets: GLUE-style TSV, SQuAD, tagging (CoNLL).
- here: what both use: ``tokenizer.py``, ``base.py`` (the DataModules' base), ``loading.py``,
  ``sampling.py``, ``hashing.py``.

The names below are imported when first used, so a process that needs one algorithm (a data
preparation worker) does not import Lightning with the DataModules. Hydra's ``_target_`` values name
them here (``bert_exp.data.PretrainingDataModule``)."""

from importlib import import_module

# name -> the module that defines it (relative to this package)
_WHERE = {
    "CausalLMCollator": ".corpus.masking", "GlueDataModule": ".tasks.glue", "IGNORE_INDEX": ".corpus.masking",
    "InstanceSettings": ".corpus.groups", "LoaderSettings": ".loading", "MaskingSettings": ".corpus.masking",
    "PrepareSettings": ".corpus.preparation", "PretrainingCollator": ".corpus.masking",
    "PretrainingDataModule": ".corpus.datamodule", "SpecialIds": ".tokenizer", "SquadDataModule": ".tasks.squad",
    "TaggingDataModule": ".tasks.tagging", "TokenizerSpec": ".corpus.datamodule", "mask_tokens": ".corpus.masking",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_WHERE)

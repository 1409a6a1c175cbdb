"""The fine-tuning data sets: ``glue.py`` (GLUE-style TSV: sentence(-pair) classification and
regression), ``squad.py`` (SQuAD v1.1/v2.0: features, post-processing, the evaluator), ``tagging.py``
(CoNLL / CoNLL-U token classification). Each is a DataModule over ``bert_exp.data.base``.

The names below are imported when first used (the DataModules import Lightning)."""

from importlib import import_module

# name -> the module that defines it (relative to this package)
_WHERE = {
    "GlueDataModule": ".glue", "SquadDataModule": ".squad", "SquadEvaluator": ".squad", "SquadExample": ".squad",
    "TaggingDataModule": ".tagging", "make_features": ".squad", "read_conll": ".tagging",
    "read_conllu": ".tagging", "read_squad": ".squad", "read_examples": ".glue", "read_tsv": ".glue", "span_candidates": ".squad",
    "windows": ".tagging",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_WHERE)

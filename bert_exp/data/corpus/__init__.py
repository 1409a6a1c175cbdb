"""The pre-training data path, in the order data flows through it:

- read: ``files.py`` (which files, formats, decompression, decoding; ``CorpusError``), ``tables.py``
  (Parquet, Arrow, JSON Lines), ``text.py`` (documents, sentences, the text a vocabulary is trained on),
  ``sources.py`` (s3:// and ``datasets`` inputs staged into the cache);
- tokenize: the vocabulary is trained by ``datamodule.py`` with ``bert_exp.data.tokenizer``;
- keys: ``keys.py`` (what the vocabulary's and the prepared data's caches are keyed by: content and
  options, never paths; and the check that what was read is what was hashed);
- instances: ``instances.py`` (BERT's, RoBERTa's and ALBERT's instance algorithms), ``groups.py`` (a group
  of files' documents -> its instances, ``InstanceSettings``, the data report), ``overlap.py`` (documents
  that share text with an evaluation set);
- prepare: ``preparation.py`` (groups in worker processes -> litdata chunks), ``storage.py`` (a directory
  or s3://), ``integrity.py`` (identity, checksums, token ids);
- stream: ``streaming.py`` (the prepared chunks in training), ``masking.py`` (the collators);
  ``datamodule.py``: the pre-training DataModule that runs it all.

The names below are imported when first used: a preparation worker imports ``preparation`` alone,
without Lightning."""

from importlib import import_module

# name -> the module that defines it (relative to this package)
_WHERE = {
    "CausalLMCollator": ".masking", "CorpusError": ".files", "DatasetSource": ".sources",
    "IGNORE_INDEX": ".masking", "InstanceSettings": ".groups", "Location": ".storage",
    "MaskingSettings": ".masking", "PrepareSettings": ".preparation", "PreparedDataError": ".storage",
    "PretrainingCollator": ".masking", "PretrainingDataModule": ".datamodule", "ReadReport": ".files",
    "TokenizerSpec": ".datamodule", "corpus_text_bytes": ".text", "expand_inputs": ".files",
    "mask_tokens": ".masking", "parse_bytes": ".preparation", "prepare": ".preparation",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_WHERE)
